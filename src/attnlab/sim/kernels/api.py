"""Run the lecture's CUDA-style attention kernels on the simulator (lecture §5.2–5.3, §6.2–6.3).

``run_standard_forward``: the standard forward as three kernels (§3.2, §5.2) — S = QKᵀ/√d
(16×16 tiled matmul), P = softmax(S) (row softmax, two tree reductions), O = PV (tiled matmul).
``run_flash_forward``: FlashAttention forward as one kernel, FA2 order (Q blocks outer) or FA1 order
(K/V blocks outer), with causal block skipping.
``run_flash_backward``: FlashAttention backward as one kernel, K/V blocks outer, P recomputed from L,
dQ accumulated with atomic adds (§7.2–7.4).

Inputs are single-head (Nq, D) / (Nk, D) / (Nk, D) numpy arrays or CPU tensors; the kernels compute
in float32. Each function returns the output(s) and a ``sim.Report`` of what the kernels asked of
memory, with arrays named Q, K, V, S, P, O, L (m, l for FA1).
"""

from __future__ import annotations

import math

import numpy as np

from ..device import Device
from ..report import Report
from .backward import flash_bwd
from .flash import flash_fwd, flash_fwd_fa1
from .matmul import matmul_tiled
from .memory import check_standard_memory
from .softmax import row_softmax


def _as_matrix(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        if getattr(x, "is_complex", lambda: False)():
            raise TypeError(f"{name} must be real, got {x.dtype}")
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must be a float array, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be one head of shape (N, D), got shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return np.ascontiguousarray(x, dtype=np.float32)


def _check_qkv(q, k, v):
    q, k, v = _as_matrix(q, "q"), _as_matrix(k, "k"), _as_matrix(v, "v")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"k has head dim {k.shape[1]} but q has {q.shape[1]} (q {q.shape}, k {k.shape})")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v must have the {k.shape[0]} rows of k, got shape {v.shape}")
    if v.shape[1] != q.shape[1]:
        raise ValueError(f"v must have head dim {q.shape[1]} like q (these kernels use Dv = D), got {v.shape}")
    return q, k, v


def pos_int(value, name: str) -> int:
    """``value`` as an int; ValueError naming ``name`` unless it is a positive integer (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _scale(scale, D: int) -> np.float32:
    if scale is None:
        return np.float32(1.0 / math.sqrt(D))
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    return np.float32(scale)


def _device(l2_bytes, hazards) -> Device:
    if l2_bytes is not None:
        pos_int(l2_bytes, "l2_bytes")
    return Device(l2_bytes=l2_bytes, hazards=hazards)


def reference_forward(q, k, v, *, causal: bool = False, scale: float | None = None):
    """Standard attention of one head in numpy float64: (out (Nq, D), lse (Nq,)).

    The same definition as ``attnlab.attention_ref`` (S and P materialised, bottom-right causal
    mask, fully masked rows give out = 0 and lse = -inf), for checking the kernels without importing
    torch (demo 03 stays within its time budget); the tests hold the two equal.
    """
    q, k, v = (np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x, np.float64) for x in (q, k, v))
    Nq, Nk = q.shape[0], k.shape[0]
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else float(scale)
    s = np.einsum("id,jd->ij", q, k) * scale  # (Nq, Nk); einsum: no BLAS threads for small sizes
    if causal:
        s = np.where(np.arange(Nk)[None, :] <= np.arange(Nq)[:, None] + (Nk - Nq), s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m_safe = np.where(np.isinf(m), 0.0, m)
    p = np.exp(s - m_safe)
    l = p.sum(axis=1, keepdims=True)
    out = np.einsum("ij,jd->id", p / np.where(l == 0, 1.0, l), v)
    with np.errstate(divide="ignore"):
        lse = (m_safe + np.log(l))[:, 0]
    return out, lse


def run_standard_forward(q, k, v, *, tile: int = 16, causal: bool = False, scale: float | None = None,
                         l2_bytes: int | None = None, softmax_threads: int = 256, hazards: str = "warn",
                         max_memory: int | None = None) -> tuple[np.ndarray, Report]:
    """The standard forward as 3 simulated kernels; returns (out (Nq, D) float32, report).

    Arguments:
        q: (Nq, D), k: (Nk, D), v: (Nk, D) — one head, numpy or torch, cast to float32.
        tile: side of the square matmul tiles (16 in the lecture; blockDim = tile × tile ≤ 1024).
        causal: bottom-right aligned mask (query i sees keys j <= i + Nk - Nq), applied when S is written.
        l2_bytes: run the LRU L2 model of that capacity (slower); None counts without it.
        softmax_threads: threads per row of the softmax kernel (a power of two, 32..1024).
        max_memory: bytes the simulation may take (None: ``memory.default_memory_limit()``); a larger
            estimate (``memory.standard_memory_bytes``) is refused before S and P are allocated.
    """
    q, k, v = _check_qkv(q, k, v)
    tile = pos_int(tile, "tile")
    if tile * tile > 1024:
        raise ValueError(f"tile must satisfy tile² <= 1024 threads per block, got {tile}")
    st = pos_int(softmax_threads, "softmax_threads")
    if st & (st - 1) or not 32 <= st <= 1024:
        raise ValueError(f"softmax_threads must be a power of two in 32..1024, got {softmax_threads!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    scale = _scale(scale, q.shape[1])
    (Nq, D), Nk = q.shape, k.shape[0]
    check_standard_memory(seq_q=Nq, seq_k=Nk, head_dim=D, tile=tile, softmax_threads=st,
                          max_memory=None if max_memory is None else pos_int(max_memory, "max_memory"))
    dev = _device(l2_bytes, hazards)
    Q, K, V = dev.array("Q", q), dev.array("K", k), dev.array("V", v)
    S, P, O = dev.empty("S", (Nq, Nk)), dev.empty("P", (Nq, Nk)), dev.empty("O", (Nq, D))
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    off = (Nk - Nq) if causal else None
    dev.launch(matmul_tiled, (cdiv(Nk, tile), cdiv(Nq, tile)), (tile, tile), Q, K, S, Nq, D, Nk, scale, True, off,
               name="S=QKᵀ/√d")
    dev.launch(row_softmax, Nq, st, S, P, Nk, name="P=softmax(S)")
    dev.launch(matmul_tiled, (cdiv(D, tile), cdiv(Nq, tile)), (tile, tile), P, V, O, Nq, Nk, D, np.float32(1), False,
               None, name="O=PV")
    return O.numpy(), dev.report()


def run_flash_forward(q, k, v, *, block_q: int = 64, block_k: int = 64, causal: bool = False,
                      order: str = "fa2", scale: float | None = None, l2_bytes: int | None = None,
                      hazards: str = "warn") -> tuple[np.ndarray, np.ndarray, Report]:
    """FlashAttention forward as one simulated kernel; returns (out (Nq, D), lse (Nq,), report).

    Arguments:
        q: (Nq, D), k: (Nk, D), v: (Nk, D) — one head, numpy or torch, cast to float32.
        block_q: Br, query rows per block = threads per block (≤ 1024).
        block_k: Bc, keys per K/V block.
        causal: bottom-right aligned mask; K/V blocks above the diagonal are skipped whole (§6.2).
        order: "fa2" (Q blocks outer, one block per Q block, writes L) or "fa1" (K/V blocks outer,
            one block per head, keeps O, ℓ, m in HBM; lse is then m + log ℓ read back from HBM).
    """
    q, k, v = _check_qkv(q, k, v)
    Br, Bc = pos_int(block_q, "block_q"), pos_int(block_k, "block_k")
    if Br > 1024:
        raise ValueError(f"block_q is the number of threads per block and must be <= 1024, got {Br}")
    if order not in ("fa2", "fa1"):
        raise ValueError(f"order must be 'fa2' or 'fa1', got {order!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    scale = _scale(scale, q.shape[1])
    (Nq, D), Nk = q.shape, k.shape[0]
    dev = _device(l2_bytes, hazards)
    Q, K, V = dev.array("Q", q), dev.array("K", k), dev.array("V", v)
    if order == "fa2":
        O, L = dev.empty("O", (Nq, D)), dev.empty("L", (Nq,))
        name = "flash_fwd" + ("_causal" if causal else "")
        dev.launch(flash_fwd, -(-Nq // Br), Br, Q, K, V, O, L, Nq, Nk, D, Br, Bc, scale, causal, name=name)
        return O.numpy(), L.numpy(), dev.report()
    O = dev.zeros("O", (Nq, D))
    l_hbm = dev.zeros("l", (Nq,))
    m_hbm = dev.array("m", np.full(Nq, -np.inf, np.float32))
    name = "flash_fwd_fa1" + ("_causal" if causal else "")
    dev.launch(flash_fwd_fa1, 1, Br, Q, K, V, O, l_hbm, m_hbm, Nq, Nk, D, Br, Bc, scale, causal, name=name)
    l, m = l_hbm.numpy(), m_hbm.numpy()
    with np.errstate(divide="ignore"):
        lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf).astype(np.float32)
    return O.numpy(), lse, dev.report()


def run_flash_backward(q, k, v, dout, *, block_q: int = 64, block_k: int = 64, causal: bool = False,
                       scale: float | None = None, out=None, lse=None, l2_bytes: int | None = None,
                       hazards: str = "warn") -> tuple[np.ndarray, np.ndarray, np.ndarray, Report]:
    """FlashAttention backward as one simulated kernel; returns (dq, dk, dv, report).

    Arguments:
        q: (Nq, D), k: (Nk, D), v: (Nk, D), dout: (Nq, D) — one head, numpy or torch, cast to float32.
        block_q: Br, query rows per inner step; block_k: Bc, keys per block = threads per block (≤ 1024).
        causal: bottom-right aligned mask; (Q block, K/V block) pairs above the diagonal are skipped.
        out, lse: the forward's output (Nq, D) and logsumexp (Nq,); computed with the simulated FA2
            forward when not given (that launch is not part of the returned report).
    The report's arrays: Q, K, V, O, dO, L (read), dQ (atomic), dK, dV (written).
    """
    q, k, v = _check_qkv(q, k, v)
    dout = _as_matrix(dout, "dout")
    if dout.shape != q.shape:
        raise ValueError(f"dout must have q's shape {q.shape}, got {dout.shape}")
    Br, Bc = pos_int(block_q, "block_q"), pos_int(block_k, "block_k")
    if Bc > 1024:
        raise ValueError(f"block_k is the number of threads per block and must be <= 1024, got {Bc}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if (out is None) != (lse is None):
        raise ValueError("give both out and lse (the forward's results), or neither")
    if out is None:
        out, lse, _ = run_flash_forward(q, k, v, block_q=Br, block_k=Bc, causal=causal, scale=scale)
    else:
        out = _as_matrix(out, "out")
        lse = np.asarray(lse.detach().cpu().numpy() if hasattr(lse, "detach") else lse, np.float32)
        if out.shape != q.shape or lse.shape != (q.shape[0],):
            raise ValueError(f"out must be {q.shape} and lse ({q.shape[0]},), got {out.shape} and {lse.shape}")
    scale = _scale(scale, q.shape[1])
    (Nq, D), Nk = q.shape, k.shape[0]
    dev = _device(l2_bytes, hazards)
    Q, K, V = dev.array("Q", q), dev.array("K", k), dev.array("V", v)
    O, dO, L = dev.array("O", out), dev.array("dO", dout), dev.array("L", lse)
    dQ, dK, dV = dev.zeros("dQ", (Nq, D)), dev.empty("dK", (Nk, D)), dev.empty("dV", (Nk, D))
    name = "flash_bwd" + ("_causal" if causal else "")
    dev.launch(flash_bwd, -(-Nk // Bc), Bc, Q, K, V, O, dO, L, dQ, dK, dV, Nq, Nk, D, Br, Bc, scale, causal,
               name=name)
    return dQ.numpy(), dK.numpy(), dV.numpy(), dev.report()
