"""Flash-Decoding's split kernel in Gluon: each split's first tiles of keys on their way before the
sequence's length arrives (lecture §8.4).

The Triton split kernel (``decode_kernels._decode_split_kernel``) cannot start reading K and V before it
knows the sequence's length: the loop's loads take their bounds from it, and a tile loaded ahead of the
loop is stored to shared memory, with a barrier, before any later load is issued (benchmarks/NOTES-decode.md
v21). So every program of a batch-1 call first waits a round trip for one int32 from L2, then a round trip
for its first tile from HBM. A strided split (split s takes tiles s, s + S, s + 2S, ...) finds its first
tiles at keys that do not depend on the length, and Gluon's asynchronous copies (``cp.async``: global
memory straight into shared memory, no registers, waited for later) can ask for them first:

    copy tiles 0 .. STAGES − 2 of this split (K and V; rows past the cache's capacity zero-filled)
    ─ load the length ─ load Q
    ─ per tile t: wait for tile t ─ barrier ─ copy tile t + STAGES − 1 (rows past the length zero-filled)
      ─ S = Q Kᵀ (mma.sync) ─ online softmax ─ O += P V

A tile copied before the length may hold rows past it: their scores are masked, and their V rows are set
to 0 in shared memory first (a NaN there would otherwise give 0 · NaN in P V), as the Triton kernel's
masked loads do. The query rows are the Triton kernel's: a K/V head's G query heads times Nq queries,
padded to 16, the M of the tensor-core products. With MERGE = 2 the group's last program merges the splits
(``_merge_rows_gluon``, the arithmetic of the Triton merge); ``_decode_merge_gluon`` is the same merge as a
kernel of its own, so a Gluon plan's eager calls and its CUDA graphs give the same bits.

Both kernels take the Triton kernels' arguments in the same order (a decode plan launches either with
one argument list) and cover contiguous caches, strided splits, causal or not (a right window edge),
float16/bfloat16 at D = 64 and 128, up to ``MAX_ROWS`` query rows per K/V head: no left window edge, softcap,
ALiBi or paged cache (``gluon_unsupported`` says which call can take them). The Triton interpreter cannot run Gluon: the CPU tests build these
kernels for sm_90 (``compile_sm90``) and read what the compiler made; the GPU tests check them against
the reference.
"""

from __future__ import annotations

import re

import torch

from .._runtime import LN2

try:  # Gluon ships with triton >= 3.5
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

    # the names of triton 3.6 and of later versions (async_copy_global_to_shared -> async_load,
    # thread_barrier -> barrier)
    _async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    _barrier = getattr(gl, "barrier", None) or gl.thread_barrier
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed triton
    HAVE_GLUON = False

GLUON_HEAD_DIMS = (64, 128)


# How many K/V tiles the kernel's ring holds by default (its ``RING``, the configuration's ``num_stages``: RING − 1 of them
# in flight while one is used): three, as the Triton kernel's pipeliner keeps (``num_stages`` 3 of the large
# configuration). At 128 × 128 that is 192 KiB of the H100/H200's 227 (one program per SM, as the Triton kernel's
# 136 KiB), at 128 × 64 96 KiB (two programs per SM where the Triton kernel's 70 KiB fit three: the split model's
# calibration, made on the Triton kernel, may not suit it; benchmarks/decode_host.py --kernel-ab sweeps it). A ring
# takes at most ``RING_MAX_BYTES``.
RING_STAGES = 3
RING_MAX_BYTES = 200 * 1024


if HAVE_GLUON:
    _LN2 = gl.constexpr(LN2)

    @gluon.jit
    def _gdc_wait():
        """``griddepcontrol.wait``: a kernel launched as a programmatic dependent launch waits for the kernel
        before it to finish and its writes to be visible."""
        gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _gdc_launch_dependents():
        """``griddepcontrol.launch_dependents``: a dependent launch may start once every program has run this."""
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)

    @gluon.jit
    def _copy_tile(k_buf, v_buf, k_head, v_head, keys, bound, offs_d, stride_k2, stride_kd, stride_v2, stride_vd,
                   D: gl.constexpr, EVICT: gl.constexpr):
        """Asynchronous copies of the K and V rows ``keys`` (one tile) into ``k_buf`` / ``v_buf``; rows at or
        past ``bound`` are not read (zero-filled). ``EVICT`` ("evict_first") is a hint that triton 3.6 drops from
        ``cp.async`` (later tritons emit an L2 cache policy); the configurations pass "" (no hint)."""
        ok = (keys < bound)[:, None] & (offs_d < D)[None, :]
        rows = keys.to(gl.int64)[:, None]
        _async_load(k_buf, k_head + rows * stride_k2 + offs_d[None, :] * stride_kd, mask=ok, eviction_policy=EVICT)
        _async_load(v_buf, v_head + rows * stride_v2 + offs_d[None, :] * stride_vd, mask=ok, eviction_policy=EVICT)

    @gluon.jit
    def _zero_rows_from(buf, end, lay: gl.constexpr):
        """Rows ``end`` onwards of a tile in shared memory set to 0 (then a barrier: every warp reads them next)."""
        x = buf.load(lay)
        rows = gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, lay))
        buf.store(gl.where(rows[:, None] < end, x, gl.zeros_like(x)))
        _barrier()

    @gluon.jit
    def _merge_rows_gluon(O_PART, LSE_PART, OUT, LSE, row0, nrows, H, stride_ob, stride_oh, stride_om, stride_od,
                          D, NUM_SPLITS, NQ: gl.constexpr, ROWS: gl.constexpr, BLOCK_S: gl.constexpr,
                          BLOCK_D: gl.constexpr):
        """⊕ of the splits of query rows row0, ..., row0 + min(ROWS, nrows) − 1 (row (b·H + head)·NQ + qi), every
        row's splits loaded at once, stored to out[b, head, qi] and lse[row]: the Triton merge's arithmetic. Each
        row's numbers depend only on its own splits, ROWS, BLOCK_S, BLOCK_D and the warps, so the in-kernel merge
        and ``_decode_merge_gluon`` give the same bits."""
        NW: gl.constexpr = gl.num_warps()
        # the layouts triton 3.6's compiler gives ``_merge_rows`` (the device's; its merge kernel ran 2.1 µs at 64/8
        # heads over 8K). The partials (ROWS, BLOCK_S, BLOCK_D): a warp's lanes along D (4 floats each), then the
        # rows, then the splits; the warps along the rows as far as they go, then the splits, so that the sum over
        # the splits stays inside a thread where the rows allow (with the warps along the splits, as triton 3.9
        # lays it out, every row's sum crossed the warps through shared memory: 4.5 µs, static-kept run 2). The
        # rows' splits (ROWS, BLOCK_S: lse and weights) one to a thread, lanes along the splits, warps along the
        # rows, so that each lse is loaded and exponentiated once, converted to the partials' slice for the
        # weighted sum. The output (ROWS, BLOCK_D) in runs of up to 8 elements of D, the warps along the rows.
        TD: gl.constexpr = 32 if BLOCK_D >= 128 else BLOCK_D // 4
        TR: gl.constexpr = ROWS if ROWS < 32 // TD else 32 // TD
        WR: gl.constexpr = NW if ROWS // TR >= NW else ROWS // TR
        L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [TR, 32 // (TD * TR), TD], [WR, NW // WR, 1], [2, 0, 1])
        L_RS: gl.constexpr = gl.SliceLayout(2, L3)  # (rows, splits), as the partials hold them
        L_RD: gl.constexpr = gl.SliceLayout(1, L3)  # (rows, D), as the sum over the splits leaves them
        TS2: gl.constexpr = BLOCK_S if BLOCK_S < 32 else 32
        L2: gl.constexpr = gl.BlockedLayout([1, 1], [32 // TS2, TS2], [NW, 1], [1, 0])  # (rows, splits), one a thread
        PER: gl.constexpr = ROWS * BLOCK_D // (32 * NW)  # output elements a thread
        VD: gl.constexpr = 8 if PER >= 8 else (PER if PER >= 1 else 1)
        TDO: gl.constexpr = BLOCK_D // VD if BLOCK_D // VD < 32 else 32
        WRO: gl.constexpr = NW if ROWS // (32 // TDO) >= NW else (ROWS // (32 // TDO) if ROWS >= 32 // TDO else 1)
        L_OUT: gl.constexpr = gl.BlockedLayout([1, VD], [32 // TDO, TDO], [WRO, NW // WRO], [1, 0])
        offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L_RS))
        offs_s = gl.arange(0, BLOCK_S, layout=gl.SliceLayout(0, L_RS))
        offs_d3 = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, L_RD))  # [None, None, :]: axis 0, then 1
        at = (row0 + offs_r)[:, None] * NUM_SPLITS + offs_s[None, :]  # int64
        rs_ok = (offs_r < nrows)[:, None] & (offs_s < NUM_SPLITS)[None, :]
        o_s = gl.load(O_PART + at[:, :, None] * D + offs_d3[None, None, :],
                      mask=rs_ok[:, :, None] & (offs_d3 < D)[None, None, :], other=0.0, cache_modifier=".cg")
        offs_r2 = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L2))
        offs_s2 = gl.arange(0, BLOCK_S, layout=gl.SliceLayout(0, L2))
        rows = row0 + offs_r2  # int64
        lse_s = gl.load(LSE_PART + rows[:, None] * NUM_SPLITS + offs_s2[None, :],
                        mask=(offs_r2 < nrows)[:, None] & (offs_s2 < NUM_SPLITS)[None, :], other=float("-inf"),
                        cache_modifier=".cg")
        m = gl.max(lse_s, 1)
        m_base = gl.where(m == float("-inf"), 0.0, m)
        w = gl.exp(lse_s - m_base[:, None])
        denom = gl.sum(w, 1)
        empty = denom == 0.0
        safe = gl.where(empty, 1.0, denom)
        o = gl.sum(gl.convert_layout(w, L_RS)[:, :, None] * o_s, 1) \
            / gl.convert_layout(safe, gl.SliceLayout(1, L_RD))[:, None]
        lse = gl.where(empty, float("-inf"), m_base + gl.log(safe))
        offs_ro = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L_OUT))
        offs_do = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, L_OUT))
        rows_o = row0 + offs_ro
        b = rows_o // (H * NQ)
        head = (rows_o // NQ) % H
        qi = rows_o % NQ
        o_ptrs = OUT + b[:, None] * stride_ob + head[:, None] * stride_oh + qi[:, None] * stride_om \
            + offs_do[None, :] * stride_od
        gl.store(o_ptrs, gl.convert_layout(o.to(OUT.dtype.element_ty), L_OUT),
                 mask=(offs_ro < nrows)[:, None] & (offs_do < D)[None, :])
        gl.store(LSE + rows, lse, mask=offs_r2 < nrows)

    @gluon.jit
    def _decode_split_gluon(
        Q, K, V, SEQLENS, BLOCK_TABLE, O_PART, LSE_PART, OUT, LSE, COUNTERS, SLOPES,
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_k0, stride_k1, stride_k2, stride_kd,  # (b, hkv, n, d): a contiguous cache only
        stride_v0, stride_v1, stride_v2, stride_vd,
        stride_tb,
        stride_ob, stride_oh, stride_om, stride_od,
        stride_sb, stride_sh,
        qk_scale,  # softmax scale · log2(e)
        cap_scale,
        window_left, window_right,  # the right edge read with HAS_RIGHT (causal: 0)
        H, CAPACITY, NUM_PAGES, NUM_SPLITS,
        D: gl.constexpr, NQ: gl.constexpr, G: gl.constexpr, PAGE_SIZE: gl.constexpr,
        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr,
        PAGED: gl.constexpr, HAS_LEFT: gl.constexpr, HAS_RIGHT: gl.constexpr,
        HAS_SOFTCAP: gl.constexpr, HAS_ALIBI: gl.constexpr, MERGE: gl.constexpr, DOT_F32: gl.constexpr,
        EVICT: gl.constexpr,
        HAS_SEQLENS: gl.constexpr,
        BLOCK_S: gl.constexpr = 1,
        STRIDED: gl.constexpr = True,
        PREFETCH: gl.constexpr = 0,
        PF_LINES: gl.constexpr = 1,
        TRIGGER: gl.constexpr = False,
        MERGE_ROWS: gl.constexpr = 1,
        WAIT: gl.constexpr = False,
        RING: gl.constexpr = 3,  # K/V tiles in the ring (the configuration's ``num_stages``): RING − 1 in flight
    ):
        # (the Triton kernel's arguments, in its order, and RING; what this kernel does not cover is refused at build
        # time)
        gl.static_assert(STRIDED, "the Gluon split kernel deals tiles to splits in turn (STRIDED)")
        gl.static_assert(not PAGED, "the Gluon split kernel reads a contiguous cache")
        gl.static_assert(not (HAS_LEFT or HAS_SOFTCAP or HAS_ALIBI or DOT_F32),
                         "the Gluon split kernel has no left window edge, softcap, ALiBi or float32 products")
        if WAIT:  # a programmatic dependent launch: the kernels before it first (the cache may be their output, so
            _gdc_wait()  # the first tiles' copies too wait)
        if TRIGGER:
            _gdc_launch_dependents()
        NW: gl.constexpr = gl.num_warps()
        gl.static_assert(RING >= 2, "the ring holds at least two tiles")
        STAGES: gl.constexpr = RING
        dtype: gl.constexpr = K.dtype.element_ty
        # one mma.sync layout for the scores (BLOCK_M × BLOCK_N) and the output (BLOCK_M × BLOCK_D): the warps
        # side by side along the columns, so a row's m and l are one vector for both
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NW], instr_shape=[16, 8])
        a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        TD: gl.constexpr = BLOCK_D // 8  # threads across a row, 8 elements (16 bytes) each
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TD, TD], [NW, 1], [1, 0])
        smem: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

        split = gl.program_id(0)
        hkv = gl.program_id(1)
        b = gl.program_id(2)
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], smem)
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], smem)
        # P̃ on its way from the scores' layout (warps along the keys) to the P̃·V product's A operand (every warp all
        # the keys): stored once, read back by ldmatrix, as the Triton kernel does; a layout conversion would take two
        # round trips through shared memory and byte permutes to build the operand
        p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], smem)
        offs_nl = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld))
        offs_dl = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, ld))
        k_head = K + b.to(gl.int64) * stride_k0 + hkv.to(gl.int64) * stride_k1
        v_head = V + b.to(gl.int64) * stride_v0 + hkv.to(gl.int64) * stride_v1

        # -- before the length: this split's first STAGES − 1 tiles, at keys (split + t·S)·BLOCK_N onwards
        for t in gl.static_range(STAGES - 1):
            _copy_tile(k_bufs.index(t), v_bufs.index(t), k_head, v_head, (split + t * NUM_SPLITS) * BLOCK_N + offs_nl,
                       CAPACITY, offs_dl, stride_k2, stride_kd, stride_v2, stride_vd, D, EVICT)
            async_copy.commit_group()

        if HAS_SEQLENS:
            seqlen = gl.minimum(gl.maximum(gl.load(SEQLENS + b), 0), CAPACITY)  # never outside the cache
        else:
            seqlen = CAPACITY
        # -- the group's query rows: row r is query head hkv·G + r // NQ, query token r % NQ
        offs_ml = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld))
        q_ptrs = Q + b.to(gl.int64) * stride_qb + (hkv * G + offs_ml // NQ)[:, None] * stride_qh \
            + (offs_ml % NQ)[:, None] * stride_qm + offs_dl[None, :] * stride_qd
        q = gl.load(q_ptrs, mask=(offs_ml < G * NQ)[:, None] & (offs_dl < D)[None, :], other=0.0)
        q_op = gl.convert_layout(q, a_op)

        offs_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma))
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        pos = seqlen - NQ + offs_m % NQ  # query row r's position: it sees keys j <= pos[r] + right
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, mma))
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, mma))
        acc = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=mma)
        # this split's tiles: split, split + S, ... below the length's last tile
        n_tiles = gl.cdiv(gl.maximum(gl.cdiv(seqlen, BLOCK_N) - split, 0), NUM_SPLITS)
        for t in range(0, n_tiles):
            stage = t % STAGES
            async_copy.wait_group(STAGES - 2)  # tile t has landed (this thread's copies) ...
            _barrier()  # ... every thread's, and every warp is done with the slot refilled next
            nxt = t + STAGES - 1
            _copy_tile(k_bufs.index(nxt % STAGES), v_bufs.index(nxt % STAGES), k_head, v_head,
                       (split + nxt * NUM_SPLITS) * BLOCK_N + offs_nl, seqlen, offs_dl, stride_k2, stride_kd,
                       stride_v2, stride_vd, D, EVICT)
            async_copy.commit_group()
            start = (split + t * NUM_SPLITS) * BLOCK_N
            k_buf = k_bufs.index(stage)
            v_buf = v_bufs.index(stage)
            if t < STAGES - 1:  # copied before the length: rows past it may hold anything
                if start + BLOCK_N > seqlen:
                    _zero_rows_from(v_buf, seqlen - start, ld)
            s = mma_v2(q_op, k_buf.permute((1, 0)).load(b_op), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=mma))
            s = s * qk_scale
            keys = start + offs_n
            visible = (keys < seqlen)[None, :]
            if HAS_RIGHT:
                visible = visible & (keys[None, :] <= pos[:, None] + window_right)
            s = gl.where(visible, s, float("-inf"))
            # -- online softmax in base 2 (rows with no visible key yet keep m = -inf; exp2 base 0 for them)
            m_new = gl.maximum(m_i, gl.max(s, 1))
            m_base = gl.where(m_new == float("-inf"), 0.0, m_new)
            p = gl.exp2(s - m_base[:, None])
            alpha = gl.exp2(m_i - m_base)
            l_i = l_i * alpha + gl.sum(p, 1)
            p_smem.store(p.to(dtype))
            _barrier()  # every warp's P̃ columns in place (the next store waits for the barrier at the loop's top)
            acc = mma_v2(p_smem.load(a_op), v_buf.load(b_op), acc * alpha[:, None])
            m_i = m_new
        async_copy.wait_group(0)  # no copy outlives the program

        # -- normalise; rows that saw no key get out = 0, lse = -inf
        empty = l_i == 0.0
        l_safe = gl.where(empty, 1.0, l_i)
        o = acc / l_safe[:, None]
        lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * _LN2)
        offs_d = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, mma))
        head = hkv * G + offs_m // NQ
        qi = offs_m % NQ
        row_ok = offs_m < G * NQ
        out_mask = row_ok[:, None] & (offs_d < D)[None, :]
        if MERGE == 0:  # one split: this is the answer
            o_ptrs = OUT + b.to(gl.int64) * stride_ob + head[:, None] * stride_oh + qi[:, None] * stride_om \
                + offs_d[None, :] * stride_od
            gl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=out_mask)
            gl.store(LSE + (b * H + head) * NQ + qi, lse, mask=row_ok)
        else:  # partials: O_PART (B, H, NQ, NUM_SPLITS, D), LSE_PART (B, H, NQ, NUM_SPLITS), float32
            row = ((b * H + head) * NQ + qi).to(gl.int64) * NUM_SPLITS
            gl.store(O_PART + (row + split)[:, None] * D + offs_d[None, :], o, mask=out_mask)
            gl.store(LSE_PART + row + split, lse, mask=row_ok)
            if MERGE == 2:  # the group's last program to finish merges all its splits
                _barrier()  # every thread's partial stores come before the release below
                cnt = COUNTERS + b * gl.num_programs(1) + hkv
                done = gl.atomic_add(cnt, 1, sem="acq_rel")
                if done == NUM_SPLITS - 1:
                    row0 = ((b * H + hkv * G) * NQ).to(gl.int64)  # the group's rows are consecutive
                    if (G * NQ + MERGE_ROWS - 1) // MERGE_ROWS <= 8:  # unrolled, as the Triton kernel's, so that the
                        # next rows' loads may go out before this round's sums (with a loop, the one measured shape of
                        # two rounds, 28/4 heads, merged 3.5 µs slower in the kernel than by the merge kernel)
                        for c in gl.static_range((G * NQ + MERGE_ROWS - 1) // MERGE_ROWS):
                            _merge_rows_gluon(O_PART, LSE_PART, OUT, LSE, row0 + c * MERGE_ROWS,
                                              G * NQ - c * MERGE_ROWS, H, stride_ob, stride_oh, stride_om, stride_od,
                                              D, NUM_SPLITS, NQ, MERGE_ROWS, BLOCK_S, BLOCK_D)
                    else:
                        for c in range(0, (G * NQ + MERGE_ROWS - 1) // MERGE_ROWS):
                            _merge_rows_gluon(O_PART, LSE_PART, OUT, LSE, row0 + c * MERGE_ROWS,
                                              G * NQ - c * MERGE_ROWS, H, stride_ob, stride_oh, stride_om, stride_od,
                                              D, NUM_SPLITS, NQ, MERGE_ROWS, BLOCK_S, BLOCK_D)
                    gl.atomic_xchg(cnt, 0, sem="relaxed")  # ready for the next call on this stream

    @gluon.jit
    def _decode_merge_gluon(
        O_PART, LSE_PART, OUT, LSE,
        stride_ob, stride_oh, stride_om, stride_od,
        H, D, NUM_SPLITS, NUM_ROWS,
        NQ: gl.constexpr, BLOCK_S: gl.constexpr, BLOCK_D: gl.constexpr,
        PDL: gl.constexpr = False,
        ROWS: gl.constexpr = 1,
    ):
        # (the Triton merge kernel's arguments, in its order)
        row0 = gl.program_id(0).to(gl.int64) * ROWS
        if PDL:
            _gdc_wait()
        _merge_rows_gluon(O_PART, LSE_PART, OUT, LSE, row0, NUM_ROWS - row0, H, stride_ob, stride_oh, stride_om,
                          stride_od, D, NUM_SPLITS, NQ, ROWS, BLOCK_S, BLOCK_D)


MAX_ROWS = 32  # G·Nq query rows per program (64 rows spill at D = 128: ``compile_sm90``'s report)


def gluon_unsupported(*, device, dtype, head_dim: int, rows: int, paged: bool, k_strides: tuple, v_strides: tuple,
                      k_ptr: int, v_ptr: int, mask, softcap, slopes, strided: bool, block_n: int = 128,
                      stages: int = RING_STAGES) -> str | None:
    """Why a decode call cannot take the Gluon split kernel, or None if it can: a Hopper GPU (compute capability
    9.x: the default build's 198 KiB of shared memory is more than an A100's or an Ada GPU's block may take) outside
    the interpreter, a triton with Gluon, float16/bfloat16 at D = 64 or 128,
    at most ``MAX_ROWS`` query rows per K/V head (``rows``: G·Nq), a contiguous cache whose rows are whole
    16-byte copies the compiler can prove aligned (unit stride along D, the other strides multiples of 16
    elements, both base addresses of 16 bytes), tiles dealt in turn (strided), no left window edge, softcap or
    ALiBi, and a ring of ``stages`` tiles of ``block_n`` keys (the configuration's: a power of two from 16, at
    least the rows one pass of the copies covers) of 2 to ``RING_MAX_BYTES``."""
    from .._runtime import interpret_mode

    if not HAVE_GLUON:
        return "a triton without Gluon"
    if device.type != "cuda" or interpret_mode():
        return "a device other than a CUDA GPU"
    from .config import device_capability

    if device_capability(device)[0] != 9:
        return "a GPU other than a Hopper one (compute capability 9.x)"
    if dtype not in (torch.float16, torch.bfloat16):
        return f"{dtype} (float16 and bfloat16 only)"
    if head_dim not in GLUON_HEAD_DIMS:
        return f"head dim {head_dim} (64 and 128 only)"
    if rows > MAX_ROWS:
        return f"{rows} query rows per K/V head (at most {MAX_ROWS})"
    if paged:
        return "a paged cache"
    if not strided:
        return "splits of consecutive tiles (the strided order only)"
    if k_strides[-1] != 1 or v_strides[-1] != 1 or any(s % 16 for s in (*k_strides[:-1], *v_strides[:-1])) \
            or k_ptr % 16 or v_ptr % 16:
        return "a cache whose rows are not whole 16-byte units"
    if mask.left >= 0 or softcap is not None or slopes is not None:
        return "a left window edge, softcap or ALiBi"
    if block_n < 16 or block_n & (block_n - 1):
        return f"tiles of {block_n} keys (a power of two from 16)"
    ring = 2 * stages * block_n * head_dim * torch.empty((), dtype=dtype).element_size()
    if stages < 2 or ring > RING_MAX_BYTES:
        return f"a ring of {stages} tiles of {block_n} keys ({ring // 1024} KiB; 2 tiles to {RING_MAX_BYTES // 1024} KiB)"
    return None


# -- the sm_90 build on any machine (the CPU tests) -----------------------------------------------------------

_SPLIT_CONSTS = ("D", "NQ", "G", "PAGE_SIZE", "BLOCK_M", "BLOCK_N", "BLOCK_D", "PAGED", "HAS_LEFT", "HAS_RIGHT",
                 "HAS_SOFTCAP", "HAS_ALIBI", "MERGE", "DOT_F32", "EVICT", "HAS_SEQLENS", "BLOCK_S", "STRIDED",
                 "PREFETCH", "PF_LINES", "TRIGGER", "MERGE_ROWS")


def compile_sm90(head_dim: int, *, group_rows: int = 4, queries: int = 1, merge: int = 2, splits: int = 16,
                 has_seqlens: bool = True, causal: bool = True, dtype: torch.dtype = torch.bfloat16,
                 block_n: int = 128, num_warps: int = 4, merge_rows: int = 4, evict: str = "",
                 trigger: bool = False, kernel: str = "split", pdl: bool = False, stages: int = RING_STAGES,
                 wait: bool = False):
    """Build the Gluon split kernel (``kernel="split"``) or merge kernel (``"merge"``) for Hopper (sm_90) on any
    machine, GPU or not (Triton's own ptxas), as a decode plan would launch it for a contiguous cache with unit
    stride along D and 16-byte strides: ``group_rows`` query heads per K/V head, ``queries`` per sequence,
    ``merge`` (0: one split, 1: partials, 2: the group's last program merges) over ``splits``, a ring of
    ``stages`` tiles of ``block_n`` keys. The compiled
    kernel's ``asm`` holds the PTX and cubin, its ``metadata`` the shared memory."""
    if not HAVE_GLUON:
        raise RuntimeError("this triton has no Gluon (triton >= 3.5 needed)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from .decode_kernels import sm90_signature

    name = "fp16" if dtype == torch.float16 else "bf16"
    block_d = triton.next_power_of_2(head_dim)
    block_s = triton.next_power_of_2(splits)
    if kernel == "merge":
        fn = _decode_merge_gluon
        const = dict(NQ=queries, BLOCK_S=block_s, BLOCK_D=block_d, PDL=pdl, ROWS=merge_rows, stride_od=1)
        ptrs = dict(O_PART="*fp32", LSE_PART="*fp32", OUT=f"*{name}", LSE="*fp32")
    elif kernel == "split":
        fn = _decode_split_gluon
        const = dict(D=head_dim, NQ=queries, G=group_rows, PAGE_SIZE=1,
                     BLOCK_M=max(16, triton.next_power_of_2(group_rows * queries)), BLOCK_N=block_n, BLOCK_D=block_d,
                     PAGED=False, HAS_LEFT=False, HAS_RIGHT=causal, HAS_SOFTCAP=False, HAS_ALIBI=False, MERGE=merge,
                     DOT_F32=False, EVICT=evict, HAS_SEQLENS=has_seqlens, BLOCK_S=block_s, STRIDED=True, PREFETCH=0,
                     PF_LINES=1, TRIGGER=trigger, MERGE_ROWS=merge_rows, WAIT=wait, RING=stages, stride_qd=1, stride_kd=1,
                     stride_vd=1, stride_od=1)
        ptrs = dict(Q=f"*{name}", K=f"*{name}", V=f"*{name}", SEQLENS="*i32", BLOCK_TABLE="*i32", O_PART="*fp32",
                    LSE_PART="*fp32", OUT=f"*{name}", LSE="*fp32", COUNTERS="*i32", SLOPES="*fp32")
    else:
        raise ValueError(f"kernel must be 'split' or 'merge', got {kernel!r}")
    return triton.compile(GluonASTSource(fn, *sm90_signature(fn, const, ptrs)), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps))


def copies_before_length(ptx: str) -> tuple[int, int]:
    """(asynchronous copies issued before the load of the sequence's length, copies issued before the kernel's
    first wait for them) in a split kernel's PTX. The length's load is the first global load from an address
    computed from the ``SEQLENS`` parameter (followed register by register through the straight-line code
    before the loop); a copy issued before it cannot depend on it. Equal counts: every copy of the ring's
    first tiles is on its way before the length is asked for. Without a length (``HAS_SEQLENS`` off) both
    count every copy before the first wait."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    tainted = {m.group(1) for ln in lines if (m := re.match(r"ld\.param\.[bu]64\s+(%rd\d+),\s*\[\w+_param_3\]", ln))}
    before = total = 0
    length_seen = False
    for ln in lines:
        if ln.startswith("cp.async.wait_group"):
            break
        if re.search(r"\bcp\.async\.c[ag]\.shared\.global", ln):
            total += 1
            before += not length_seen
            continue
        regs = re.findall(r"%[a-z]+\d+", ln[ln.index(" "):] if ln.startswith("@") else ln)
        if len(regs) < 2 or not any(r in tainted for r in regs[1:]):
            continue
        if "ld.global" in ln:
            length_seen = True
        else:
            tainted.add(regs[0])
    return before, total


_COPY_SIZE = r"cp\.async\.c[ag]\.shared\.global[\w:.]*\s*\[[^]]*\],\s*\[[^]]*\],\s*(0x[0-9a-f]+|\d+)"


def sass_copies_before_length(sass: str) -> int | None:
    """``LDGSTS`` instructions (asynchronous copies) issued before the first instruction that reads the sequence's
    length in a split kernel's SASS, the order the GPU issues them in: the length is what the first 32-bit global load
    (``LDG.E`` with no width; Q's loads are 16-bit or 128-bit) writes, and its first reader is the first instruction
    after that load to name the register (ptxas may hoist the load itself among the copies: only a reader waits for
    it). None without such a load (a build without lengths)."""
    ins = [ln.split("*/", 1)[1].split(";")[0].strip() for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    load = next((i for i, ln in enumerate(ins) if re.match(r"(@!?U?P\w+\s+)?LDG\.E\s", ln)), None)
    if load is None:
        return None
    reg = re.match(r"(?:@!?U?P\w+\s+)?LDG\.E\s+(R\d+)", ins[load]).group(1)
    reader = next((i for i in range(load + 1, len(ins)) if re.search(rf"\b{reg}\b", ins[i])), len(ins))
    return sum(ln.lstrip("@!UP0123456789T ").startswith("LDGSTS") or " LDGSTS" in ln for ln in ins[:reader])


def decode_report(kernel) -> dict:
    """What the compiler made of a Gluon decode build (``compile_sm90``): shared memory (KB), the asynchronous
    copies issued before the length's load and before the first wait (``copies_before_length``; in the SASS,
    ``sass_copies_before_length``), the ``mma.sync`` and ``ldmatrix`` instructions, the dependent-launch waits and
    triggers (``griddepcontrol``), and registers, spill stack per thread and the K/V loop's make-up
    (``decode_kernels.sass_kv_loop``: ``loop``) from the cubin where Triton ships cuobjdump."""
    from .decode_kernels import sass_kv_loop
    from .prefill_gluon import cuobjdump, kernel_report

    ptx = kernel.asm["ptx"]
    before, total = copies_before_length(ptx)
    full = kernel_report(kernel)
    sass = cuobjdump(kernel, "-sass")
    return dict(smem_kb=full["smem_kb"], regs=full.get("regs"), stack=full.get("stack"),
                copies_before_length=before, prologue_copies=total,
                sass_copies_before_length=None if sass is None else sass_copies_before_length(sass),
                copy_bytes=sorted({int(n, 0) for n in re.findall(_COPY_SIZE, ptx)}),
                mma=len(re.findall(r"mma\.sync", ptx)), ldmatrix=len(re.findall(r"ldmatrix", ptx)),
                gdc_waits=len(re.findall(r"griddepcontrol\.wait", ptx)),
                gdc_triggers=len(re.findall(r"griddepcontrol\.launch_dependents", ptx)), loop=sass_kv_loop(sass))


def sm90_report(head_dim: int, *, dtype: torch.dtype = torch.bfloat16, **kw) -> dict:
    """``decode_report`` of ``compile_sm90(head_dim, dtype=dtype, **kw)``. Needs a process without TRITON_INTERPRET
    (the interpreter replaces the jit functions Gluon calls)."""
    return decode_report(compile_sm90(head_dim, dtype=dtype, **kw))


__all__ = ["GLUON_HEAD_DIMS", "HAVE_GLUON", "MAX_ROWS", "RING_MAX_BYTES", "compile_sm90", "copies_before_length", "decode_report", "gluon_unsupported", "sass_copies_before_length",
           "RING_STAGES", "sm90_report"]
