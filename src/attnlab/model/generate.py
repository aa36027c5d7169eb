"""Greedy generation with and without the KV cache (lecture §8.1–§8.2, §8.4; code 05).

Without a cache every step re-runs the whole sequence (prompt + tokens so far): O(n²) token-forwards
in all. With a KV cache (``attnlab.kvcache``: ``ContiguousKVCache`` or ``PagedKVCache``) the prompt is
run once (prefill) and each later step runs one token (decode): O(n). Both must give the same tokens
— the cache is an optimisation, and "with vs without" is the test that catches a cache bug.

``generate`` groups prompts by length and runs each group as one batch (no padding, so the batch
changes nothing but speed). It counts token-forwards, the unit of §8.2's "compute saved" ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kvcache import ContiguousKVCache, PagedKVCache

CACHE_KINDS = ("contiguous", "paged")


@dataclass
class Generation:
    """tokens: the new tokens of each prompt; logits: (T_new, vocab) per prompt, the logits each new
    token was chosen from; token_forwards: tokens pushed through the model in total."""

    tokens: list[list[int]]
    logits: list[torch.Tensor] = field(repr=False)
    token_forwards: int


def _check_prompts(prompts) -> list[list[int]]:
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2:
            raise ValueError(f"prompts tensor must be (B, N), got shape {tuple(prompts.shape)}")
        return prompts.tolist()
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"prompts must be a non-empty list of token lists or a (B, N) tensor, got {type(prompts).__name__}")
    if all(isinstance(t, int) for t in prompts):
        prompts = [prompts]
    out = []
    for p in prompts:
        p = list(p)
        if not p or not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            raise ValueError(f"each prompt must be a non-empty list of token ids, got {p!r}")
        out.append(p)
    return out


@torch.no_grad()
def generate(model, prompts, max_new_tokens: int = 8, *, use_cache: bool = True, cache: str = "contiguous",
             attention: str = "reference", num_splits: int | None = None,
             buggy_start_pos: bool = False) -> Generation:
    """Greedy decoding of ``max_new_tokens`` tokens after each prompt.

    prompts: a list of token-id lists (or one list, or a (B, N) tensor).
    use_cache: prefill + one-token decode steps through a KV cache; else re-run the full sequence.
    cache: "contiguous" (``ContiguousKVCache``) or "paged" (``PagedKVCache``, always attending
    through ``attnlab.api.flash_decode``).
    attention, num_splits: how a contiguous cache attends ("reference", or "flash" =
    ``attnlab.api.flash_decode`` with ``num_splits`` splits; None lets it choose); num_splits also
    sets the paged cache's splits. buggy_start_pos: inject the §8.2 start-position bug into a
    contiguous cache.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if cache not in CACHE_KINDS:
        raise ValueError(f"cache must be one of {CACHE_KINDS}, got {cache!r}")
    if not use_cache and (cache, attention, num_splits, buggy_start_pos) != ("contiguous", "reference", None, False):
        raise ValueError("cache, attention, num_splits and buggy_start_pos describe the KV cache; "
                         "they need use_cache=True")
    if cache == "paged" and (attention != "reference" or buggy_start_pos):
        raise ValueError(f"the paged cache always attends through flash_decode and has no start-position bug; "
                         f"got attention={attention!r}, buggy_start_pos={buggy_start_pos!r}")
    prompts = _check_prompts(prompts)
    vocab = model.cfg.vocab_size
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token ids must be in [0, {vocab}), got {bad[:5]}")
    param = next(model.parameters())
    cfg = model.cfg
    was_training = model.training
    model.eval()
    tokens: list[list[int] | None] = [None] * len(prompts)
    logits: list[torch.Tensor | None] = [None] * len(prompts)
    forwards = 0
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(len(p), []).append(i)
    for idx in groups.values():
        seq = torch.tensor([prompts[i] for i in idx], dtype=torch.long, device=param.device)  # (B, N)
        steps = []
        if use_cache:
            if cache == "paged":
                kv = PagedKVCache(batch=len(idx), kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                                  n_layers=cfg.n_layers, dtype=param.dtype, device=param.device,
                                  num_splits=num_splits)
            else:
                kv = ContiguousKVCache(n_layers=cfg.n_layers, attention=attention, num_splits=num_splits,
                                       buggy_start_pos=buggy_start_pos)
            step_in = seq  # prefill: the whole prompt once
            for _ in range(max_new_tokens):
                last = model(step_in, cache=kv)[:, -1]  # (B, vocab)
                forwards += step_in.numel()
                steps.append(last)
                step_in = last.argmax(-1, keepdim=True)  # decode: one new token
                seq = torch.cat([seq, step_in], dim=1)
        else:
            for _ in range(max_new_tokens):
                last = model(seq)[:, -1]
                forwards += seq.numel()
                steps.append(last)
                seq = torch.cat([seq, last.argmax(-1, keepdim=True)], dim=1)
        new = seq[:, -max_new_tokens:].tolist()
        lg = torch.stack(steps, dim=1)  # (B, T_new, vocab)
        for j, i in enumerate(idx):
            tokens[i], logits[i] = new[j], lg[j]
    model.train(was_training)
    return Generation(tokens, logits, forwards)


def compare(a: Generation, b: Generation) -> dict:
    """How two generations of the same prompts agree: identical count and max |logit difference|
    (over the steps where both had generated the same tokens so far)."""
    same = sum(x == y for x, y in zip(a.tokens, b.tokens))
    diff = 0.0
    for ta, tb, la, lb in zip(a.tokens, b.tokens, a.logits, b.logits):
        n = 1
        while n < len(ta) and ta[n - 1] == tb[n - 1]:
            n += 1
        diff = max(diff, float((la[:n] - lb[:n]).abs().max()))
    return {"identical": same, "total": len(a.tokens), "max_logit_diff": diff,
            "forward_ratio": a.token_forwards / b.token_forwards}
