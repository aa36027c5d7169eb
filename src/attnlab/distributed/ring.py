"""Ring attention: exact attention over a sequence split among the P ranks of a process group
(context parallelism), forward and backward — the merge ⊕ of §4.4–§4.5 across devices.

Each rank holds its chunk of q, k, v (``layout``: zigzag or contiguous). For P steps it attends its
queries to the K/V block it holds while passing that block on to rank r+1 and receiving the next
from rank r-1 (``comm.RingComm``; the transfer overlaps the step's compute). Every step's blocks run
through ``attnlab.api.attention_forward`` — the Triton kernel on CUDA, the blockwise path on a CPU —
which returns (out, lse); the running rows ``(m, ℓ, o)`` absorb each as the state
``AttnState(m = lse, ℓ = 1, o = out)`` by ``attnlab.softmax.merge``, and ``finish()`` gives the output.

The backward (``attnlab.api.attention_backward``, given the final out and lse of every row) follows
ring-flash-attention: K/V go round the ring again, and the dK/dV accumulators of each block travel
with it, one hop behind, gaining each rank's share; after P hops they are back home, complete.
Accumulators (running o, dq, dk, dv) are float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import math

import torch

from .. import api as _api
from .._checks import check_causal, check_qkv, resolve_scale
from ..softmax import AttnState, merge
from .comm import RingComm
from .layout import check_layout
from .schedule import ring_schedule
from .timing import StepTimeline

__all__ = ["ring_attention", "ring_forward", "ring_backward"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KV_TAG, _DKV_TAG = 0, 2  # tags of k, v (0, 1) and dk, dv (2, 3)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    return x[:, :, a:b]  # rows a..b of the sequence dim of (B, H, N, ·)


class _Spans:
    """timeline.span or nothing."""

    def __init__(self, timeline: StepTimeline | None, pass_: str, device):
        self.timeline, self.pass_, self.device = timeline, pass_, device
        self.call = timeline.new_call() if timeline is not None else None

    def __call__(self, step: int, kind: str):
        if self.timeline is None:
            from contextlib import nullcontext

            return nullcontext()
        return self.timeline.span(self.call, self.pass_, step, kind, self.device)


def ring_forward(q, k, v, *, comm: RingComm, causal: bool, layout: str, scale: float,
                 timeline: StepTimeline | None = None):
    """(out, lse) of this rank's queries against the whole ring's keys, without autograd.
    out (B, H, n, Dv) in q's dtype, lse (B, H, n) float32 (float64 for float64)."""
    B, H, n, _ = q.shape
    Dv = v.shape[-1]
    acc = _acc_dtype(q.dtype)
    m = torch.full((B, H, n), -math.inf, dtype=acc, device=q.device)  # (B, H, n): ⊕'s identity
    l = torch.zeros(B, H, n, dtype=acc, device=q.device)
    o = torch.zeros(B, H, n, Dv, dtype=acc, device=q.device)  # (B, H, n, Dv)
    spans = _Spans(timeline, "forward", q.device)
    kv = (k.contiguous(), v.contiguous())  # what is sent must be contiguous (NCCL)
    P = comm.world_size
    for step in ring_schedule(rank=comm.rank, world_size=P, local_seq=n, causal=causal, layout=layout):
        transfer = comm.send_recv(kv, tag=_KV_TAG) if step.step + 1 < P else None
        with spans(step.step, "compute"):
            for b in step.blocks:
                out_b, lse_b = _api.attention_forward(_rows(q, b.q0, b.q1), _rows(kv[0], b.k0, b.k1),
                                                      _rows(kv[1], b.k0, b.k1), causal=b.causal, scale=scale)
                lse_b = lse_b.to(acc)
                # the block as a state: e^lse = Σ e^s, o = Σ e^(s - lse) v = out; an empty row is (-inf, 0, 0)
                block = AttnState(lse_b, torch.isfinite(lse_b).to(acc), out_b.to(acc))
                run = AttnState(m[:, :, b.q0:b.q1], l[:, :, b.q0:b.q1], o[:, :, b.q0:b.q1])
                new = merge(run, block)
                m[:, :, b.q0:b.q1], l[:, :, b.q0:b.q1], o[:, :, b.q0:b.q1] = new.m, new.l, new.o
        if transfer is not None:
            with spans(step.step, "wait"):
                kv = transfer.wait()
    state = AttnState(m, l, o)
    return state.finish().to(q.dtype), state.lse


def ring_backward(dout, q, k, v, out, lse, *, comm: RingComm, causal: bool, layout: str, scale: float,
                  timeline: StepTimeline | None = None):
    """(dq, dk, dv) of this rank's chunk, given the final out and lse of its rows (ring_forward's)."""
    n = q.shape[2]
    acc = _acc_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)  # (B, H, n, D)
    spans = _Spans(timeline, "backward", q.device)
    P = comm.world_size
    kv = (k.contiguous(), v.contiguous())  # what is sent must be contiguous (NCCL)
    dkv_transfer = None
    for step in ring_schedule(rank=comm.rank, world_size=P, local_seq=n, causal=causal, layout=layout):
        kv_transfer = comm.send_recv(kv, tag=_KV_TAG) if step.step + 1 < P else None
        parts = []
        with spans(step.step, "compute"):
            for b in step.blocks:
                qr = slice(b.q0, b.q1)
                dq_b, dk_b, dv_b = _api.attention_backward(
                    dout[:, :, qr], q[:, :, qr], _rows(kv[0], b.k0, b.k1), _rows(kv[1], b.k0, b.k1),
                    out[:, :, qr], lse[:, :, qr], causal=b.causal, scale=scale)
                dq[:, :, qr] += dq_b
                parts.append((b.k0, b.k1, dk_b, dv_b))
        if dkv_transfer is None:  # step 0: the accumulators of this rank's own block start here
            dk_acc = torch.zeros(k.shape, dtype=acc, device=k.device)  # (B, Hkv, n, D)
            dv_acc = torch.zeros(v.shape, dtype=acc, device=v.device)  # (B, Hkv, n, Dv)
        else:  # the accumulators of the block held now, from rank r-1, one hop behind its K/V
            with spans(step.step, "wait"):
                dk_acc, dv_acc = dkv_transfer.wait()
        for k0, k1, dk_b, dv_b in parts:
            dk_acc[:, :, k0:k1] += dk_b
            dv_acc[:, :, k0:k1] += dv_b
        if kv_transfer is not None:
            with spans(step.step, "wait"):
                kv = kv_transfer.wait()
        if P > 1:
            dkv_transfer = comm.send_recv((dk_acc, dv_acc), tag=_DKV_TAG)
    if dkv_transfer is not None:  # the last hop brings this rank's own block home, complete
        with spans(P, "wait"):
            dk_acc, dv_acc = dkv_transfer.wait()
    return dq.to(q.dtype), dk_acc.to(k.dtype), dv_acc.to(v.dtype)


class _RingAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, comm, causal, layout, scale, timeline):
        out, lse = ring_forward(q, k, v, comm=comm, causal=causal, layout=layout, scale=scale, timeline=timeline)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (comm, causal, layout, scale, timeline)
        return out

    @staticmethod
    def backward(ctx, dout):
        if torch.is_grad_enabled():
            raise RuntimeError("attnlab.distributed.ring_attention: double backward is not supported")
        q, k, v, out, lse = ctx.saved_tensors
        comm, causal, layout, scale, timeline = ctx.args
        dq, dk, dv = ring_backward(dout.contiguous(), q, k, v, out, lse, comm=comm, causal=causal, layout=layout,
                                   scale=scale, timeline=timeline)
        return dq, dk, dv, None, None, None, None, None


def _descriptor(q, k, v) -> list[int]:
    """Shapes and dtype of this rank's inputs as ints (-1 where a tensor is not 4-D)."""
    desc = []
    for t in (q, k, v):
        desc += list(t.shape) if t.dim() == 4 else [-1] * 4
    return desc + [_DTYPES.index(q.dtype) if q.dtype in _DTYPES else -1]


def _check_inputs(q, k, v, comm: RingComm, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if comm.world_size > 1:  # every rank refuses a mismatch between ranks alike, before any transfer
        descs = comm.agree_on(_descriptor(q, k, v), q.device)
        for r, d in enumerate(descs):
            if d != descs[0]:
                raise ValueError(
                    f"ring_attention: the ranks' chunks differ: rank 0 has q {tuple(descs[0][0:4])}, "
                    f"k {tuple(descs[0][4:8])}, v {tuple(descs[0][8:12])} ({_DTYPES[descs[0][12]]}), rank {r} "
                    f"has q {tuple(d[0:4])}, k {tuple(d[4:8])}, v {tuple(d[8:12])} ({_DTYPES[d[12]]}); every "
                    "rank must pass a chunk of one shape and dtype")
    dims = check_qkv(q, k, v)
    if dims.Nq != dims.Nk:
        raise ValueError(f"ring_attention: q and k must be this rank's chunk of one sequence, with one length; "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if dims.Nq < 1:
        raise ValueError(f"ring_attention: the local chunk is empty (q {tuple(q.shape)})")
    if layout == "zigzag" and dims.Nq % 2:
        raise ValueError(f"ring_attention: the zigzag layout holds two equal chunks per rank, so the local "
                         f"length must be even; got {dims.Nq} (q {tuple(q.shape)}); use zigzag_shard on a "
                         f"sequence of a multiple of 2·world_size = {2 * comm.world_size} tokens")


def ring_attention(q, k, v, *, group=None, causal: bool = False, layout: str = "zigzag", scale: float | None = None,
                   timeline: StepTimeline | None = None):
    """Exact attention over a sequence split among the ranks of ``group``, differentiable.

    Arguments (every rank of the group calls it, with its own chunk):
        q: (B, H, n, D), k: (B, Hkv, n, D), v: (B, Hkv, n, Dv) — this rank's n = N/P rows of the
            sequence in ``layout`` order (``shard`` / ``zigzag_shard``); H % Hkv == 0 (GQA, MQA).
        group: the process group of the ring (None: the default group).
        causal: each token sees itself and the tokens before it in the global sequence.
        layout: ``"zigzag"`` (chunks r and 2P-1-r, n even: every rank does the same causal work) or
            ``"contiguous"`` (chunk r).
        scale: softmax scale, default 1/sqrt(D).
        timeline: a ``StepTimeline`` to record per-step compute and communication-wait times into.
    Returns:
        out (B, H, n, Dv) in q's dtype: this rank's rows of attention over all N keys.

    Shapes and dtypes are compared across ranks first (one small all_gather), so a mismatch raises
    the same ValueError on every rank.
    """
    comm = RingComm(group)
    layout = check_layout(layout)
    causal = check_causal(causal)
    _check_inputs(q, k, v, comm, layout)
    scale = resolve_scale(scale, q.shape[-1])
    if timeline is not None and not isinstance(timeline, StepTimeline):
        raise TypeError(f"timeline must be a StepTimeline or None, got {type(timeline).__name__}")
    return _RingAttentionFn.apply(q, k, v, comm, causal, layout, scale, timeline)
