"""Training the tiny transformer on LikesWorld (lecture §2.2, code 01; §7.7 for the flash run).

AdamW, linear warm-up then cosine decay, gradient clipping, next-token cross-entropy on every real
token (the answers count ``answer_weight`` times). Fresh batches are drawn from the training split
each step, so the model never sees a test world. ``evaluate`` reports accuracy on the answers only.

``train`` is deterministic for a given (model config, train config): the initialisation, the data
stream and the optimiser all follow ``TrainConfig.seed``.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from .config import ModelConfig
from .likesworld import Batch, LikesWorld, baseline_accuracy
from .transformer import Transformer

SEED_MAX = 2**32 - 1  # seeds are 32-bit; the restarts add 1000 per attempt, well inside torch.manual_seed's range


@dataclass(frozen=True)
class TrainConfig:
    """How to train. ``question_format`` and the fact counts define the LikesWorld variant.

    The lookup circuit either forms early (the validation accuracy jumps from the ~37% plateau to
    ~100% within a few hundred steps) or, for some initialisations, not within any affordable
    budget. So at ``check_step`` a run whose validation accuracy is below ``check_accuracy`` is
    restarted from the next seed (``seed + 1000·attempt``), at most ``max_attempts`` times; the last
    attempt always runs to the end. Validation uses training-split worlds, never the test set.
    """

    steps: int = 1000
    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    answer_weight: float = 4.0  # extra weight of the answer tokens in the loss
    seed: int = 0
    min_facts: int = 2
    max_facts: int = 6
    question_format: str = "adjacent"
    test_size: int = 2000
    eval_every: int = 100
    check_step: int = 400
    check_accuracy: float = 0.6
    max_attempts: int = 4

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "test_size", "check_step", "max_attempts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive integer, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            raise ValueError(f"TrainConfig.seed must be an integer in [0, {SEED_MAX:,}], got {self.seed!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"TrainConfig.lr must be positive, got {self.lr!r}")
        self.world()  # validates the LikesWorld fields

    def world(self) -> LikesWorld:
        return LikesWorld(self.min_facts, self.max_facts, 2, self.question_format)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrainResult:
    """model: the trained model (eval mode); test_accuracy / baseline on the held-out test set;
    seconds: wall time of the whole call; seed: the seed of the attempt kept; attempts: one dict per
    attempt {"seed", "steps", "val_accuracy"}; history: {"step", "loss", "val_accuracy"} of the kept
    attempt."""

    model: Transformer
    test_accuracy: float
    baseline: float
    seconds: float
    seed: int = 0
    attempts: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)


class AdamW:
    """AdamW (Loshchilov & Hutter) over parameter groups ``[{"params", "weight_decay"}]``.

    The same update as ``torch.optim.AdamW``; written out because constructing a torch optimizer
    imports torch._dynamo, which costs seconds — more than the 30-step training of demo 04.
    """

    def __init__(self, groups, lr: float, betas=(0.9, 0.98), eps: float = 1e-8):
        self.param_groups = [dict(g, lr=lr) for g in groups]
        self.betas, self.eps, self.t = betas, eps, 0
        self.state = {p: (torch.zeros_like(p), torch.zeros_like(p)) for g in groups for p in g["params"]}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                m, v = self.state[p]
                p.mul_(1 - g["lr"] * g["weight_decay"])  # decoupled weight decay
                m.lerp_(p.grad, 1 - b1)  # m = b1·m + (1 - b1)·g
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)  # v = b2·v + (1 - b2)·g²
                p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-g["lr"] / c1)


def clip_grad_norm(params, max_norm: float) -> float:
    """Scale all gradients so that their global L2 norm is at most ``max_norm``; return the norm."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return float(norm)


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up for ``warmup`` steps, then cosine decay to ``min_lr_ratio · lr``."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    t = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def lm_loss(model: Transformer, batch: Batch, answer_weight: float = 1.0) -> torch.Tensor:
    """Mean next-token cross-entropy over real tokens; answer tokens weigh ``answer_weight``."""
    tok = batch.tokens
    logits = model(tok[:, :-1])  # (B, N-1, vocab)
    target = tok[:, 1:]
    real = torch.arange(1, tok.shape[1], device=tok.device)[None, :] < batch.lengths[:, None]
    w = real.to(logits.dtype) * (1 + (answer_weight - 1) * batch.answer_mask[:, 1:].to(logits.dtype))
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none")
    return (ce * w.reshape(-1)).sum() / w.sum()


@torch.inference_mode()
def predictions(model: Transformer, batch: Batch, *, head_mask=None, chunk: int = 128):
    """(predicted, correct) answer tokens, each (n_answers,), in answer_positions order.

    Rows are run in groups of equal length (no padding computed) of at most ``chunk`` sequences:
    small blocks stay in the CPU caches, which is worth 1.5-2x here.
    """
    was = model.training
    model.eval()
    b, pos = batch.answer_positions()
    ordinal = torch.full(batch.tokens.shape, -1, dtype=torch.long)
    ordinal[b, pos] = torch.arange(len(b))
    pred = torch.empty(len(b), dtype=torch.long)
    for n in torch.unique(batch.lengths).tolist():
        rows = torch.nonzero(batch.lengths == n).flatten()
        for s in range(0, len(rows), chunk):
            r = rows[s : s + chunk]
            logits = model(batch.tokens[r, :n], head_mask=head_mask)  # (b, n, vocab)
            mask = batch.answer_mask[r, :n]
            lb, lp = torch.nonzero(mask, as_tuple=True)
            pred[ordinal[r, :n][mask]] = logits[lb, lp - 1].argmax(-1)
    model.train(was)
    return pred, batch.tokens[b, pos]


def accuracy(model: Transformer, batch: Batch, *, head_mask=None) -> float:
    """Fraction of answers the model predicts exactly (greedy)."""
    pred, gold = predictions(model, batch, head_mask=head_mask)
    return float((pred == gold).float().mean())


def _threads() -> int:
    """Threads for this tiny model: the cores this process may use, less the ones other processes
    keep busy. Oversubscribed cores are ruinous for its small matmuls: on a 2-core machine with
    one other busy process, a training step took 10× longer on two threads than on one."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:  # pragma: no cover
        busy = 0.0
    return max(1, min(n, round(n - busy)))


@contextmanager
def cpu_threads(n: int | None = None):
    """Run the block with ``n`` torch threads (default: ``_threads()``), then restore the setting."""
    old = torch.get_num_threads()
    torch.set_num_threads(n or _threads())
    try:
        yield
    finally:
        torch.set_num_threads(old)


def train(model_config: ModelConfig | None = None, train_config: TrainConfig | None = None, *,
          progress: bool = True, console=None, description: str = "training LikesWorld") -> TrainResult:
    """Train a fresh model; show a rich progress bar (loss, validation accuracy) unless ``progress=False``."""
    mc = model_config or ModelConfig.from_name("likesworld")
    tc = train_config or TrainConfig()
    if not isinstance(mc, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(mc).__name__}")
    if not isinstance(tc, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(tc).__name__}")
    world = tc.world()
    if world.max_len > mc.max_seq_len:
        raise ValueError(f"LikesWorld sequences of {world.max_len} tokens exceed max_seq_len={mc.max_seq_len}")
    with cpu_threads():
        return _train(mc, tc, world, progress, console, description)


def _train(mc, tc, world, progress, console, description) -> TrainResult:
    bar = None
    if progress:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                       TextColumn("loss {task.fields[loss]:.3f} · val acc {task.fields[acc]}"),
                       TimeElapsedColumn(), console=console, transient=False)
        bar.start()
    t0 = time.perf_counter()
    try:
        val = world.sample(500, np.random.default_rng([tc.seed, 2]), "train")
        attempts = []
        for attempt in range(tc.max_attempts):
            seed = tc.seed + 1000 * attempt
            final = attempt + 1 == tc.max_attempts
            desc = description if attempt == 0 else f"{description} (attempt {attempt + 1}, seed {seed})"
            model, history, stopped = _run(mc, tc, world, val, seed, None if final else tc.check_step, bar, desc)
            attempts.append({"seed": seed, "steps": history[-1]["step"], "val_accuracy": history[-1]["val_accuracy"]})
            if not stopped:
                break
            msg = (f"no lookup circuit by step {tc.check_step} (validation accuracy "
                   f"{100 * history[-1]['val_accuracy']:.1f}% < {100 * tc.check_accuracy:.0f}%): "
                   f"restarting from seed {tc.seed + 1000 * (attempt + 1)}")
            if bar is not None:
                bar.console.print(f"[yellow]{msg}[/yellow]")
        test = world.test_set(tc.test_size)
        acc = accuracy(model, test)
        return TrainResult(model, acc, baseline_accuracy(test), time.perf_counter() - t0, seed, attempts, history)
    finally:
        if bar is not None:
            bar.stop()


def _optimizer(model: Transformer, tc: TrainConfig) -> AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    return AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                  {"params": other, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.98))


def _step(model, opt, world, rng, tc, step) -> torch.Tensor:
    for g in opt.param_groups:
        g["lr"] = lr_at(step, tc)
    batch = world.sample(tc.batch_size, rng, "train")
    loss = lm_loss(model, batch, tc.answer_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clip_grad_norm(model.parameters(), tc.grad_clip)
    opt.step()
    return loss.detach()


def train_steps(model: Transformer, train_config: TrainConfig | None = None, steps: int | None = None, *,
                seed: int = 0) -> list[float]:
    """Train ``model`` in place for ``steps`` steps (default ``train_config.steps``) of the recipe of
    ``train_config``, on the training stream of ``seed``; return the loss of every step.

    Two models with the same weights and seed see the same batches, so their runs differ only by
    how they compute — code 04 trains one with "standard" and one with "flash" attention (§7.7).
    """
    tc = train_config or TrainConfig()
    steps = tc.steps if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    world, rng, opt = tc.world(), np.random.default_rng([seed, 1]), _optimizer(model, tc)
    model.train()
    losses = [_step(model, opt, world, rng, tc, step).item() for step in range(steps)]
    model.eval()
    return losses


def _run(mc, tc, world, val, seed, check_step, bar, description):
    """One attempt. Returns (model, history, stopped_early)."""
    torch.manual_seed(seed)
    model = Transformer(mc)
    rng = np.random.default_rng([seed, 1])
    opt = _optimizer(model, tc)
    history: list[dict] = []
    task = None if bar is None else bar.add_task(description, total=tc.steps, loss=float("nan"), acc="—")
    model.train()
    for step in range(tc.steps):
        loss = _step(model, opt, world, rng, tc, step)
        done = step + 1
        check = check_step is not None and done == check_step
        if done % tc.eval_every == 0 or done == tc.steps or check:
            history.append({"step": done, "loss": loss.item(), "val_accuracy": accuracy(model, val)})
        if task is not None and (step % 10 == 0 or done == tc.steps or check):
            acc = f"{100 * history[-1]['val_accuracy']:.1f}%" if history else "—"
            bar.update(task, completed=done, loss=loss.item(), acc=acc)
        if check and history[-1]["val_accuracy"] < tc.check_accuracy:
            return model, history, True
    model.eval()
    return model, history, False
