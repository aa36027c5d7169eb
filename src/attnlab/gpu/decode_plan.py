"""Decode plans: what a Flash-Decoding call derives from its inputs' signature, kept and reused
(the host side of lecture §8.4).

One decode step is a few µs to tens of µs of GPU work, so the host work of a call — checks, the
split count, Triton's argument binding — decides eager decoding's speed. ``DecodePlan`` computes
everything a call's signature (shapes, strides, dtypes, device, variant, stream) determines once:
the grid, the scalar arguments, the buffers, and the kernels' ``Launcher``s. ``plan_key`` names a
call's signature; ``run_planned`` runs a kept plan with no checks and no binding; ``decode_fn`` makes
a plan for a checked call, runs it, and keeps it. A cache that grows by a few keys per step
(transformers' DynamicCache) changes only the capacity: its plan is derived from the plan of the
same cache one size smaller (``DecodePlan.resized``) instead of being made from scratch: while the
split count stays, that is a copy with new strides and capacity, sharing the compiled kernels.

A kept plan hands out its outputs from slabs (``OutputSlab``): one allocation and one ``unbind`` make the
(out, lse) pairs of the next calls, each a view of its own part of the slab, so a call pays a list pop
where two ``torch.empty`` calls cost several µs of host time.

A launch is the dearest step left (~6-9 µs of host time on an H200's host, as much through the CUDA
driver directly as through Triton's launcher). A call with several splits merges them either in a second
kernel, the merge kernel, or inside the split kernel (the group's last program, with the merge kernel's
arithmetic: the same bits). Eager calls merge inside the split kernel, one launch per call
(``EAGER_FUSED_BELOW_US``); CUDA graphs of large calls too, each captured call counting arrivals in counters
of its own (``GRAPH_FUSED_FROM_US``, ``CounterSlots``), and graphs of small ones, where launches cost no
host time and the merge kernel was faster, keep the merge kernel. A call captured on a stream with no plan
takes the same call's plan from the stream that warmed it up (``DecodePlan.restreamed``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import triton

from .._runtime import LOG2E, interpret_mode
from . import native
from .decode_config import (
    DecodeConfig,
    _config_for,
    choose_num_splits,
    gpu_for_device,
    model_seq,
    streamed_keys,
)
from .decode_kernels import _decode_merge_kernel, _decode_split_kernel
from .launch import Launcher, current_stream, hooks_set, int_specs, same_specialisation, tensor_key

_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_GET_DEVICE = getattr(torch._C, "_cuda_getDevice", None)
# whether the current stream is capturing a CUDA graph: the binding itself (``torch.cuda``'s wrapper asks
# first whether CUDA is initialised, which a plan on a CUDA device already says), a fraction of a µs less
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


_COUNTERS: dict = {}
_SPARE: dict = {}


def _counters(device, n: int) -> torch.Tensor:
    """Arrival counters of the fused merge, one per (sequence, K/V head); kept per (device, stream)
    and left at zero by the kernel itself, so calls need no memset. Never called while a CUDA graph is being
    captured (the buffer would be the graph's own memory)."""
    stream = current_stream(device) if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[key] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return buf


# Launch the merge kernel as a programmatic dependent launch (Hopper and newer): its programs start as the split
# kernel's end, and wait for its writes. "eager": eager calls only, after a plan's first call (which compiles
# the plain pair a graph takes); True: graphs too; False: never. On an H200 under CUDA graphs it was 0.1-0.4 µs
# slower on every batch-1 shape (decode-host runs 8, 22 and 23); eager, on the 32K shapes (the smaller ones merge
# in the split kernel when eager), it was faster in 7 of 8 pairs by 0.1-2.0 µs, slower in one round where the
# host, not the GPU, set the pace (runs 22 and 23).
MERGE_PDL: bool | str = "eager"

# Whether the split kernel of a plan whose merge kernel may be launched as a PDL (``merge_pdl``) lets it launch as soon
# as every split program has started (``griddepcontrol.launch_dependents`` first thing; the merge programs then wait
# for the split kernel's end and writes on the GPU, not for a launch). A no-op where the merge is launched plainly
# (CUDA graphs), but the same compiled split kernel serves both. Off: on an H200 (decode-host run 27, alternating in
# three rounds) eager calls at 32/8 heads over 32K took 39.1-39.3 µs with it against 38.5-38.6 without at D = 128,
# and were level at D = 64; CUDA-graph times level.
MERGE_TRIGGER = False

# Whether eager calls that merge in the split kernel (``fused``: every eager call with several splits) launch it as a
# programmatic dependent launch (Hopper): the launch of one call's kernel may be processed while the kernels queued
# before it still run, and its programs wait for them (``griddepcontrol.wait``, the kernel's first instruction, so it
# reads nothing they may write: the query, the cache, the lengths). "trigger": each such kernel also lets the next
# launch start as soon as all its programs have started (``griddepcontrol.launch_dependents``, first too); a plan's first
# fused eager call still takes the plain build, which a CUDA graph captured later takes. A configuration that always
# merges in the split kernel (``DecodeConfig.fused_merge``) keeps plain launches, and so do plans whose K/V read takes
# less than ``SPLIT_PDL_FROM_US``. CUDA graphs never take it. On an H100 (decode-host runs 38-40, the three ways in
# turns, three rounds each) the dependent launch took the eager D = 64 call at 32/8 heads over 32K keys from
# 1.07-1.57x its CUDA graph's time to 1.00-1.03x (each run's median), lower in every one of the nine rounds, and
# D = 128 from 1.04x to 1.00-1.01x; "trigger" was slower than it at D = 64 (benchmarks/NOTES-decode.md v27). False:
# plain launches. The plans made after a change take it (``clear_plans``).
SPLIT_PDL: bool | str = True

# The K/V read, in µs at the HBM bandwidth of the GPU preset, from which eager calls take ``SPLIT_PDL``'s launch. Below
# it the host, not the GPU, sets an eager call's pace (decode-host runs 37-40: the host's time per call in the eager loop
# over the graph's time 1.5-4.3 at 64/8 heads over 8K keys and 28/4 over 20,000, whose reads take 10.0 and 12.2 µs on
# the H100 preset), there is no gap between kernels for the launch to hide, and the runs' rounds there spread too
# widely (2.1x at 28/4 heads) to show a gain or a loss; at and above it the GPU does (0.41-0.96 at 32/8 over 32K: 20.0
# and 40.1 µs). 0: every fused plan. The threshold holds where the Python path makes the eager calls
# (``native.ENABLED`` off): the native call's launch takes ~6 µs of host time, so short reads become GPU-paced, with a gap
# between plain launches that the dependent launch hides; with it on, every fused plan takes ``SPLIT_PDL``. On an H100
# (decode-host run 64, native call on, the ways in turns, three rounds) the dependent launch took batch-1 eager calls at
# 64/8 heads over 8K keys from 1.12x their CUDA graph's time to 1.01x and at 28/4 over 20,000 from 1.12x to 1.03x,
# lower in every round; "trigger" was slower than it on both.
SPLIT_PDL_FROM_US = 13.0


# Eager calls of a plan whose K/V read takes less than this many µs at the GPU preset's bandwidth merge the
# splits inside the split kernel (one launch instead of two, ``_merge_rows`` in both: the same numbers to the
# bit), while a CUDA graph being captured takes the merge kernel. A launch costs a call ~6-9 µs of host time.
# Until the merge loaded all its rows at once (v18) the in-kernel merge cost 3-7 µs of GPU time and the threshold
# was 10 µs; now every eager call takes it (inf). On an H200 (decode-host run 30, the ways in turns in one process),
# eager calls at 32/8 heads over 32K keys took 26.6-28.8 against 34.1-36.4 µs with the merge kernel at D = 64 and
# 37.4-37.7 against 38.2-38.4 at D = 128; batch 8 level. 0: never.
EAGER_FUSED_BELOW_US = math.inf

# CUDA graphs captured from a ``fused`` plan whose K/V read takes at least this many µs at the GPU preset's bandwidth
# merge in the split kernel too (one kernel a call in the graph), each captured call counting arrivals in counters of
# its own: a plan keeps ``GRAPH_COUNTER_SLOTS`` zeroed sets of them (at most ``GRAPH_COUNTER_BYTES`` in all), made
# outside any capture, and hands each captured call the next; once they are gone (or where the in-kernel build has not
# run yet) a captured call takes the merge kernel. So no two captured calls, and no captured call and an eager one,
# ever count in the same place, whatever streams their graphs are replayed on (a graph of 50 calls of one plan takes
# 50 sets). A call captured on a stream with no plan of its own takes the same call's plan from the stream that warmed
# it up (``DecodePlan.restreamed``). On an H200 under CUDA graphs, in turns (decode-host runs 33 and 34), the
# in-kernel merge took 36.38-36.48 and 36.16-36.31 µs against 36.91-37.08 and 36.86-36.94 with the merge kernel at
# 32/8 heads over 32K keys (D = 128), 21.57-21.72 and 21.63-22.04 against 22.03-22.05 and 22.01-22.11 at D = 64; level
# at batch 8, and on the 7.0 and 8.5 µs reads of 64/8 heads over 8K keys and 28/4 over 20,000, which keep the merge
# kernel (run 30, with the in-kernel merge: 12.2 against 11.5 µs and 13.9 against 13.0). On an H100 the same two
# shapes read for 10.0 and 12.2 µs at its preset's bandwidth, and the in-kernel merge was slower there too (decode-host
# runs 41 and 46: 11.94 and 11.70 µs against 11.60 and 11.39, 14.09 and 14.51 against 13.60 and 14.02), while the
# 20.0 µs read of 32/8 heads over 32K at D = 64 kept its gain (28.03 and 27.93 against 28.17 and 28.37): the bound sits
# between, at 13 µs (it was 10). inf: graphs always take the merge kernel.
GRAPH_FUSED_FROM_US = 13.0
GRAPH_COUNTER_SLOTS = 128
GRAPH_COUNTER_BYTES = 2**20  # per plan
GRAPH_COUNTER_BUDGET = 64 * 2**20  # every kept plan's sets together; past it, graphs of new plans take the merge kernel


class CounterSlots:
    """Zeroed sets of a fused merge's arrival counters for CUDA-graph captures (``slots`` sets of ``n`` int32
    counters, no more than ``max_bytes`` in all), made outside any capture; ``take()`` hands out the next set's (data
    pointer, tensor) once and never again, or None once all are gone. Shared by a plan and the plans resized from
    it."""

    __slots__ = ("buf", "n", "next")

    def __init__(self, device, n: int, slots: int, max_bytes: int = 2**62):
        self.buf = torch.zeros(self.count(n, slots, max_bytes) * n, dtype=torch.int32, device=device)
        self.n, self.next = n, 0

    @staticmethod
    def count(n: int, slots: int, max_bytes: int) -> int:
        """How many sets of ``n`` counters ``CounterSlots(device, n, slots, max_bytes)`` holds."""
        return max(0, min(slots, max_bytes // (4 * max(n, 1))))

    def take(self):
        i = self.next
        if (i + 1) * self.n > self.buf.numel():
            return None
        self.next = i + 1
        view = self.buf[i * self.n:(i + 1) * self.n]
        return view.data_ptr(), view


# How a call's tiles of keys are dealt to its splits: None (the default), as its configuration says
# (``DecodeConfig.order``: "strided" for contiguous caches, "chunks" for paged ones), or "strided" / "chunks" for
# every call (an A/B switch). Strided: split s takes tiles s, s + S, s + 2S, ..., so its first tile's address does
# not depend on the sequence's length; chunks: one run of consecutive tiles each. On an H200 under CUDA graphs, in
# turns in one process (decode-host run 25), strided was faster on three of the five contiguous shapes with lengths:
# 10.9-11.0 against 11.7-11.9 µs at 64/8 heads over 8K keys, 36.6 against 37.1 at 32/8 over 32K (D = 128),
# 21.7-22.0 against 22.4-22.6 at D = 64; level at batch 8 and at 1,024 keys in a 32K cache; 12.9 against 12.7 at 28/4
# over 20,000 (run 26 alike). ``PREFETCH_TILES``: how many of each split's first tiles a strided call without a
# window asks L2 for before its length arrives (contiguous caches on a GPU; 0: none). At batch 1 it was slower on
# every shape in runs 25 and 26 (one tile by 0.05-6.2 %, two by 3.5-14.2 %), within 0.6 % at batch 8, so it is
# off. The plans made after a change take it (``clear_plans``).
SPLIT_ORDER: str | None = None
PREFETCH_TILES = 0

# Query rows merged per round trip, by the merge kernel's programs and the in-kernel merge alike (``_merge_rows``: both
# kernels take the same count, so their bits agree): None, as many of a K/V head's G·Nq rows as fit
# ``MERGE_FLOATS_PER_THREAD`` floats of partials per thread (``merge_rows``); an int, that many (a power of two: 1 is
# one row at a time, as before v18).
MERGE_ROWS: int | None = None
MERGE_FLOATS_PER_THREAD = 128


def merge_rows(group_rows: int, block_s: int, block_d: int, num_warps: int) -> int:
    """How many query rows a merge takes per round trip (``MERGE_ROWS``): the group's ``group_rows`` (G·Nq) rounded
    up to a power of two, but no more than keep each row's ``block_s`` × ``block_d`` partials within
    ``MERGE_FLOATS_PER_THREAD`` floats per thread of ``num_warps`` warps; at least 1."""
    if MERGE_ROWS is not None:
        if MERGE_ROWS < 1 or MERGE_ROWS & (MERGE_ROWS - 1):
            raise ValueError(f"MERGE_ROWS must be None or a power of two >= 1, got {MERGE_ROWS!r}")
        return MERGE_ROWS
    fit = max(1, MERGE_FLOATS_PER_THREAD * 32 * num_warps // (block_s * block_d))
    return max(1, min(triton.next_power_of_2(max(group_rows, 1)), 1 << (fit.bit_length() - 1)))


def tail_index(name: str) -> int:
    """Where the split kernel's argument ``name`` sits in a plan's ``tail`` (the arguments after its 11 pointers)."""
    return _decode_split_kernel.arg_names.index(name) - 11


def split_layout(mask, *, paged: bool, k_strides: tuple, v_strides: tuple, head_dim: int, itemsize: int,
                 device, order: str = "strided") -> tuple[bool, int, int]:
    """The split kernel's STRIDED, PREFETCH and PF_LINES for a call: ``SPLIT_ORDER`` or, where it is None, the
    configuration's ``order``; ``PREFETCH_TILES`` where the first tiles' keys do not depend on the length
    (strided, no left window edge) and are rows of a contiguous cache (unit stride along D), on a CUDA device
    outside the interpreter (an inline PTX prefetch); PF_LINES: the 128-byte lines of a key row, rounded up to a
    power of two."""
    chosen = SPLIT_ORDER if SPLIT_ORDER is not None else order
    if chosen not in ("strided", "chunks"):
        raise ValueError(f"SPLIT_ORDER and DecodeConfig.order must be 'strided' or 'chunks', got {chosen!r}")
    strided = chosen == "strided"
    lines = triton.next_power_of_2(max(1, -(-head_dim * itemsize // 128)))
    prefetch = PREFETCH_TILES if (strided and mask.left < 0 and not paged and k_strides[-1] == 1
                                  and v_strides[-1] == 1 and device.type == "cuda" and not interpret_mode()) else 0
    return strided, max(0, int(prefetch)), lines


def read_us(plan_bytes: float, device) -> float | None:
    """µs to read ``plan_bytes`` at the HBM bandwidth of ``device``'s preset; None off CUDA or in the interpreter."""
    if device.type != "cuda" or interpret_mode():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return plan_bytes / gpu_for_device(index).hbm_bw * 1e6


def eager_fused(plan_bytes: float, device) -> bool:
    """Whether eager calls reading ``plan_bytes`` of K/V on ``device`` merge inside the split kernel:
    ``EAGER_FUSED_BELOW_US`` against the bytes at the bandwidth of the device's preset; never off CUDA."""
    us = read_us(plan_bytes, device)
    return us is not None and us < EAGER_FUSED_BELOW_US


def merge_pdl(device, eager: bool = False) -> bool:
    """Whether the merge kernel is launched as a programmatic dependent launch on ``device`` — by eager calls
    (``eager``) where ``MERGE_PDL`` is True or "eager", by graphs where it is True — on a CUDA GPU of compute
    capability 9.0 or newer (Hopper); never in the interpreter."""
    if not (MERGE_PDL is True or (eager and MERGE_PDL == "eager")) or device.type != "cuda" or interpret_mode():
        return False
    from .config import device_capability

    return device_capability(device)[0] >= 9


def split_pdl(device, plan_bytes: float | None = None) -> bool | str:
    """``SPLIT_PDL`` where the split kernel's eager launches may be programmatic dependent launches: a CUDA GPU of compute
    capability 9.0 or newer outside the interpreter, and with ``plan_bytes`` (the K/V a call reads) a read of at least
    ``SPLIT_PDL_FROM_US`` at the bandwidth of the device's preset (any read where the native call is on,
    ``native.ENABLED``); else False."""
    if SPLIT_PDL not in (False, True, "trigger"):
        raise ValueError(f"SPLIT_PDL must be False, True or 'trigger', got {SPLIT_PDL!r}")
    if not SPLIT_PDL or device.type != "cuda" or interpret_mode():
        return False
    from .config import device_capability

    if device_capability(device)[0] < 9:
        return False
    if plan_bytes is not None and SPLIT_PDL_FROM_US > 0 and not native.ENABLED \
            and read_us(plan_bytes, device) < SPLIT_PDL_FROM_US:
        return False
    return SPLIT_PDL


def _spare(device) -> torch.Tensor:
    """A small float32 tensor passed for the pointer arguments a launch does not read."""
    key = str(device)
    if key not in _SPARE:
        _SPARE[key] = torch.zeros(16, dtype=torch.float32, device=device)
    return _SPARE[key]


# Bytes of outputs a plan allocates at once for its next calls (``OutputSlab``), and the most pairs in one slab;
# outputs larger than a quarter of the slab take ``torch.empty`` per call.
SLAB_BYTES = 256 * 1024
SLAB_MAX = 64


class OutputSlab:
    """The (out, lse) pairs of a plan's next calls, allocated a slab at a time.

    A decode call's host time is a few µs of Python per tensor it makes, and ``torch.empty`` on a CUDA
    device is among the dearest of them. A slab is one (n, B, H, Nq, D) and one (n, B, H, Nq) allocation,
    unbound into n pairs of views (``unbind``: one call for all n); each pair is handed out once and never
    again, so every output is a tensor of its own (a view of its own part of the slab: the slab's memory
    returns to PyTorch's allocator once all n of them are gone). Slabs start at 4 pairs and double up to
    ``SLAB_MAX`` and ``SLAB_BYTES``, so a plan called once allocates little. ``take(capturing)``: a pair;
    while a CUDA graph is being captured, a pair of the graph's own (``torch.empty``), as before slabs. A
    slab made under ``torch.inference_mode`` holds inference tensors: a call in the other mode makes a new
    slab, so every output is the kind of tensor ``torch.empty`` would have made in that call."""

    __slots__ = ("shape", "dtype", "device", "pairs", "size", "limit", "inference")

    def __init__(self, shape: tuple, dtype: torch.dtype, device: torch.device):
        self.shape, self.dtype, self.device = shape, dtype, device
        B, H, Nq, D = shape
        pair_bytes = B * H * Nq * (D * dtype.itemsize + 4)
        self.limit = min(SLAB_MAX, SLAB_BYTES // max(pair_bytes, 1))
        self.size = 4 if self.limit >= 4 else 0
        self.pairs: list = []
        self.inference = False  # whether the pairs are inference tensors

    def _single(self):
        return (torch.empty(self.shape, dtype=self.dtype, device=self.device),
                torch.empty(self.shape[:3], dtype=torch.float32, device=self.device))

    def take(self, capturing: bool = False):
        inference = torch.is_inference_mode_enabled()
        if not capturing and inference == self.inference:
            try:
                return self.pairs.pop()  # (one call: another thread cannot take the pair in between)
            except IndexError:
                pass
        if capturing or not self.size:
            return self._single()
        self.inference = inference
        n = self.size
        self.size = min(2 * n, self.limit)
        outs = torch.empty((n, *self.shape), dtype=self.dtype, device=self.device).unbind(0)
        lses = torch.empty((n, *self.shape[:3]), dtype=torch.float32, device=self.device).unbind(0)
        self.pairs = list(zip(outs[:0:-1], lses[:0:-1]))  # popped in slab order, the first handed out now
        return outs[0], lses[0]


class DecodePlan:
    """Everything a decode call derives from its signature — the inputs' shapes, strides, dtypes and
    device, the variant, the split count, the configuration — computed once: the grid, the scalar
    arguments, the output and partial shapes, and the kernels' ``Launcher``s (which, after their first
    launch, skip Triton's per-call argument binding). Calling it with tensors of that signature
    allocates the outputs and launches. ``capacity`` is the cache capacity the plan is for; a resized
    plan keeps its first plan's ``dims`` (the capacity aside, the same)."""

    def __init__(self, q, k_cache, v_cache, dims, *, cache_seqlens, block_table, num_splits: int | None, mask,
                 scale: float, softcap: float | None, slopes, config: DecodeConfig | None):
        B, H, Nq, D, Hkv = dims.B, dims.H, dims.Nq, dims.D, dims.Hkv
        dev = q.device
        self.dims, self.mask, self.user_splits = dims, mask, num_splits
        self.cfg = config or _config_for(dims, dev)
        self.split_fn, self.merge_fn = self._kernels(q, k_cache, v_cache, dims, mask, softcap, slopes,
                                                     paged=block_table is not None, forced=config is not None)
        self.shape, self.dtype, self.device = (B, H, Nq, D), q.dtype, dev
        self.has_seqlens = cache_seqlens is not None
        self.cast_seqlens = self.has_seqlens and (cache_seqlens.dtype != torch.int32
                                                  or not cache_seqlens.is_contiguous())
        self.paged = block_table is not None
        self.cast_table = self.paged and (block_table.dtype != torch.int32 or block_table.stride(-1) != 1)
        if self.cast_table:
            block_table = block_table.to(torch.int32).contiguous()
        self.has_slopes = slopes is not None
        self.outputs = OutputSlab(self.shape, q.dtype, dev)  # shared by the resized plans (one output shape)
        self.spare = _spare(dev)
        self.spare_ptr = self.spare.data_ptr()
        self.on_cuda = dev.type == "cuda"
        stride_sb, stride_sh = (slopes.stride(0), slopes.stride(1)) if slopes is not None else (0, 0)
        # with softcap the kernel computes softcap·log2(e)·tanh(scale·qk/softcap): base 2 after the cap
        qk_scale, cap_scale = (scale * LOG2E, 0.0) if softcap is None else (scale / softcap, softcap * LOG2E)
        cfg = self.cfg
        # the split kernel's arguments after its 11 pointers, in order, but for the cache's strides
        # and its capacity and split count (``_size``)
        self.q_args = list(q.stride())
        self.mid_args = [block_table.stride(0) if self.paged else 0, H * Nq * D, Nq * D, D, 1,  # out: contiguous
                         stride_sb, stride_sh, qk_scale, cap_scale, max(mask.left, 0), max(mask.right, 0), H]
        self.const_args = [  # constexprs, MERGE (from the split count) excepted
            D, Nq, H // Hkv, dims.page_size or 1,
            max(16, triton.next_power_of_2((H // Hkv) * Nq)),  # BLOCK_M: the group's G·Nq query rows, padded
            cfg.block_n, cfg.block_d, self.paged, mask.left >= 0, mask.right >= 0, softcap is not None,
            slopes is not None]
        self.end_args = [dev.type == "cpu", cfg.evict, self.has_seqlens]  # DOT_F32, EVICT, HAS_SEQLENS
        self.capacity_at = len(self.q_args) + 8 + len(self.mid_args)  # where the capacity sits in ``tail``
        self.split_memo: dict[int, int] = {}  # the split model's counts, shared with the resized plans
        self.launcher_memo: dict = {}  # (splits, the strides' and capacity's specialisation) -> Launcher, shared too
        self._size(dims.capacity, k_cache.stride(), v_cache.stride())

    def _kernels(self, q, k_cache, v_cache, dims, mask, softcap, slopes, *, paged: bool, forced: bool) -> tuple:
        """The split and merge kernels of the plan's configuration (``DecodeConfig.kernel``): the Triton kernels, or
        the Gluon kernels where they take the call (``decode_gluon.gluon_unsupported``). A configuration that asks
        for Gluon on a call it does not take falls back to Triton (``cfg`` then says "triton"), or raises a
        ValueError where the caller forced it (``forced``)."""
        kernel = self.cfg.kernel
        if kernel == "triton":
            return _decode_split_kernel, _decode_merge_kernel
        if kernel != "gluon":
            raise ValueError(f"DecodeConfig.kernel must be 'triton' or 'gluon', got {kernel!r}")
        from . import decode_gluon

        order = SPLIT_ORDER if SPLIT_ORDER is not None else self.cfg.order
        why = decode_gluon.gluon_unsupported(
            device=q.device, dtype=q.dtype, head_dim=dims.D, rows=(dims.H // dims.Hkv) * dims.Nq, paged=paged,
            block_n=self.cfg.block_n, stages=self.cfg.num_stages,
            k_strides=k_cache.stride(), v_strides=v_cache.stride(), k_ptr=k_cache.data_ptr(),
            v_ptr=v_cache.data_ptr(), mask=mask, softcap=softcap, slopes=slopes, strided=order == "strided")
        if why is None:
            return decode_gluon._decode_split_gluon, decode_gluon._decode_merge_gluon
        if forced:
            raise ValueError(f"DecodeConfig(kernel='gluon'): the Gluon split kernel does not take {why}")
        self.cfg = replace(self.cfg, kernel="triton")
        return _decode_split_kernel, _decode_merge_kernel

    def _keys(self, capacity: int) -> int:
        """The keys a call streams from a cache of ``capacity`` (with a window, about the window)."""
        return capacity if self.mask.left < 0 else streamed_keys(capacity=capacity, queries=self.shape[2],
                                                                 mask=self.mask)

    def _splits_for(self, capacity: int) -> int:
        """The split count for a cache of ``capacity`` keys: the caller's, or the split model's for the keys
        the call streams (kept per ``model_seq`` of them on a GPU, where the model is evaluated there), and
        never more than one split per tile of keys."""
        cfg, mask = self.cfg, self.mask
        B, H, Nq, D = self.shape
        keys = self._keys(capacity)
        num_splits = self.user_splits
        if num_splits is None:
            memo_key = model_seq(keys) if self.on_cuda else keys
            num_splits = self.split_memo.get(memo_key)
            if num_splits is None:
                num_splits = self.split_memo[memo_key] = choose_num_splits(
                    batch=B, kv_heads=self.dims.Hkv, seq=keys, head_dim=D, device=self.device, config=cfg)
        # the streamed keys start in the tile holding the first of them: at most one tile more than they fill
        tiles = -(-capacity // cfg.block_n)
        if mask.left >= 0:
            tiles = min(tiles, -(-keys // cfg.block_n) + 1)
        return max(1, min(num_splits, tiles))

    def _eager_counters(self) -> None:
        """``counters`` and ``counters_ptr`` of eager calls on the current stream: the stream's arrival counters where
        the split kernel may merge (MERGE = 2 or ``fused``), else the spare tensor."""
        needed = self.merge == 2 or self.fused
        self.counters = _counters(self.device, self.dims.B * self.dims.Hkv) if needed else self.spare
        self.counters_ptr = self.counters.data_ptr()

    def restreamed(self) -> DecodePlan:
        """This plan for the same call on another stream — a CUDA graph capturing it on a stream of its own, after
        eager calls warmed it up on another: the compiled kernels, whether the pair has run, and the graphs'
        counter sets shared; the split buffers and the eager calls' counters the new stream's own (found at its first
        eager call)."""
        plan = DecodePlan.__new__(DecodePlan)
        plan.__dict__.update(self.__dict__)
        plan.scratch = None
        plan.counters = plan.counters_ptr = None
        plan.native, plan.native_seen = None, 0
        return plan

    def _read_bytes(self, capacity: int) -> int:
        """The K/V bytes a call on a cache of ``capacity`` streams."""
        B, H, Nq, D = self.shape
        return 2 * B * self.dims.Hkv * self._keys(capacity) * D * self.dtype.itemsize

    def _size(self, capacity: int, k_strides: tuple, v_strides: tuple) -> None:
        """What depends on the cache's capacity: the split count, the merge, the scalar arguments,
        the launchers and the split buffers."""
        dims, cfg = self.dims, self.cfg
        B, H, Nq, D = self.shape
        Hkv = dims.Hkv
        self.capacity = capacity
        self.num_splits = S = self._splits_for(capacity)
        self.merge = 0 if S == 1 else (2 if cfg.fused_merge else 1)
        # eager calls merge in the split kernel (``eager_fused``): their own tail and launcher (MERGE = 2)
        self.fused = self.merge == 1 and eager_fused(self._read_bytes(capacity), self.device)
        self.pair_ran = False  # whether the split and merge kernels of this split count have run (compiled)
        self.fused_ran = False  # whether an eager call has run the fused build (compiled: a graph may take it)
        # the eager calls' arrival counters (``_counters``: per device and stream); a plan made while a CUDA graph is
        # being captured finds them at its first eager call (never memory of the graph's own)
        self.counters = self.counters_ptr = None
        if not (self.on_cuda and _capturing()):
            self._eager_counters()
        # graphs captured from this plan merge in the split kernel too (a large ``fused`` read, or every call of a
        # MERGE = 2 configuration), each captured call with counters of its own
        us = read_us(self._read_bytes(capacity), self.device) if self.fused or self.merge == 2 else None
        self.graph_slots = None
        if us is not None and (self.merge == 2 or us >= GRAPH_FUSED_FROM_US) and GRAPH_COUNTER_SLOTS > 0 \
                and not _capturing():
            nbytes = 4 * B * Hkv * CounterSlots.count(B * Hkv, GRAPH_COUNTER_SLOTS, GRAPH_COUNTER_BYTES)
            if _STATS["graph_counter_bytes"] + nbytes <= GRAPH_COUNTER_BUDGET:  # the kept plans' sets, all together
                self.graph_slots = CounterSlots(self.device, B * Hkv, GRAPH_COUNTER_SLOTS, GRAPH_COUNTER_BYTES)
                _STATS["graph_counter_bytes"] += nbytes
        self.scratch = None
        self.native = None  # the program of this plan's steady eager call (``native``), once made; False: none
        self.native_seen = 0  # how many of its calls took the Python path (``_native_after`` counts them)
        layout = split_layout(self.mask, paged=self.paged, k_strides=k_strides, v_strides=v_strides, head_dim=D,
                              itemsize=self.dtype.itemsize, device=self.device,
                              order=cfg.order)  # STRIDED, PREFETCH, PF_LINES
        trigger = MERGE_TRIGGER and self.merge == 1 and merge_pdl(self.device, eager=True) and not interpret_mode()
        self.rows = merge_rows((H // Hkv) * Nq, triton.next_power_of_2(S), cfg.block_d, cfg.num_warps)
        self.tail = [*self.q_args, *k_strides, *v_strides, *self.mid_args, capacity, dims.num_pages or 1, S,
                     *self.const_args, self.merge, *self.end_args, triton.next_power_of_2(S), *layout,
                     trigger, self.rows, False]  # BLOCK_S, STRIDED, PREFETCH, PF_LINES, TRIGGER, MERGE_ROWS, WAIT
        if cfg.kernel == "gluon":
            self.tail.append(cfg.num_stages)  # RING: the Gluon kernel's ring of K/V tiles
        self.merge_at = len(self.q_args) + 8 + len(self.mid_args) + 3 + len(self.const_args)  # where MERGE sits
        assert self.split_fn.arg_names[11 + self.merge_at] == "MERGE"
        assert len(self.tail) + 11 == len(self.split_fn.arg_names)
        self.split_spec = (S, int_specs((*k_strides, *v_strides, capacity)))  # what picks the compiled kernel
        self.split = self.launcher_memo.get(self.split_spec)
        if self.split is None:
            self.split = self.launcher_memo[self.split_spec] = Launcher(
                self.split_fn, (S, Hkv, B), num_warps=cfg.num_warps,
                num_stages=cfg.num_stages if cfg.kernel == "triton" else None)  # (Gluon: the ring is the kernel's)
        if self.merge == 1:
            # the plain launch (graphs, and a plan's first call) and the eager one (``merge_pdl``; the same
            # Launcher where both are plain); the split kernel's warps: its in-kernel merge (``fused``) then
            # reduces in the same order, bit for bit
            plain, eager = merge_pdl(self.device), merge_pdl(self.device, eager=True)
            self.merge_tail, self.merge_launch = self._merge_launcher(plain)
            self.pdl_tail, self.pdl_launch = self._merge_launcher(eager) if eager != plain \
                else (self.merge_tail, self.merge_launch)
        self._fused_launcher()

    def _merge_launcher(self, pdl: bool) -> tuple[list, Launcher]:
        """The merge kernel's arguments after its four pointers, and its Launcher, launched as a programmatic
        dependent launch with ``pdl`` (a compile option: a compiled kernel of its own)."""
        B, H, Nq, D = self.shape
        S, cfg = self.num_splits, self.cfg
        tail = [H * Nq * D, Nq * D, D, 1, H, D, S, B * H * Nq, Nq, triton.next_power_of_2(S), cfg.block_d, pdl,
                self.rows]
        return tail, Launcher(self.merge_fn, (-(-B * H * Nq // self.rows), 1, 1), num_warps=cfg.num_warps,
                              num_stages=3 if cfg.kernel == "triton" else None, launch_pdl=pdl)

    def _fused_launcher(self) -> None:
        """With ``fused``: ``tail`` with MERGE = 2 (``fused_tail``) and the launcher of that build."""
        if not self.fused:
            return
        tail = self.tail.copy()
        tail[self.merge_at] = 2  # MERGE
        tail[tail_index("TRIGGER")] = False  # no merge kernel follows
        self.fused_tail = tail
        spec = (*self.split_spec, "fused")
        self.fused_split = self.launcher_memo.get(spec)
        if self.fused_split is None:
            self.fused_split = self.launcher_memo[spec] = Launcher(self.split_fn, self.split.grid,
                                                                   **self.split.options)
        self.fused_ran = self.fused_split.compiled is not None  # (a build shared with the plan it was derived from)
        # eager calls: the same build (None), or with ``SPLIT_PDL`` a programmatic dependent launch that waits first
        self.eager_split = self.eager_tail = None
        mode = split_pdl(self.device, self._read_bytes(self.capacity))
        if mode:
            tail = self.fused_tail.copy()
            tail[tail_index("WAIT")] = True
            tail[tail_index("TRIGGER")] = mode == "trigger"
            spec = (*self.split_spec, "fused", "pdl", mode)
            self.eager_split = self.launcher_memo.get(spec)
            if self.eager_split is None:
                self.eager_split = self.launcher_memo[spec] = Launcher(self.split_fn, self.split.grid,
                                                                       **self.split.options, launch_pdl=True)
            self.eager_tail = tail

    def resized(self, k_cache, v_cache) -> DecodePlan:
        """This plan for a contiguous cache of another capacity (``k_cache``, ``v_cache``: (B, Hkv, L, D)
        contiguous, the plan's B, Hkv, D, dtype and device — ``family_key`` says so): a cache that
        grows step by step needs no new checks and no new plan from scratch.

        Where the split count stays (on a GPU the split model moves only every ~3 % of growth,
        ``model_seq``), only the cache's strides and capacity change among the kernel's arguments: the
        new plan shares this one's launchers, compiled kernels and split buffers, unless a changed
        integer specialises the kernel differently. Otherwise the capacity's part is made again
        (``_size``), reusing the compiled kernel where the arguments specialise as before."""
        capacity = k_cache.shape[2]
        plan = DecodePlan.__new__(DecodePlan)  # a shallow copy (copy.copy's machinery costs µs here)
        plan.__dict__.update(self.__dict__)
        plan.native, plan.native_seen = None, 0  # (its inputs' signature is another)
        if self._splits_for(capacity) == self.num_splits:
            tail = self.tail.copy()
            i = len(self.q_args)
            tail[i:i + 8] = (*k_cache.stride(), *v_cache.stride())
            tail[self.capacity_at] = capacity
            plan.tail, plan.capacity = tail, capacity
            spec = (self.num_splits, int_specs((*tail[i:i + 8], capacity)))
            if spec != self.split_spec:  # e.g. a capacity that stops (or starts) dividing by 16
                plan.split_spec = spec
                plan.split = self.launcher_memo.get(spec)
                if plan.split is None:
                    plan.split = self.launcher_memo[spec] = Launcher(self.split_fn, self.split.grid,
                                                                     **self.split.options)
            plan._fused_launcher()
            return plan
        plan._size(capacity, k_cache.stride(), v_cache.stride())  # another split count: new buffers too
        # the same compiled kernel where the arguments that changed specialise as before
        if self.split.compiled is not None and plan.split.compiled is None \
                and same_specialisation(self.split.kernel, self.tail, plan.tail):
            plan.split.compiled = self.split.compiled
            if plan.merge == 1 and self.merge == 1 and same_specialisation(self.merge_launch.kernel, self.merge_tail,
                                                                           plan.merge_tail):
                for name in ("merge_launch", "pdl_launch"):
                    if getattr(plan, name).compiled is None:
                        getattr(plan, name).compiled = getattr(self, name).compiled
        return plan

    def __call__(self, q, k_cache, v_cache, cache_seqlens, block_table, slopes, stream: int | None = None):
        """Launch on tensors of the plan's signature (``slopes`` the (H,) or (B, H) tensor or its (B, H)
        view) on ``stream`` (a raw handle; None: the current stream); returns (out, lse)."""
        capturing = self.on_cuda and _capturing()
        out, lse = self.outputs.take(capturing)  # (B, H, Nq, D), and (B, H, Nq) float32, natural log
        if self.cast_seqlens:
            cache_seqlens = cache_seqlens.to(torch.int32).contiguous()
        if self.cast_table:
            block_table = block_table.to(torch.int32).contiguous()
        # eager calls of a ``fused`` plan merge in the split kernel once the merge kernel's pair has run (the
        # first call compiles it, so a graph captured after it compiles nothing)
        fused = self.fused and not capturing and self.pair_ran
        if capturing:
            counters_ptr = counters = None
            if self.merge == 2 or (self.fused and self.graph_slots is not None and self.fused_split.compiled is not None):
                # a graph of a large call (or of a MERGE = 2 configuration): the in-kernel merge, with counters no other
                # call uses; none left: the merge kernel, or with MERGE = 2 zeroed counters of the graph's own (a memset
                # in the graph)
                slot = self.graph_slots.take() if self.graph_slots is not None else None
                if slot is not None:
                    fused = self.merge == 1
                    counters_ptr, counters = slot
                elif self.merge == 2:
                    counters = torch.zeros(self.dims.B * self.dims.Hkv, dtype=torch.int32, device=self.device)
                    counters_ptr = counters.data_ptr()
            if counters is None:
                counters_ptr, counters = self.spare_ptr, self.spare
        else:
            if self.counters is None:
                self._eager_counters()
            counters_ptr, counters = self.counters_ptr, self.counters
        # a fused call: the graphs' build, or for eager calls after the first one that build took (compiling what a
        # graph captured later needs), with ``SPLIT_PDL`` the dependent launch's build
        split, tail = (self.split, self.tail) if not fused else (self.fused_split, self.fused_tail) \
            if capturing or self.eager_split is None or not self.fused_ran else (self.eager_split, self.eager_tail)
        if fused and not capturing:
            self.fused_ran = True
        # eager calls launch the merge kernel as a programmatic dependent launch (``MERGE_PDL``) once the plain pair
        # has run (compiled); graphs take the plain launch
        merge = merge_tail = None
        if self.merge == 1 and not fused:
            merge, merge_tail = (self.pdl_launch, self.pdl_tail) if self.pair_ran and not capturing \
                else (self.merge_launch, self.merge_tail)
        if stream is not None and split.compiled is not None and (merge is None or merge.compiled is not None) \
                and not hooks_set():
            o_part, lse_part = self._partials(capturing)
            out_ptr, lse_ptr = out.data_ptr(), lse.data_ptr()
            split.launch([q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                          cache_seqlens.data_ptr() if self.has_seqlens else self.spare_ptr,
                          block_table.data_ptr() if self.paged else self.spare_ptr,
                          o_part, lse_part, out_ptr, lse_ptr, counters_ptr,
                          slopes.data_ptr() if self.has_slopes else self.spare_ptr, *tail], stream)
            if merge is not None:
                merge.launch([o_part, lse_part, out_ptr, lse_ptr, *merge_tail], stream)
                self.pair_ran = True
            return out, lse
        spare = self.spare
        o_part, lse_part = self._partials(capturing, as_tensors=True)
        split([q, k_cache, v_cache, cache_seqlens if self.has_seqlens else spare,
               block_table if self.paged else spare, o_part, lse_part, out, lse, counters,
               slopes if self.has_slopes else spare, *tail], stream)
        if merge is not None:
            merge([o_part, lse_part, out, lse, *merge_tail], stream)
            self.pair_ran = True
        return out, lse

    def native_launches(self) -> list | None:
        """The launches a steady eager call of this plan makes, as ``native.program`` takes them (``native.launch_spec``
        of each, the call's tensors as slots): what ``__call__`` launches outside a capture once the first calls have
        run — the split kernel (its fused build where eager calls merge in it, that build's dependent launch where
        they wait), then the merge kernel's eager launch where they do not. None where the eager calls are not steady
        yet (the pair or the fused build not run), or where a call needs more than its tensors' pointers (lengths or
        a page table cast on each call, ALiBi slopes, split buffers allocated per call)."""
        if not self.on_cuda or self.cast_seqlens or self.cast_table or self.has_slopes or self.counters is None:
            return None
        if (self.merge and self.scratch is None) or (self.merge == 1 and not self.pair_ran) \
                or (self.fused and not self.fused_ran):
            return None
        fused = self.fused  # (the pair has run: eager calls merge in the split kernel)
        split, tail = (self.split, self.tail) if not fused else (self.fused_split, self.fused_tail) \
            if self.eager_split is None else (self.eager_split, self.eager_tail)
        o_part, lse_part = self._partials(False)
        spare = self.spare_ptr
        launches = [native.launch_spec(split, [native.Q, native.K, native.V, native.LENS if self.has_seqlens else spare,
                                               native.TABLE if self.paged else spare, o_part, lse_part, native.OUT,
                                               native.LSE, self.counters_ptr, spare, *tail])]
        if self.merge == 1 and not fused:
            launches.append(native.launch_spec(self.pdl_launch, [o_part, lse_part, native.OUT, native.LSE,
                                                                 *self.pdl_tail]))
        return None if None in launches else launches

    def _partials(self, capturing: bool, as_tensors: bool = False):
        """The partial outputs and lse of the splits (float32 (B, H, Nq, S, D) and (B, H, Nq, S)):
        the plan's own scratch — calls queued on one stream run in order, and a plan belongs to one
        stream — except while a CUDA graph is being captured: a graph gets buffers of its own, which
        live as long as it does (``capturing``). As data pointers unless ``as_tensors``; the spare tensor
        without splits."""
        if not self.merge:
            return (self.spare, self.spare) if as_tensors else (self.spare_ptr, self.spare_ptr)
        parts = self.scratch
        if parts is None or capturing:
            B, H, Nq, D = self.shape
            parts = (torch.empty((B, H, Nq, self.num_splits, D), dtype=torch.float32, device=self.device),
                     torch.empty((B, H, Nq, self.num_splits), dtype=torch.float32, device=self.device))
            nbytes = 4 * B * H * Nq * self.num_splits * (D + 1)
            if self.scratch is None and not capturing \
                    and _STATS["scratch_bytes"] + nbytes <= SCRATCH_BUDGET:
                self.scratch = parts  # kept while the plans fit the budget; beyond it, allocated per call
                _STATS["scratch_bytes"] += nbytes
        return parts if as_tensors else (parts[0].data_ptr(), parts[1].data_ptr())


_PLANS: dict = {}
_MAX_PLANS = 256


def _scalars_keyable(num_splits, causal, window, softcap, scale) -> bool:
    """Whether a call's scalar arguments are of the types a plan key takes (``plan_key``)."""
    return (type(causal) is bool and (num_splits is None or type(num_splits) is int)
            and (softcap is None or type(softcap) in (int, float))
            and (scale is None or type(scale) in (int, float))
            and (window is None or (type(window) is tuple and len(window) == 2
                                    and type(window[0]) is int and type(window[1]) is int)))




def plan_key(q, k_cache, v_cache, cache_seqlens, block_table, num_splits, causal, window, softcap, alibi_slopes,
             scale, config=None) -> tuple | None:
    """A key that determines a decode call's plan — every tensor's shape, strides, dtype, device and
    16-byte alignment (``tensor_key``'s facts), the variant, the split count, the configuration, the current
    CUDA device and stream — or None where it cannot say (a list for a tensor, a window given as a list,
    anything of an unexpected type): such calls take the checked path every time. Equal keys mean equal
    checks, so a plan made by a checked call serves every later call with its key. A few µs of host time
    per call, the dearest step of a kept plan's call after the launch: built inline from the tensors'
    attributes, the scalars' types checked only where they are not the defaults."""
    if type(q) is not torch.Tensor or not (causal is True and num_splits is None and window is None
                                           and softcap is None and scale is None) \
            and not _scalars_keyable(num_splits, causal, window, softcap, scale):
        return None
    if q.is_cuda:
        if _RAW_STREAM is None or _GET_DEVICE is None:
            where = (torch.cuda.current_device(), current_stream(q.device))
        else:
            where = (_GET_DEVICE(), _RAW_STREAM(q.get_device()))
    elif interpret_mode():
        where = (None, None)
    else:
        return None
    try:
        return ((q.shape, q.stride(), q.dtype, q.get_device(), q.data_ptr() % 16 == 0),
                (k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.get_device(), k_cache.data_ptr() % 16 == 0),
                (v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.get_device(), v_cache.data_ptr() % 16 == 0),
                None if cache_seqlens is None else (cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype,
                                                    cache_seqlens.get_device(), cache_seqlens.data_ptr() % 16 == 0),
                None if block_table is None else tensor_key(block_table),
                None if alibi_slopes is None else tensor_key(alibi_slopes),
                num_splits, causal, window, softcap, scale, config, *where)
    except (AttributeError, TypeError):  # not a tensor
        return None


def family_key(key: tuple, k_cache, v_cache, block_table) -> tuple | None:
    """``key`` with the contiguous cache's capacity left out, or None for a paged or strided cache:
    calls with one family key differ at most in how many keys the cache holds, and the capacity
    enters a plan only through numbers ``DecodePlan.resized`` recomputes."""
    if block_table is not None or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return None
    k, v = key[1], key[2]
    return (key[0], ("contiguous", k[0][:2], k[0][3], *k[2:]), ("contiguous", v[0][:2], v[0][3], *v[2:]), *key[3:])


_FAMILIES: dict = {}  # family key -> the last plan made for it
_STATS = {"hits": 0, "plans": 0, "resized": 0, "restreamed": 0, "scratch_bytes": 0, "graph_counter_bytes": 0}
SCRATCH_BUDGET = 256 * 2**20  # bytes of split buffers the kept plans may hold, all together


def _keep(key: tuple, plan: DecodePlan, family: tuple | None) -> None:
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
        _FAMILIES.clear()
        _CALLS.clear()
        _STATS["scratch_bytes"] = _STATS["graph_counter_bytes"] = 0
    _PLANS[key] = plan
    if family is not None:
        _FAMILIES[family] = plan
    if plan.on_cuda and not _capturing():
        _CALLS[key[:-1]] = plan  # (the key without its stream: a capture on another stream takes this plan)


_CALLS: dict = {}  # a plan key without its stream -> the last plan made for it outside a CUDA graph's capture


def run_planned(key, q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes):
    """(out, lse) from the plan kept under ``key`` — or from the plan of the same call on a cache of
    another capacity, resized — or None if there is neither."""
    plan = _PLANS.get(key)
    if plan is None and key[-1] is not None and (sibling := _CALLS.get(key[:-1])) is not None and _capturing():
        plan = sibling.restreamed()  # a graph captured on a stream of its own after eager calls on another
        _keep(key, plan, None)
        _STATS["restreamed"] += 1
    if plan is None:
        family = family_key(key, k_cache, v_cache, block_table)
        sibling = None if family is None else _FAMILIES.get(family)
        # the checks a resized plan skips: k and v of one capacity, at least one key (else checked anew)
        if sibling is None or k_cache.shape[2] != v_cache.shape[2] or k_cache.shape[2] < 1:
            return None
        plan = sibling.resized(k_cache, v_cache)
        _keep(key, plan, family)
        _STATS["resized"] += 1
    else:
        _STATS["hits"] += 1
    result = plan(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, key[-1])
    if native.ENABLED:
        _native_after(plan, key, q, k_cache, v_cache, cache_seqlens, block_table, result)
    return result


def _native_after(plan: DecodePlan, key: tuple, q, k_cache, v_cache, cache_seqlens, block_table, result) -> None:
    """With ``native.ENABLED``, after a kept plan's call on the Python path: the plan's program, made once its eager
    calls are steady (``DecodePlan.native_launches``) and the plan has served a second call (a cache that grows every
    step makes a resized plan for each step, which would pay for a program it never uses), becomes the one the public
    call tries first. Until the native module is built (in the background, at the first such call) the calls stay on
    the Python path."""
    plan.native_seen += 1
    if plan.native is None and plan.native_seen >= 2 and key[-1] is not None and _defaults(key) and not _capturing() \
            and native.module(wait=False) is not None:
        launches = plan.native_launches()
        if launches is not None:
            made = native.program(q, k_cache, v_cache, cache_seqlens, *result, block_table=block_table,
                                  device=key[-2], stream=key[-1], launches=launches)
            plan.native = made if made is not None else False  # (False: none to be had, not asked for again)
    if plan.native:
        native.set_fast(plan)


def _defaults(key: tuple) -> bool:
    """Whether a plan key's call passed no ALiBi slopes and the default scalars (``plan_key``'s order; a page table
    or none): the calls the public call's native fast path takes."""
    return key[5] is None and key[6:12] == (None, True, None, None, None, None)


def plan_stats() -> dict[str, int]:
    """How many calls reused a kept plan (``hits``), how many plans were made from scratch (``plans``)
    and how many resized from a plan of the same cache at another capacity (``resized``) or taken from the same
    call's plan on another stream by a CUDA graph's capture (``restreamed``), since the process started or
    ``clear_plans``; ``cached``: how many are kept now; ``scratch_bytes``: the split
    buffers they hold (at most ``SCRATCH_BUDGET``); ``graph_counter_bytes``: their graphs' counter sets (at most
    ``GRAPH_COUNTER_BUDGET``)."""
    return dict(_STATS, cached=len(_PLANS))


def clear_plans() -> None:
    """Forget every kept plan (and the counts), the native fast path's program with them."""
    native.set_fast(None)
    _PLANS.clear()
    _FAMILIES.clear()
    _CALLS.clear()
    _STATS.update(hits=0, plans=0, resized=0, restreamed=0, scratch_bytes=0, graph_counter_bytes=0)


def decode_fn(q, k_cache, v_cache, dims, *, cache_seqlens, block_table, num_splits: int | None, mask,
              scale: float, softcap: float | None = None, slopes=None, config: DecodeConfig | None = None,
              key: tuple | None = None):
    """Run the kernels on inputs already checked and supported (``dims`` from ``check_decode_inputs``,
    ``mask`` a ``variants.Mask``, ``slopes`` (B, H) float32 or None). With ``key`` (``plan_key`` of the
    call as made) the plan is kept for later calls with that key."""
    plan = DecodePlan(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                      num_splits=num_splits, mask=mask, scale=scale, softcap=softcap, slopes=slopes, config=config)
    result = plan(q, k_cache, v_cache, cache_seqlens, block_table, slopes)
    if key is not None:
        _keep(key, plan, family_key(key, k_cache, v_cache, block_table))
        _STATS["plans"] += 1
    return result


__all__ = ["SCRATCH_BUDGET", "SLAB_BYTES", "SLAB_MAX", "DecodePlan", "OutputSlab", "clear_plans", "decode_fn", "family_key", "plan_key", "plan_stats", "run_planned"]
