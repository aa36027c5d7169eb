"""Where the prefill kernels' outputs live in memory: allocated in their inputs' order, so that a model's
(B, N, H, D) projections seen as (B, H, N, D) get an output and gradients it can reshape without copies
(``empty_like_layout``), and dQ stored from its float32 accumulator into such a gradient (``store_dq``; from
the Gluon backward's accumulator, tiles in register order, ``store_dq_tiles``).
Used by the launchers (``prefill_fwd``, ``prefill_bwd``, ``prefill_gluon_bwd``) and by the registered
ops' fake implementations, which must give the strides the launchers give."""

from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl

from .._runtime import interpret_mode
from .config import next_pow2
from .launch import launch_kept


def packed_as_bhnd(x: torch.Tensor) -> torch.Tensor:
    """A packed (total, H, D) tensor viewed as (1, H, total, D), the kernels' layout (no copy)."""
    return x.unsqueeze(0).transpose(1, 2)  # (1, H, total, D)


def empty_like_layout(x: torch.Tensor, shape=None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialised dense tensor of ``shape`` (default: x's) on x's device whose dimensions lie in memory
    in the order x's do: largest stride outermost, a broadcast (stride-0) dimension outermost, ties in
    index order. A model's (B, N, H, D) projections seen as (B, H, N, D) thus get their output and
    gradients in that layout too, and the model's transpose back and reshape to (B, N, H·D) are views, not
    copies (cuDNN's SDPA lays out its output the same way). Contiguous inputs give contiguous tensors."""
    shape = tuple(x.shape) if shape is None else tuple(shape)
    if x.is_contiguous():  # (the common case, without sorting: a size-1 dimension's place changes no address)
        return torch.empty(shape, device=x.device, dtype=dtype or x.dtype)
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


# -- the gradients of K/V heads read by several programs (the deterministic backward's ``kv_split``) ---------------


@triton.jit
def _head_copies_sum(SRC, DST, H, N, stride_db, stride_dh, stride_dn,
                     S: tl.constexpr, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                     F64: tl.constexpr):
    """DST (B, H, N, D) in its dtype and layout <- the sum over s of SRC[b, h·S + s], SRC (B, H·S, N, D)
    contiguous: in float32 (F64: float64), s = 0 to S − 1 in that order, rounded once."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    ok = (offs_m[:, None] < N) & (offs_d[None, :] < HEAD_D)
    base = SRC + bh.to(tl.int64) * S * N * HEAD_D + offs_d[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float64 if F64 else tl.float32)
    for s in tl.static_range(S):
        acc += tl.load(base + (offs_m[:, None] + s * N).to(tl.int64) * HEAD_D, mask=ok).to(acc.dtype)
    tl.store(DST + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh + offs_m[:, None].to(tl.int64) * stride_dn
             + offs_d[None, :], acc.to(DST.dtype.element_ty), mask=ok)


def sum_head_copies(copies: torch.Tensor, out: torch.Tensor, split: int) -> None:
    """out (B, H, N, D), any layout with unit stride along D, <- the sum of each head's ``split`` consecutive
    heads of ``copies`` (B, H·split, N, D) contiguous, in float32 (float64 for float64) in head order, rounded
    once to out's dtype:
    the same bits on every call (one read of ``copies``, one write of ``out``). The Gluon backward's dK, dV
    where each K/V head was read by ``split`` programs (``kv_split``)."""
    B, H, N, D = out.shape
    if tuple(copies.shape) != (B, H * split, N, D) or not copies.is_contiguous() or copies.dtype != out.dtype:
        raise ValueError(f"sum_head_copies: copies {tuple(copies.shape)} ({copies.dtype}) must be a contiguous "
                         f"{(B, H * split, N, D)} tensor of out's dtype {out.dtype}")
    if B * H * N * D == 0:
        return
    if not (out.is_cuda or interpret_mode()):  # (CPU tensors with no interpreter: the same sum in PyTorch)
        parts = copies.unflatten(1, (H, split))
        acc = parts[:, :, 0].to(torch.promote_types(out.dtype, torch.float32), copy=True)
        for s in range(1, split):
            acc += parts[:, :, s]
        out.copy_(acc)
        return
    if out.stride(-1) != 1:  # (a caller's own gradient; the launchers allocate none such)
        tmp = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        sum_head_copies(copies, tmp, split)
        out.copy_(tmp)
        return
    BLOCK_M = 64 if out.is_cuda else 16
    launch_kept(_head_copies_sum, (-(-N // BLOCK_M), B * H),
                dict(zip(_head_copies_sum.arg_names, (copies, out, H, N, *out.stride()[:3])))
                | dict(S=split, HEAD_D=D, BLOCK_M=BLOCK_M, BLOCK_D=next_pow2(max(D, 16)), F64=out.dtype == torch.float64),
                num_warps=4)


# -- the last wave's key blocks cut into pieces (the non-causal Gluon backward's ``tail_pieces``) --------------


@triton.jit
def _tail_pieces_sum(TAIL_K, DK, DV, FIRST, R, P, n_kb, Hkv, Nk, scale, stride_kb, stride_kh, stride_kn,
                     stride_vb, stride_vh, stride_vn, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Key block FIRST + r of the backward's grid (program r of the grid's second axis; key block kb = tile mod n_kb
    of K/V head tile // n_kb, as batch · Hkv + head): DK <- scale · the sum of its P pieces' dK and DV <- the sum of
    their dV, from TAIL_K (P, R, 2, BLOCK_N, D) float32 contiguous ([..., 0, :, :] dK, [..., 1, :, :] dV), piece 0
    first, rounded once; rows past Nk not stored."""
    pid_m = tl.program_id(0)
    r = tl.program_id(1)
    tile = FIRST + r
    kb = tile % n_kb
    bhk = tile // n_kb
    b = bhk // Hkv
    hk = bhk % Hkv
    local = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows = kb * BLOCK_N + local
    ok = (local[:, None] < BLOCK_N) & (offs_d[None, :] < HEAD_D)
    acc_k = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    acc_v = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for s in range(P):
        at = ((s * R + r).to(tl.int64) * (2 * BLOCK_N) + local[:, None]) * HEAD_D + offs_d[None, :]
        acc_k += tl.load(TAIL_K + at, mask=ok)
        acc_v += tl.load(TAIL_K + at + BLOCK_N * HEAD_D, mask=ok)
    keep = ok & (rows[:, None] < Nk)
    row_k = b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh + rows[:, None].to(tl.int64) * stride_kn
    row_v = b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh + rows[:, None].to(tl.int64) * stride_vn
    tl.store(DK + row_k + offs_d[None, :], (acc_k * scale).to(DK.dtype.element_ty), mask=keep)
    tl.store(DV + row_v + offs_d[None, :], acc_v.to(DV.dtype.element_ty), mask=keep)


def sum_tail_pieces(pieces: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, *, first: int, scale: float) -> None:
    """dk, dv (B, Hkv, Nk, D), unit stride along D, <- the pieces' partial gradients of the key blocks the Gluon
    backward cut (``prefill_gluon_bwd.tail_pieces``): ``pieces`` (P, R, 2, 128, D) float32 contiguous, [p, r, 0] piece
    p's unscaled dK and [p, r, 1] its dV of the backward grid's key block ``first`` + r (key block (first + r) mod
    ⌈Nk / 128⌉ of batch · K/V head (first + r) // ⌈Nk / 128⌉). Each block's P pieces are summed in float32 in piece order and
    rounded once (dK times ``scale``): the same bits on every call. Rows past Nk are not written."""
    if pieces.dim() != 5 or pieces.shape[2] != 2:
        raise ValueError(f"sum_tail_pieces: pieces must be (P, R, 2, 128, D), got {tuple(pieces.shape)}")
    P, R, _, BLOCK_N, D = pieces.shape
    B, Hkv, Nk, Dd = dk.shape
    n_kb = -(-Nk // BLOCK_N)
    if (pieces.dtype != torch.float32 or not pieces.is_contiguous() or dv.shape != dk.shape or Dd != D
            or dk.stride(-1) != 1 or dv.stride(-1) != 1 or not 0 <= first <= B * Hkv * n_kb - R):
        raise ValueError(f"sum_tail_pieces: pieces {tuple(pieces.shape)} ({pieces.dtype}) for key blocks {first}.."
                         f"{first + R - 1} of dk {tuple(dk.shape)}, dv {tuple(dv.shape)}")
    if P * R == 0:
        return
    if not (dk.is_cuda or interpret_mode()):  # (CPU tensors with no interpreter: the same sum in PyTorch)
        acc = pieces[0].clone()
        for s in range(1, P):
            acc += pieces[s]
        acc_k, acc_v = acc[:, 0], acc[:, 1]
        for r in range(R):
            kb, bhk = divmod(first + r, n_kb)[::-1]
            b, hk = divmod(bhk, Hkv)
            n = min(BLOCK_N, Nk - kb * BLOCK_N)
            dk[b, hk, kb * BLOCK_N:kb * BLOCK_N + n] = (acc_k[r, :n] * scale).to(dk.dtype)
            dv[b, hk, kb * BLOCK_N:kb * BLOCK_N + n] = acc_v[r, :n].to(dv.dtype)
        return
    BLOCK_M = 32 if dk.is_cuda else 64
    launch_kept(_tail_pieces_sum, (-(-BLOCK_N // BLOCK_M), R),
                dict(zip(_tail_pieces_sum.arg_names, (pieces, dk, dv, first, R, P, n_kb, Hkv, Nk, float(scale),
                                                       *dk.stride()[:3], *dv.stride()[:3])))
                | dict(BLOCK_N=BLOCK_N, HEAD_D=D, BLOCK_M=BLOCK_M, BLOCK_D=next_pow2(max(D, 16))), num_warps=4)


# -- dQ in tiles of register order (the Gluon backward's float32 accumulator) ----------------------------------
#
# A tile is 64 query rows × ``split_d`` columns of one (batch, head) as a Hopper wgmma accumulator holds it across
# 4 warps: warp w, lane l holds rows 16w + 8a + l // 4 and columns 8i + 2(l % 4) + e (a, e in {0, 1},
# i < split_d / 8). In the buffer, element (row, column) of a tile sits at position ((i·128 + 32w + l)·2 + a)·2 + e:
# a thread's four values of one i are contiguous, and a warp's 32 threads write 512 contiguous bytes.


def dq_tiles_shape(B: int, H: int, Nq: int, D: int, split_d: int) -> tuple[int, int]:
    """The float32 buffer of dQ in tiles, as rows of 32: tile (b, h, query block, column slice) in that
    order, each 64·split_d values (2·split_d rows); the last query block of a head is padded to 64 rows."""
    n_blocks = -(-Nq // 64)
    return B * H * n_blocks * (D // split_d) * 2 * split_d, 32


def dq_to_tiles(dq: torch.Tensor, split_d: int) -> torch.Tensor:
    """(B, H, Nq, D) -> the tiles of ``dq_tiles_shape`` (float32, rows past Nq zero): the order the Gluon
    backward writes in, in PyTorch (tests; the kernel never calls it)."""
    B, H, Nq, D = dq.shape
    nb = -(-Nq // 64)
    x = torch.zeros((B, H, nb * 64, D), dtype=torch.float32, device=dq.device)
    x[:, :, :Nq] = dq
    # rows (block, w, a, lh), columns (slice, i, ll, e) -> (b, h, block, slice, i, w, lh, ll, a, e)
    x = x.view(B, H, nb, 4, 2, 8, D // split_d, split_d // 8, 4, 2)
    x = x.permute(0, 1, 2, 6, 7, 3, 5, 8, 4, 9)
    return x.reshape(dq_tiles_shape(B, H, Nq, D, split_d))


@triton.jit
def _dq_store_tiles(SRC, DST, scale, H, Nq, stride_db, stride_dh, stride_dn,
                    HEAD_D: tl.constexpr, SPLIT_D: tl.constexpr, CU_Q=None, CU_P=None):
    """DST rows 64·pid_m.. of head (b, h) <- scale · their tiles of SRC (``dq_tiles_shape``), put back in row order.
    With CU_Q, CU_P (a packed batch, B = 1, Nq the padded rows per head of SRC): program (query block of the
    longest sequence, sequence · H); sequence s's rows CU_Q[s].. of DST from its tiles at padded row CU_P[s]; a
    program past its sequence's rows reads and writes nothing (its tiles would lie in the next sequence's rows, or,
    for the last head's last sequence, past the end of SRC)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    NS: tl.constexpr = HEAD_D // SPLIT_D
    if CU_Q is not None:
        q0 = tl.load(CU_Q + b)
        n_rows = tl.load(CU_Q + b + 1)
        tile0 = (h.to(tl.int64) * tl.cdiv(Nq, 64) + tl.load(CU_P + b) // 64 + pid_m) * NS
        offs_m = q0 + pid_m * 64 + tl.arange(0, 64)
        lim = n_rows - q0  # this sequence's rows
        b = 0
    else:
        n_rows = Nq
        tile0 = (bh.to(tl.int64) * tl.cdiv(Nq, 64) + pid_m) * NS
        offs_m = pid_m * 64 + tl.arange(0, 64)
        lim = Nq
    dst = DST + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh + offs_m[:, None].to(tl.int64) * stride_dn
    live = tl.zeros([64 * SPLIT_D], tl.int32) + pid_m * 64 < lim  # (a block of rows of the sequence: all or none)
    for c in tl.static_range(NS):
        x = tl.load(SRC + (tile0 + c) * (64 * SPLIT_D) + tl.arange(0, 64 * SPLIT_D), mask=live, other=0.0)
        # (i, w, lh, ll, a, e) -> rows (w, a, lh), columns (i, ll, e)
        x = tl.reshape(x, (SPLIT_D // 8, 4, 8, 4, 2, 2))
        x = tl.reshape(tl.permute(x, (1, 4, 2, 0, 3, 5)), (64, SPLIT_D))
        offs_d = c * SPLIT_D + tl.arange(0, SPLIT_D)
        tl.store(dst + offs_d[None, :], (x * scale).to(DST.dtype.element_ty), mask=offs_m[:, None] < n_rows)


_KEPT: list = []  # the last few (kind, weak reference to the tensor, its version, extra, result)


def _kept(kind: str, t: torch.Tensor, extra, compute):
    """``compute()``, kept per (``kind``, tensor ``t``, ``extra``) while ``t`` lives unchanged (its version
    counter): every layer's backward of a step passes the same cumulative lengths. Not while a CUDA graph is
    being captured (the graph must compute the result from the tensor's values at each replay)."""
    capturing = t.is_cuda and torch.cuda.is_current_stream_capturing()
    if not capturing:
        for entry in _KEPT:
            if entry[0] == kind and entry[1]() is t and entry[2] == t._version and entry[3] == extra:
                return entry[4]
    result = compute()
    if not capturing:
        _KEPT.insert(0, (kind, weakref.ref(t), t._version, extra, result))
        del _KEPT[8:]
    return result


def packed_bounds(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """(B + 1,) int32 cumulative lengths that the Gluon backward's packed build can take whatever
    ``cu_seqlens`` holds: each entry clamped into [0, ``total``] and to at least the one before (a running
    maximum), on the device (no copy to the host). Valid lengths come back unchanged; bad ones (negative,
    decreasing, past the end, beyond int32) become sequences inside the packed tensors, so that a call
    whose lengths the host never read gives wrong numbers, never an access out of bounds — what the
    Triton kernels' own clamping gives them. Kept per tensor (``_kept``)."""
    def compute():
        c = cu_seqlens.to(torch.int64).clamp(0, total)
        return torch.cummax(c, 0).values.to(torch.int32)

    return _kept("bounds", cu_seqlens, total, compute)


def packed_rows(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """A packed batch's rows as the Gluon backward's buffers hold them: (B + 1,) int32 cumulative lengths,
    each sequence's padded to a multiple of 64 (so its query blocks start at whole tiles), on the device
    of ``cu_seqlens`` (no copy to the host); the lengths must be valid (``packed_bounds``). Kept per
    tensor (``_kept``)."""
    def compute():
        lens = cu_seqlens[1:].long() - cu_seqlens[:-1].long()
        cu = torch.zeros_like(cu_seqlens, dtype=torch.int32)
        cu[1:] = torch.cumsum((lens + 63) // 64 * 64, 0)
        return cu

    return _kept("rows", cu_seqlens, None, compute)


def padded_rows_bound(total: int, n_seqs: int) -> int:
    """Rows per head that hold any packed batch of ``total`` rows in ``n_seqs`` sequences padded as
    ``packed_rows`` does (a multiple of 64, known without reading the lengths)."""
    return -(-(total + 63 * n_seqs) // 64) * 64


def store_dq_tiles(tiles: torch.Tensor, dq: torch.Tensor, split_d: int, scale: float = 1.0,
                   packed: tuple[torch.Tensor, torch.Tensor, int, int] | None = None) -> None:
    """dq (B, H, Nq, D), any layout with unit stride along D, <- ``scale`` · the float32 tiles of
    ``dq_tiles_shape`` (the Gluon backward's accumulator), back in row order: one read and one write
    of each element. ``packed`` = (cu_q, cu_p, rows, max_q): dq is a packed batch's (1, H, total, D) view and
    the tiles hold each sequence's rows from cu_p (``packed_rows``) in ``rows`` padded rows per head."""
    B, H, Nq, D = dq.shape
    if packed is not None:
        cu_q, cu_p, rows, max_q = packed
        if tuple(tiles.shape) != dq_tiles_shape(1, H, rows, D, split_d) or B != 1 or rows % 64 or D % split_d \
                or split_d % 8 or dq.stride(-1) != 1:
            raise ValueError(f"store_dq_tiles: tiles of shape {tuple(tiles.shape)} do not hold a packed "
                             f"{tuple(dq.shape)} dQ in {rows} rows per head, column slices of {split_d}")
        n_seqs = cu_q.numel() - 1
        if n_seqs * H and max_q:
            launch_kept(_dq_store_tiles, (-(-max_q // 64), n_seqs * H),
                        dict(zip(_dq_store_tiles.arg_names, (tiles, dq, float(scale), H, rows, *dq.stride()[:3])))
                        | dict(HEAD_D=D, SPLIT_D=split_d, CU_Q=cu_q, CU_P=cu_p), num_warps=4)
        return
    if tuple(tiles.shape) != dq_tiles_shape(B, H, Nq, D, split_d) or D % split_d or split_d % 8:
        raise ValueError(f"store_dq_tiles: tiles of shape {tuple(tiles.shape)} do not hold a {tuple(dq.shape)} dQ "
                         f"in column slices of {split_d}")
    if B * H * Nq == 0:
        return
    if dq.stride(-1) != 1:  # (a caller's own dq; the launchers allocate none such)
        tmp = torch.empty(dq.shape, dtype=dq.dtype, device=dq.device)
        store_dq_tiles(tiles, tmp, split_d, scale)
        dq.copy_(tmp)
        return
    # (the kept compiled kernel after a specialisation's first call: launch.launch_kept)
    launch_kept(_dq_store_tiles, (-(-Nq // 64), B * H),
                dict(zip(_dq_store_tiles.arg_names, (tiles, dq, float(scale), H, Nq, *dq.stride()[:3])))
                | dict(HEAD_D=D, SPLIT_D=split_d), num_warps=4)


__all__ = ["dq_tiles_shape", "dq_to_tiles", "empty_like_layout", "packed_bounds", "packed_rows", "padded_rows_bound", "store_dq",
           "store_dq_tiles", "sum_head_copies", "sum_tail_pieces"]
