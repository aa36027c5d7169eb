"""Where the prefill kernels' outputs live in memory: allocated in their inputs' order, so that a model's
(B, N, H, D) projections seen as (B, H, N, D) get an output and gradients it can reshape without copies
(``empty_like_layout``), and dQ stored from its float32 accumulator into such a gradient (``store_dq``).
Used by the launchers (``prefill_fwd``, ``prefill_bwd``, ``prefill_gluon_bwd``) and by the registered
ops' fake implementations, which must give the strides the launchers give."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .config import next_pow2


def empty_like_layout(x: torch.Tensor, shape=None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialised dense tensor of ``shape`` (default: x's) on x's device whose dimensions lie in memory
    in the order x's do: largest stride outermost, a broadcast (stride-0) dimension outermost, ties in
    index order. A model's (B, N, H, D) projections seen as (B, H, N, D) thus get their output and
    gradients in that layout too, and the model's transpose back and reshape to (B, N, H·D) are views, not
    copies (cuDNN's SDPA lays out its output the same way). Contiguous inputs give contiguous tensors."""
    shape = tuple(x.shape) if shape is None else tuple(shape)
    strides = x.stride()
    order = sorted(range(x.dim()), key=lambda i: (-strides[i] if strides[i] else -float("inf"), i))
    if order == list(range(x.dim())):
        return torch.empty(shape, device=x.device, dtype=dtype or x.dtype)
    t = torch.empty([shape[i] for i in order], device=x.device, dtype=dtype or x.dtype)
    inverse = [0] * len(order)
    for pos, i in enumerate(order):
        inverse[i] = pos
    return t.permute(inverse)


@triton.jit
def _dq_store(SRC, DST, scale, H, Nq, stride_db, stride_dh, stride_dn,
              HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """DST (B, H, Nq, D) in its dtype and layout <- scale · SRC, SRC the same (B, H, Nq, D) contiguous in float32."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    ok = (offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D)
    x = tl.load(SRC + (bh.to(tl.int64) * Nq + offs_m[:, None]) * HEAD_D + offs_d[None, :], mask=ok)
    tl.store(DST + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh + offs_m[:, None].to(tl.int64) * stride_dn
             + offs_d[None, :], (x * scale).to(DST.dtype.element_ty), mask=ok)


def store_dq(dq_acc: torch.Tensor, dq: torch.Tensor, scale: float = 1.0) -> None:
    """dq (B, H, Nq, D), any layout with unit stride along D, <- ``scale`` · dq_acc, the float32
    accumulator of the same shape, contiguous: one read and one write of each element, whole rows at a
    time. Where dq is laid out as a model's (B, Nq, H, D) projection, ``dq.copy_(dq_acc)`` would run
    PyTorch's general strided copy; and a kernel that adds unscaled products scales the sum here once."""
    B, H, Nq, D = dq.shape
    if B * H * Nq == 0:
        return
    if dq.stride(-1) != 1:  # (a caller's own dq; the launchers allocate none such)
        dq.copy_(dq_acc if scale == 1.0 else dq_acc * scale)
        return
    if scale == 1.0 and dq.is_contiguous():
        dq.copy_(dq_acc)
        return
    BLOCK_M = 64 if dq.is_cuda else 16
    _dq_store[(triton.cdiv(Nq, BLOCK_M), B * H)](dq_acc, dq, float(scale), H, Nq, *dq.stride()[:3], HEAD_D=D,
                                                 BLOCK_M=BLOCK_M, BLOCK_D=next_pow2(max(D, 16)), num_warps=4)


__all__ = ["empty_like_layout", "store_dq"]
