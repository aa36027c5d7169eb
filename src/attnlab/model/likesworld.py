"""LikesWorld: the lecture's toy world of who likes what (§2.2, code 01).

A sequence states 2–6 facts and then asks about two of the people::

    <bos> eve likes tea . dan likes jam . hal likes figs . gus likes plums . q dan jam . q gus plums . <eos>
          └──────────────────── facts ─────────────────────┘ └───────── questions ──────┘

The token after ``q dan`` is the answer: to get it right a model must find ``dan likes ___`` in the
context and copy the item. Names and items are drawn without replacement within a sequence, so the
"pick a random item of the context" baseline answers 1/n of the questions of an n-fact sequence
(``baseline_accuracy`` computes its mean over a set; about 29% for n uniform in 2..6).

``question_format="gap"`` asks ``q dan ? a jam`` instead: the answer sits two tokens after the name.
That is the first plan of the lecture's "plan vs actual" — the tiny model stalls near the baseline
with it.

Splits are disjoint by construction: a *world* (the ordered list of facts) belongs to the test split
iff a fixed hash of it is 0 mod ``TEST_MODULUS``; the training sampler never yields such a world, so
no test sequence (nor any sequence with a test sequence's facts) is ever trained on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

# Bump when the generator or the vocabulary changes: cached checkpoints then become stale.
DATA_VERSION = 2
TEST_MODULUS = 10  # one world in ten is a test world

SPECIALS = ("<pad>", "<bos>", "<eos>", "likes", ".", "q", "?", "a")
NAMES = ("amy", "bob", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "liz")
ITEMS = ("tea", "jam", "figs", "plums", "rice", "milk", "eggs", "nuts", "soup", "cake", "pears", "limes")
VOCAB = SPECIALS + NAMES + ITEMS
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
PAD, BOS, EOS, LIKES, DOT, Q, QMARK, A = (TOKEN_ID[t] for t in SPECIALS)
NAME0 = len(SPECIALS)
ITEM0 = NAME0 + len(NAMES)

QUESTION_FORMATS = ("adjacent", "gap")


def tokenize(text: str) -> list[int]:
    """Space-separated tokens -> ids; unknown tokens raise ValueError."""
    out = []
    for t in text.split():
        if t not in TOKEN_ID:
            raise ValueError(f"unknown LikesWorld token {t!r}; the vocabulary is {list(VOCAB)}")
        out.append(TOKEN_ID[t])
    return out


def detokenize(ids) -> str:
    """Ids -> space-separated tokens (padding dropped)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    return " ".join(VOCAB[i] for i in ids if i != PAD)


@dataclass
class Batch:
    """A padded batch of LikesWorld sequences (right-padded with ``<pad>``).

    tokens: (B, N) long. lengths: (B,) real lengths. answer_mask: (B, N) bool, True at answer tokens
    (the model predicts tokens[:, t] from position t - 1). n_facts: (B,). asked: (B, K) index of the
    fact each question asks about. question_format: "adjacent" or "gap".
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    answer_mask: torch.Tensor
    n_facts: torch.Tensor
    asked: torch.Tensor
    question_format: str = "adjacent"

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def question_len(self) -> int:
        return 4 if self.question_format == "adjacent" else 6

    def answer_positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch index, position) of every answer token, each of shape (n_answers,)."""
        return torch.nonzero(self.answer_mask, as_tuple=True)

    def owner_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch index, item position, owner-name position) for every fact of every sequence."""
        b, i = [], []
        for row, n in enumerate(self.n_facts.tolist()):
            b += [row] * n
            i += list(range(n))
        b, i = torch.tensor(b), torch.tensor(i)
        return b, 3 + 4 * i, 1 + 4 * i

    def lookup_triples(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch index, query position, correct-item position) for every question.

        The query position is the one that predicts the answer: the questioned name in
        ``q dan jam`` (the ``a`` in the gap format); the target is the item of that person's fact.
        """
        b, pos = self.answer_positions()
        k = torch.zeros_like(b)
        for j in range(1, len(b)):  # index of the question within its sequence
            k[j] = k[j - 1] + 1 if b[j] == b[j - 1] else 0
        fact = self.asked[b, k]
        return b, pos - 1, 3 + 4 * fact

    def to(self, device) -> Batch:
        return Batch(self.tokens.to(device), self.lengths.to(device), self.answer_mask.to(device),
                     self.n_facts.to(device), self.asked.to(device), self.question_format)


def _world_hash(names: np.ndarray, items: np.ndarray, n: np.ndarray) -> np.ndarray:
    """A fixed 64-bit hash of each world (its n ordered facts); names/items (B, F), F >= n, with
    anything past n ignored (so the padding width does not matter)."""
    mask = np.uint64(0xFFFFFFFFFFFFFFFF)
    h = n.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for f in range(names.shape[1]):
            v = (names[:, f] * 16 + items[:, f] + 1).astype(np.uint64)
            g = (h ^ v) * np.uint64(0x100000001B3) & mask
            g ^= g >> np.uint64(29)
            h = np.where(f < n, g, h)
        h = (h ^ (h >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9) & mask
        h ^= h >> np.uint64(32)
    return h


@dataclass(frozen=True)
class LikesWorld:
    """The generator. ``sample`` draws sequences of one split from a numpy Generator.

    min_facts..max_facts facts per sequence (uniform), ``n_questions`` distinct people asked.
    """

    min_facts: int = 2
    max_facts: int = 6
    n_questions: int = 2
    question_format: str = "adjacent"

    def __post_init__(self):
        if not (1 <= self.min_facts <= self.max_facts <= min(len(NAMES), len(ITEMS))):
            raise ValueError(f"need 1 <= min_facts <= max_facts <= {len(NAMES)}, got {self.min_facts}, {self.max_facts}")
        if not (1 <= self.n_questions <= self.min_facts):
            raise ValueError(f"n_questions must be in 1..min_facts ({self.min_facts}), got {self.n_questions}")
        if self.question_format not in QUESTION_FORMATS:
            raise ValueError(f"question_format must be one of {QUESTION_FORMATS}, got {self.question_format!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def question_len(self) -> int:
        return 4 if self.question_format == "adjacent" else 6

    @property
    def max_len(self) -> int:
        return 2 + 4 * self.max_facts + self.question_len * self.n_questions

    def _draw(self, rng: np.random.Generator, B: int):
        n = rng.integers(self.min_facts, self.max_facts + 1, size=B)
        names = np.argsort(rng.random((B, len(NAMES))), axis=1)[:, : self.max_facts]
        items = np.argsort(rng.random((B, len(ITEMS))), axis=1)[:, : self.max_facts]
        F = np.arange(self.max_facts)
        names = np.where(F < n[:, None], names, -1)
        items = np.where(F < n[:, None], items, -1)
        # the questions ask about n_questions distinct facts among the first n
        order = np.argsort(np.where(F < n[:, None], rng.random((B, self.max_facts)), 2.0), axis=1)
        asked = order[:, : self.n_questions]
        return n, names, items, asked

    def _build(self, n, names, items, asked) -> Batch:
        B = len(n)
        lengths = 2 + 4 * n + self.question_len * self.n_questions
        N = int(lengths.max())
        tok = np.full((B, N), PAD, dtype=np.int64)
        ans = np.zeros((B, N), dtype=bool)
        tok[:, 0] = BOS
        rows = np.arange(B)
        for f in range(self.max_facts):
            r = rows[f < n]
            p = 1 + 4 * f
            tok[r, p], tok[r, p + 1], tok[r, p + 2], tok[r, p + 3] = NAME0 + names[r, f], LIKES, ITEM0 + items[r, f], DOT
        for k in range(self.n_questions):
            p = 1 + 4 * n + self.question_len * k  # position of "q"
            who = asked[:, k]
            name, item = NAME0 + names[rows, who], ITEM0 + items[rows, who]
            tok[rows, p], tok[rows, p + 1] = Q, name
            if self.question_format == "gap":
                tok[rows, p + 2], tok[rows, p + 3] = QMARK, A
            a = p + self.question_len - 2
            tok[rows, a], tok[rows, a + 1] = item, DOT
            ans[rows, a] = True
        tok[rows, lengths - 1] = EOS
        return Batch(torch.from_numpy(tok), torch.from_numpy(lengths), torch.from_numpy(ans),
                     torch.from_numpy(n), torch.from_numpy(asked), self.question_format)

    def sample(self, batch_size: int, rng: np.random.Generator, split: str = "train") -> Batch:
        """``batch_size`` sequences of ``split`` ("train" or "test"), drawn from ``rng``."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        want_test = split == "test"
        parts, have = [], 0
        while have < batch_size:
            m = max(64, 2 * (batch_size - have) * (TEST_MODULUS if want_test else 1))
            n, names, items, asked = self._draw(rng, m)
            keep = (_world_hash(names, items, n) % np.uint64(TEST_MODULUS) == 0) == want_test
            keep &= np.cumsum(keep) <= batch_size - have
            parts.append((n[keep], names[keep], items[keep], asked[keep]))
            have += int(keep.sum())
        return self._build(*(np.concatenate(x) for x in zip(*parts)))

    def test_set(self, size: int = 2000, seed: int = 12345) -> Batch:
        """The held-out set used to report accuracy: ``size`` test-split sequences from ``seed``."""
        return self.sample(size, np.random.default_rng([seed, DATA_VERSION]), split="test")

    def prompts(self, count: int, seed: int = 2024, split: str = "test") -> list[list[int]]:
        """Generation prompts ``<bos> facts… q name`` (ending at the first questioned name)."""
        batch = self.sample(count, np.random.default_rng([seed, DATA_VERSION]), split=split)
        b, pos = batch.answer_positions()
        first = {}
        for row, p in zip(b.tolist(), pos.tolist()):
            first.setdefault(row, p)
        return [batch.tokens[r, : first[r] - self.question_len + 4].tolist() for r in range(len(batch))]


def is_test_world(tokens) -> bool:
    """True when the facts of this token sequence form a test-split world."""
    ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    names, items = [], []
    p = 1
    while p + 3 < len(ids) and ids[p + 1] == LIKES:
        names.append(ids[p] - NAME0)
        items.append(ids[p + 2] - ITEM0)
        p += 4
    n = np.array([len(names)])
    return bool(_world_hash(np.array([names]), np.array([items]), n)[0] % np.uint64(TEST_MODULUS) == 0)


def baseline_accuracy(batch: Batch) -> float:
    """Expected accuracy of "answer with a random item of the context" over ``batch``.

    For each answer, 1 / (number of distinct items stated in the facts before it); the mean over
    all answers of the batch.
    """
    b, _ = batch.answer_positions()
    tok = batch.tokens
    is_fact_item = torch.zeros_like(tok, dtype=torch.bool)
    for f in range(int(batch.n_facts.max())):
        p = 3 + 4 * f
        is_fact_item[:, p] = f < batch.n_facts
    per_row = []
    for row in range(len(batch)):
        per_row.append(len(set(tok[row][is_fact_item[row]].tolist())))
    k = torch.tensor(per_row, dtype=torch.float64)[b]
    return float((1.0 / k).mean())
