"""Three softmaxes and the merge ⊕ (lecture §4.1–§4.5).

* ``naive_softmax``  — ``exp(x) / Σ exp(x)``: two passes, overflows (§4.1).
* ``safe_softmax``   — subtract the row maximum first: three passes, never overflows (§4.2).
* ``online_softmax`` — keep a running ``(m, ℓ)`` and re-base ℓ when the maximum grows: two passes,
  never overflows (§4.3, Milakov & Gimelshein 2018).
* ``Summary(m, l)`` — the summary of a segment of a row, ``e^m·ℓ = Σ e^{x_j}``; ``summarize`` builds
  it, ``merge`` is the associative, commutative ⊕ of §4.4.
* ``AttnState(m, l, o)`` — the three-part state of §4.5 with ``o = Σ e^{s_j - m} v_j``; the same
  ``merge`` combines two of them and ``finish()`` returns ``o / ℓ``.

Every function works on numpy arrays and torch tensors alike, along the last axis, in the input's
dtype. Pass ``counts=SoftmaxCounts()`` to run the element-by-element version of an algorithm, which
counts what §4.2–§4.3 count: passes over the input, elements read, exponentials, and the rescales
of the online version (the running maximum grew while the sum held something).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = [
    "naive_softmax", "safe_softmax", "online_softmax", "SoftmaxCounts", "Summary", "AttnState",
    "summarize", "merge", "merge_factors", "expected_rescales",
]

NEG_INF = float("-inf")


# -- array helpers: one spelling for numpy and torch ------------------------------------------------


def _is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def _exp(x):
    return torch.exp(x) if _is_torch(x) else np.exp(x)


def _log(x):
    if _is_torch(x):
        return torch.log(x)
    with np.errstate(divide="ignore"):
        return np.log(x)


def _maximum(a, b):
    if _is_torch(a) or _is_torch(b):
        return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))
    return np.maximum(a, b)


def _where(cond, a, b):
    if _is_torch(cond):
        return torch.where(cond, a, b)
    return np.where(cond, a, b)


def _zero_where_neg_inf(m):
    """m with -inf replaced by 0: the base used when a segment holds no finite element."""
    if _is_torch(m):
        return m.masked_fill(m == NEG_INF, 0.0)
    return np.where(m == NEG_INF, np.zeros_like(m), m)


def _unsqueeze(x):
    """x[..., None] for tensors, arrays and numpy/python scalars."""
    return x.unsqueeze(-1) if _is_torch(x) else np.asarray(x)[..., None]


def _rowmax(x):
    if x.shape[-1] == 0:
        shape = tuple(x.shape[:-1])
        return torch.full(shape, NEG_INF, dtype=x.dtype, device=x.device) if _is_torch(x) else np.full(
            shape, NEG_INF, dtype=x.dtype)
    return x.amax(dim=-1) if _is_torch(x) else np.max(x, axis=-1)


def _rowsum(x):
    return x.sum(dim=-1) if _is_torch(x) else np.sum(x, axis=-1)


def _check_array(x, name: str = "x"):
    if _is_torch(x):
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
        if x.dim() == 0:
            raise ValueError(f"{name} must have at least one dimension, got a scalar")
        return x
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point array, got {x.dtype}")
        if x.ndim == 0:
            raise ValueError(f"{name} must have at least one dimension, got a scalar")
        return x
    raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")


# -- counting mode: the element-by-element algorithms -------------------------------------------------


@dataclass
class SoftmaxCounts:
    """What one element-by-element softmax did (accumulates over calls and rows).

    passes: sweeps over the whole input; reads: input elements read (= passes · size);
    writes: output elements written; exps: exponentials evaluated; rescales: times the online
    version re-based a non-zero running sum because the maximum grew (§4.3);
    rescale_at: the 1-based position k of each rescale within its row.
    """

    passes: int = 0
    reads: int = 0
    writes: int = 0
    exps: int = 0
    rescales: int = 0
    rescale_at: list[int] = field(default_factory=list)


class _Input:
    """The input as rows of numpy scalars; every element handed out is counted as one read."""

    def __init__(self, x, counts: SoftmaxCounts):
        self.was_torch = _is_torch(x)
        if self.was_torch:
            self.like = x
            x = x.detach().cpu()
            x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()  # numpy has no bfloat16
        self.shape = x.shape
        self.rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1]) if x.size else x.reshape(-1, x.shape[-1])
        self.dtype = self.rows.dtype.type
        self.counts = counts

    def sweep(self):
        """One pass over the input: yields (row, position, value)."""
        self.counts.passes += 1
        for r, row in enumerate(self.rows):
            for j, xj in enumerate(row):
                self.counts.reads += 1
                yield r, j, xj

    def output(self, y):
        y = y.reshape(self.shape)
        if self.was_torch:
            return torch.from_numpy(y).to(dtype=self.like.dtype, device=self.like.device)
        return y


def _exp_counted(x, counts: SoftmaxCounts):
    counts.exps += 1
    return np.exp(x)


def _naive_counted(x, counts: SoftmaxCounts):
    inp = _Input(x, counts)
    zero = inp.dtype(0)
    with np.errstate(all="ignore"):
        total = [zero] * len(inp.rows)
        for r, _, xj in inp.sweep():  # pass 1: Σ e^x
            total[r] = total[r] + _exp_counted(xj, counts)
        y = np.empty_like(inp.rows)
        for r, j, xj in inp.sweep():  # pass 2: e^x / Σ
            y[r, j] = _exp_counted(xj, counts) / total[r]
            counts.writes += 1
    return inp.output(y)


def _safe_counted(x, counts: SoftmaxCounts):
    inp = _Input(x, counts)
    zero, ninf = inp.dtype(0), inp.dtype(NEG_INF)
    R = len(inp.rows)
    m = [ninf] * R
    for r, _, xj in inp.sweep():  # pass 1: the maximum
        if xj > m[r]:
            m[r] = xj
    base = [zero if mr == ninf else mr for mr in m]
    total = [zero] * R
    for r, _, xj in inp.sweep():  # pass 2: Σ e^(x - m)
        total[r] = total[r] + _exp_counted(xj - base[r], counts)
    y = np.empty_like(inp.rows)
    with np.errstate(all="ignore"):
        for r, j, xj in inp.sweep():  # pass 3: e^(x - m) / Σ
            y[r, j] = _exp_counted(xj - base[r], counts) / total[r] if total[r] > 0 else zero
            counts.writes += 1
    return inp.output(y)


def _online_counted(x, counts: SoftmaxCounts):
    inp = _Input(x, counts)
    zero, ninf = inp.dtype(0), inp.dtype(NEG_INF)
    R = len(inp.rows)
    m, l = [ninf] * R, [zero] * R
    for r, j, xj in inp.sweep():  # pass 1: (m, ℓ) ← (m, ℓ) ⊕ (x, 1)
        m_new = xj if xj > m[r] else m[r]
        if m_new == ninf:  # nothing finite seen yet
            continue
        if m_new > m[r] and l[r] != 0:  # the running sum must be re-based: ℓ · e^(m - m_new)
            counts.rescales += 1
            counts.rescale_at.append(j + 1)
        l[r] = l[r] * _exp_counted(m[r] - m_new, counts) + _exp_counted(xj - m_new, counts)
        m[r] = m_new
    base = [zero if mr == ninf else mr for mr in m]
    y = np.empty_like(inp.rows)
    with np.errstate(all="ignore"):
        for r, j, xj in inp.sweep():  # pass 2: e^(x - m) / ℓ
            y[r, j] = _exp_counted(xj - base[r], counts) / l[r] if l[r] > 0 else zero
            counts.writes += 1
    return inp.output(y)


def expected_rescales(n: int) -> float:
    """Expected rescales of the online softmax on n values in random order: Σ_{k=2}^{n} 1/k (§4.3)."""
    return math.fsum(1.0 / k for k in range(2, n + 1))


# -- the three softmaxes -----------------------------------------------------------------------------


def naive_softmax(x, *, counts: SoftmaxCounts | None = None):
    """``exp(x) / Σ exp(x)`` along the last axis (§4.1). Overflows: float32 beyond x ≈ 88.7, float16
    beyond x ≈ 11.09, and then ``inf / inf = nan`` spoils the row. With ``counts``: the two-pass
    element-by-element loop, counted."""
    _check_array(x)
    if counts is not None:
        return _naive_counted(x, counts)
    if _is_torch(x):
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)
    with np.errstate(all="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def safe_softmax(x, *, counts: SoftmaxCounts | None = None):
    """``exp(x - m) / Σ exp(x - m)`` with ``m`` the row maximum (§4.2): three passes, no overflow.
    Rows with no finite element (all ``-inf``) give 0. With ``counts``: the counted loop."""
    _check_array(x)
    if counts is not None:
        return _safe_counted(x, counts)
    m = _unsqueeze(_zero_where_neg_inf(_rowmax(x)))
    e = _exp(x - m)
    z = _unsqueeze(_rowsum(e))
    return e / _where(z > 0, z, z + 1)


def online_softmax(x, *, block: int = 1024, counts: SoftmaxCounts | None = None):
    """Online softmax (§4.3): pass 1 folds ``(m, ℓ) ← (m, ℓ) ⊕ summarize(segment)`` over segments of
    ``block`` elements, pass 2 writes ``exp(x - m) / ℓ``. With ``counts``: one element per step, as
    the lecture writes it, counting the rescales."""
    _check_array(x)
    if counts is not None:
        return _online_counted(x, counts)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    n = x.shape[-1]
    s = summarize(x[..., :block])
    for j in range(block, n, block):
        s = merge(s, summarize(x[..., j:j + block]))
    e = _exp(x - _unsqueeze(_zero_where_neg_inf(s.m)))
    l = _unsqueeze(s.l)
    return e / _where(l > 0, l, l + 1)


# -- the summary (m, ℓ), the state (m, ℓ, o) and the merge ⊕ -----------------------------------------


@dataclass(eq=False)
class Summary:
    """Summary of a segment of a row (§4.4): ``m`` its maximum, ``l = Σ e^{x_j - m}``.

    ``m``/``l`` are floats, numpy arrays or torch tensors (one entry per row). An empty segment is
    ``(m=-inf, l=0)``, the identity of ⊕.
    """

    m: object
    l: object

    @property
    def lse(self):
        """``log Σ e^{x_j} = m + log ℓ`` (``-inf`` for an empty segment)."""
        return self.m + _log(self.l)


@dataclass(eq=False)
class AttnState:
    """Online-attention state of a segment of keys (§4.5): ``m``, ``l`` as in ``Summary`` and
    ``o = Σ e^{s_j - m} v_j`` (unnormalised), shape ``m.shape + (Dv,)``."""

    m: object
    l: object
    o: object

    @property
    def lse(self):
        return self.m + _log(self.l)

    def finish(self):
        """The attention output ``o / ℓ`` (0 where the segment saw no key)."""
        l = _unsqueeze(self.l)
        return self.o / _where(l > 0, l, l + 1)

    @classmethod
    def from_scores(cls, s, v) -> AttnState:
        """State of one block: scores ``s (..., n)`` and values ``v (..., n, Dv)``."""
        summary = summarize(s)
        p = _exp(s - _unsqueeze(_zero_where_neg_inf(summary.m)))
        o = (p[..., None, :] @ v)[..., 0, :]
        return cls(summary.m, summary.l, o)


def summarize(x) -> Summary:
    """``(m, ℓ)`` of the last axis of ``x`` (numpy or torch); all ``-inf`` or empty → ``(-inf, 0)``."""
    _check_array(x)
    m = _rowmax(x)
    l = _rowsum(_exp(x - _unsqueeze(_zero_where_neg_inf(m))))
    return Summary(m, l)


def merge_factors(a, b):
    """The merged maximum and the factors that re-base each side onto it (§4.4):
    ``m = max(m_a, m_b)``, ``c_a = e^{m_a - m}``, ``c_b = e^{m_b - m}`` (0 for an empty side; both
    sides empty gives ``m = -inf`` and factors 0, never NaN)."""
    m = _maximum(a.m, b.m)
    base = _zero_where_neg_inf(m)
    return m, _exp(a.m - base), _exp(b.m - base)


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))  # a float is a single row: shape ()


def _check_same_shape(a, b, fields) -> None:
    """⊕ combines summaries of the same rows: nothing is broadcast. Within one summary, ``m`` and ``l``
    have one shape and ``o`` adds the value dim."""
    kind = type(a).__name__
    for side, x in (("first", a), ("second", b)):
        if _shape(x.l) != _shape(x.m) or ("o" in fields and _shape(x.o)[:-1] != _shape(x.m)):
            shapes = ", ".join(f"{f} {_shape(getattr(x, f))}" for f in fields)
            raise ValueError(f"merge: the {side} {kind} is inconsistent ({shapes}); m and l need one shape"
                             + (", o that shape + (Dv,)" if "o" in fields else ""))
    for f in fields:
        if _shape(getattr(a, f)) != _shape(getattr(b, f)):
            raise ValueError(f"merge: the two {kind} objects describe different rows: {f} has shape "
                             f"{_shape(getattr(a, f))} and {_shape(getattr(b, f))} (nothing is broadcast)")


def merge(a, b):
    """The merge ⊕ of two ``Summary`` (→ Summary) or two ``AttnState`` (→ AttnState), §4.4–§4.5::

        m = max(m_a, m_b);  ℓ = ℓ_a·e^{m_a-m} + ℓ_b·e^{m_b-m};  o = o_a·e^{m_a-m} + o_b·e^{m_b-m}

    Associative and commutative, so a row may be cut into segments of any sizes and the summaries
    combined in any grouping and order (exercise 3).
    """
    if isinstance(a, AttnState) and isinstance(b, AttnState):
        _check_same_shape(a, b, ("m", "l", "o"))
        m, ca, cb = merge_factors(a, b)
        return AttnState(m, a.l * ca + b.l * cb, a.o * _unsqueeze(ca) + b.o * _unsqueeze(cb))
    if isinstance(a, Summary) and isinstance(b, Summary):
        _check_same_shape(a, b, ("m", "l"))
        m, ca, cb = merge_factors(a, b)
        return Summary(m, a.l * ca + b.l * cb)
    raise TypeError(
        f"merge takes two Summary or two AttnState, got {type(a).__name__} and {type(b).__name__}")
