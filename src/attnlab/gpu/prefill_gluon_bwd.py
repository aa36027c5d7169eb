"""FlashAttention backward for Hopper in Gluon: dQ, dK and dV in one pass over the query blocks, with a
TMA loader warp and two consumer warp groups (FlashAttention-3's backward structure, lecture §7).

The Triton backward (``prefill_bwd``) runs two kernels: dK/dV with the key block outer, then dQ with the
query block outer, which recomputes S and dP a second time (7 matrix products per block pair where the
standard count has 5). Here one program per key block of ``BLOCK_N = 128`` keys of one (batch, K/V
head) keeps K_j and V_j in shared memory and walks every query block of every query head that reads
this K/V head. Each of the two consumer warp groups owns 64 of the keys; per query block of 64 rows:

    Sᵀ = K_c Qᵢᵀ, dPᵀ = V_c dOᵢᵀ                (both issued, then waited for one at a time)
    Pᵀ = exp2(Sᵀ·scale·log2e − L₂ᵢ)               (recomputed from the forward's logsumexp, §7.2)
    dSᵀ = Pᵀ ∘ (dPᵀ − Dᵢ)                         (Dᵢ = rowsum(dOᵢ ∘ Oᵢ), §7.3)
    dV_c += Pᵀ dOᵢ, dK_c += dSᵀ Qᵢ                (register operands, accumulators stay on chip)
    dSᵀ_c → this warp group's half of a shared (128 keys × 64 rows) tile
    dQᵢ += dS K over all 128 keys                  (by one warp group, the two taking turns)

The loader warp fills a ring of ``STAGES`` (Qᵢ, dOᵢ) slots by TMA; a slot is refilled once both
consumers have released it. The consumers meet only at the shared dSᵀ tile (two of them, so that one
step's tile is read while the next is written), so one's exponentials run under the other's matrix
products. dQᵢ is added to a float32 buffer once per key block — by TMA bulk reductions (the default) or
by per-thread float32 atomics (``dq_atomic``, ``dq_split``) — and summed in arrival order, so the sum is
not bit-reproducible run to run. With TMA reductions, key block j of a dense call starts its walk at
query block j mod n (``rotate``), so that the blocks of one head do not all add into the same rows at
once (packed batches' short walks ran faster without). A
``deterministic`` run of this kernel keeps a counter per dQ tile instead: each key block waits for its
turn at the tile, adds, and counts its addition once it is complete (FlashAttention-3's deterministic
backward). A writer warp of its own does that (a fourth partition: the consumers stage each tile and go
on; the writer waits for the turn, adds, and counts), in the loader's warp group and at its register
count, so the consumers keep the default build's registers. The turns follow the order in which the walks
reach a tile: under a causal mask descending (key block j starts at its diagonal, so the last key block
that sees a tile gets there first; the grid launches key blocks last first, so no turn waits for a
program not yet started), otherwise ascending (every walk starts at the first query block; no rotation).
The programs are numbered head by head, so the dQ tiles a wave adds into are those of one or two heads,
held in L2 while each writer waits for its additions' round trips. ``deterministic`` calls take this kernel
where ``DETERMINISTIC`` is set (the default), else the Triton kernels.

The dQ tile goes through shared memory in the wgmma accumulator's register order (``DQ_PERMUTED``: each
thread stores 16 contiguous bytes at a time, no bank conflicts), and so into the float32 buffer; the
sum is put back in row order on its way to dq. The loader brings each step's rows of L₂ and Dᵢ by TMA
with Qᵢ and dOᵢ (``LSE_BY_TMA``), so the consumers never wait for a global load.

Where the time goes (``benchmarks/bwd_gluon_ablation.py``, H200): the dQ additions are about 40 % of it
at D = 128; without them the loop runs at 720 TFLOP/s of the standard count. The reduction is issued by
the consumer that made the tile, and under triton 3.6 the compiler waits for the bulk copy to have read
the tile before that warp group goes on (``benchmarks/NOTES-prefill.md``, v5).

Masks are bottom-right aligned (causal: key j visible from row i iff j <= i + causal_off; window: iff
j >= i + win_off). Query blocks that see nothing of a key block are skipped by the loop bounds, blocks
wholly visible run without the element mask. Same preprocessing kernel as the Triton backward (D and L
in log2 units, +inf for empty rows). ALiBi (a build of its own, ``ALIBI``): Pᵀ's exponent also loses
slope_h·log2e·|i + Nk − Nq − j|, with each step's query head's slope (one program walks all the heads of
its group); dSᵀ's formula is unchanged. In a block wholly on one side of that diagonal the bias is a term
per query (folded into L₂) plus one per key; the element mask's blocks and those across the diagonal
take |·| per element. Dense, causal and sliding-window calls, with or without ALiBi, MHA/GQA/MQA,
D = 64 or 128, float16/bfloat16, on sm_90, deterministic or not; everything else (softcap, packed
batches) runs the Triton kernels. The Triton interpreter cannot run Gluon: the CPU tests build this kernel
for sm_90 and the GPU tests check it.
"""

from __future__ import annotations

import torch

from .._runtime import LOG2E
from .launch import (
    KeptLaunch,
    current_stream,
    hooks_set,
    keep_plan,
    launch_kept,
    rebased,
    recording,
    tensor_key,
)
from .layout import dq_tiles_shape, store_dq, store_dq_tiles, sum_head_copies, sum_tail_pieces
from .prefill_gluon import HAVE_GLUON, NO_WINDOW, clamp_edges

# a masked step's visible scores from each key row's query limits (``prefill_gluon._col_range``, the forward's
# ``MASK_LIMITS`` form): key j sees the block's query columns [lo_j, hi_j), lo_j = j − causal_off − m0 (causal) and
# hi_j = j − win_off + 1 − m0 (none past the keys' end), as a bit mask made once per row (2), two comparisons against
# constants per score (1), or three comparisons of the query's column, held in a register, per score (0), at head
# dims from ``MASK_LIMITS_FROM_D``. The same bits either way (the select stays after the FFMA). Measured against 0
# (H200, benchmarks/bwd_block_m.py runs 11 and 12, the backward alone from CUDA graphs): at D = 128 packed batches
# 1.02-1.04x and the dense rows 0.98-1.01x (the build spills less: 104 bytes -> 56); at D = 64 packed batches
# 1.00-1.01x but the 16K causal row 0.97x in both runs: from D = 128. Compile-time switches (the consumers read
# ``_MASK_LIMITS`` and ``_MASK_LIMITS_FROM_D``)
MASK_LIMITS = 2
MASK_LIMITS_FROM_D = 128

HAVE_TMA_REDUCE = False  # set below where this triton has the reduction

if HAVE_GLUON:
    from triton._C.libtriton import gluon_ir as _gluon_ir
    from triton._C.libtriton import ir as _ir
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin as _builtin
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .prefill_gluon import (
        _col_range,
        _tma_load,
        _tma_store,
        _warps_barrier,
        _zero_past,
        nvmma_layout,
        row_layout,
    )

    _LOG2E = gl.constexpr(LOG2E)  # a jit function reads module globals only as constexprs
    _MASK_LIMITS = gl.constexpr(MASK_LIMITS)
    _MASK_LIMITS_FROM_D = gl.constexpr(MASK_LIMITS_FROM_D)

    # the TMA reduction from shared memory: Gluon's builder has it in 3.6 without a Python wrapper
    # (``tma.async_atomic_add`` from 3.7 on)
    HAVE_TMA_REDUCE = (hasattr(_ir, "DESCRIPTOR_REDUCE_KIND")
                       and hasattr(_gluon_ir.GluonOpBuilder, "create_async_tma_reduce"))

    @_builtin
    def _tma_add(desc, coord, src, _semantic=None):
        """Add a shared-memory tile into global memory through a tensor descriptor: a TMA bulk reduction
        (``cp.reduce.async.bulk.tensor``), asynchronous like a TMA store (``tma.store_wait`` before the
        tile is written again)."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, coord, src.handle)

if HAVE_GLUON:

    @gluon.jit
    def _sem_wait(ptr, turn, stats):
        """Wait (every thread) until the counter at ptr reads ``turn`` (acquire, GPU scope). A wait that
        outlasts SEM_SPINS polls gives up and adds 1 at ``stats``: the order of the additions was not kept
        (the call stays correct, not reproducible); none is expected, and the tests count them. A wait that
        had to poll adds its polls at stats + 1 and 1 at stats + 2 (where the order waited, and how long)."""
        seen = gl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=gl.int32,
                                         is_pure=False, pack=1)
        n = 0
        while (seen != turn) & (n < _SEM_SPINS):
            seen = gl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=gl.int32,
                                             is_pure=False, pack=1)
            n += 1
        if seen != turn:
            _lane0_adds(stats)
        if n > 0:
            _lane0_adds_n(stats + 1, n)
            _lane0_adds(stats + 2)

    @gluon.jit
    def _lane0_adds(ptr):
        """Lane 0 of the calling warp adds 1 at ptr (release, GPU scope)."""
        gl.inline_asm_elementwise("{ .reg .pred p; .reg .b32 t; mov.u32 t, %laneid; "
                                  "setp.eq.u32 p, t, 0; @p red.release.gpu.global.add.s32 [$1], 1; mov.u32 $0, 0; }",
                                  "=r,l", [ptr], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _lane0_adds_n(ptr, n):
        """Lane 0 of the calling warp adds n at ptr (relaxed: a statistic)."""
        gl.inline_asm_elementwise("{ .reg .pred p; .reg .b32 t; mov.u32 t, %laneid; "
                                  "setp.eq.u32 p, t, 0; @p red.relaxed.gpu.global.add.s32 [$1], $2; mov.u32 $0, 0; }",
                                  "=r,l,r", [ptr, n], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _adds_complete():
        """Wait until this warp's TMA reductions are done (their writes, not only their reads of shared
        memory), make them visible past the async proxy, and meet the warp's lanes."""
        gl.inline_asm_elementwise("cp.async.bulk.wait_group 0; fence.proxy.async.global; bar.warp.sync -1; "
                                  "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


SEM_SPINS = 1 << 22  # polls of one ordered wait before it gives up (a few seconds: never, unless something is wrong)
# the deterministic backward's int32 counters: waits given up, polls of the waits that polled, those waits; then
# one counter per dQ tile (its additions so far)
SEM_GIVEN_UP, SEM_POLLS, SEM_WAITS, SEM_TILE0 = 0, 1, 2, 3
if HAVE_GLUON:
    _SEM_SPINS = gl.constexpr(SEM_SPINS)
    _SEM_TILE0 = gl.constexpr(SEM_TILE0)

BWD_BLOCK_M = 64  # query rows per step (the wgmma M of dQ, the N of Sᵀ)
# the swizzle (bytes) of the float32 dQ staging tile in shared memory and of its TMA reduction: None takes
# Triton's default for the tile (128 bytes); a measurement hook (benchmarks/bwd_dq_layout.py)
DQ_SWIZZLE: int | None = None
# dQ staged and added in the accumulator's register order (``layout.dq_tiles_shape``): every thread stores 16
# contiguous bytes at a time, a warp 512 in a row — half the store instructions of the row-major tile, and no
# bank conflicts (the row-major tile under a 128-byte swizzle: one excess access per wavefront); the sum is put
# back in row order on its way to dq (``layout.store_dq_tiles``). False: the row-major tile (measurements)
DQ_PERMUTED = True
# each step's rows of L₂ and Dᵢ brought by the loader's TMA into the Q/dO ring, instead of loaded from global
# memory by every consumer thread as the step begins (ncu's stall sampling at transformers' step shape put
# ~11 % of the consumers' samples on waits for those loads: ``benchmarks/ncu_stalls.py``). False: the loads
LSE_BY_TMA = True
# deterministic calls take this kernel with each dQ tile's additions made in a fixed order (a counter per
# tile, added by a writer warp, programs numbered head by head), or (False) the Triton kernels (no atomics: a
# second pass makes dQ). Measured (H200, the backward alone, bwd-dq-layout run 9): 0.79-0.96x the default
# backward's speed, the Triton kernels 0.75-0.82x; numbered head first, a wave held every head's dQ tiles
# (run 8: 0.57-0.69x on the causal rows, 0.82-0.88x on the others).
DETERMINISTIC = True
# packed batches (cu_seqlens) on this kernel, causal or not (no window or ALiBi: those run the Triton kernels;
# deterministic ones at the head dims of PACKED_DET). Each sequence's rows of L₂, Dᵢ and the dQ tiles start at a
# multiple of 64 in padded buffers (``layout.packed_rows``): a 1-D TMA box at an unaligned row stopped the first
# build on an illegal instruction, and the build that loaded them without TMA, dQ in row order, spilled and ran at
# half the dense kernel's speed (benchmarks/packed_probe.py --timing). The padded build is 1.15-1.37x the Triton kernels on the
# GPU; its host time per call outweighed that (variants runs 11 and 12) until calls ran from kept plans
# (``_BwdPlan``, ``prefill_bwd._CallPlan``): varlen forward+backward at 16K tokens then 292 against 252 TFLOP/s at
# D = 128, 218 against 212 at D = 64 (variants run 15); 278 against 252 and 216 against 219 (run 16). (At D = 64 both
# of those ran the Triton backward: the table had no Gluon entry for short causal calls there until bwd-block-m
# run 2; since, 260 against 212, variants run 25.) Packed lengths are clamped on the device first
# (``layout.packed_bounds``). False: the Triton kernels (measurements)
PACKED = True
# the head dims whose deterministic packed batches (with PACKED and DETERMINISTIC) take this kernel's ordered
# build: each sequence's key blocks last first, their turns at a dQ tile counted in the sequence's own key blocks,
# the tiles its padded rows'. Measured (H200, 16K tokens of documents of 256–1792, causal, forward+backward): at
# D = 128 250 TFLOP/s (variants run 19) against 245 and 247 on the Triton kernels (runs 17 and 18), then both
# routes in each of two calls: 253 against 246 (run 20) and, with the packed forward taking its tiles from a
# counter, 256 against 244 (run 21, 0.87x and 0.81x that route's default); at D = 64 208-209 either way (runs 20,
# 21): on at D = 128. With the dQ writer warp at the loader's registers (``DET_WRITER_REGS``): 286 against the
# default's 306, 0.93x (variants run 24; the backward alone 0.822 against 0.933 ms with the writer at 48,
# benchmarks/packed_probe.py --det run 2). At D = 64, once the default packed backward had moved to this kernel
# (bwd-block-m runs 1 and 2), the Triton route fell to 0.82-0.83x the default (variants runs 28 and 29); the ordered
# build ran 232-233 TFLOP/s against 218 for the Triton kernels, 0.88x the default (benchmarks/device_packed_det64.sh,
# gluon / triton / gluon in three processes, variants run 30): on at both head dims. (): every deterministic
# packed batch on the Triton kernels
PACKED_DET: tuple[int, ...] = (64, 128)
# packed batches: a program's key block and its query blocks are loaded whole by TMA, so a sequence's last ones hold
# the next sequence's first keys and rows, whose Pᵀ is 0 but whose values still enter dV += Pᵀ·dO, dK += dSᵀ·Q and
# dQ += dS·K as 0 · x: a NaN or infinity there reaches this sequence's gradients. True: the consumers set those rows
# of k, v (once per program) and of q, dO (on each step whose query block crosses the sequence's end) to 0 in shared
# memory first (``prefill_gluon._zero_past``), as the packed forward does. On an H200 (variants run 23) the GPU test
# ``test_gpu_packed_backward_reads_no_value_of_the_next_sequence`` failed without it at D = 128 and passed with it,
# but forward+backward of 16K tokens of documents of 256–1792 fell from 305 to 245 TFLOP/s: off (a NaN in one
# document makes a training step's loss NaN anyway; the forward, which serving runs, is isolated)
ZERO_PAST = False
# deterministic packed batches (causal): the default build's staggered walks (``rotate``: key block n starts at query
# block n mod its walk's length and wraps) with each dQ tile's turns in the order the walks reach it
# (``_turn_arrival``: a key block's turn is the number of the sequence's key blocks whose walk reaches the tile at an
# earlier step, or at the same step with a lower key block), counted by the writer; off: unstaggered walks, turns in
# descending key block order (``_turn``). Turns in arrival order may wait on a program launched after the waiter,
# which is safe while a sequence's key blocks (one row of the grid, launched together) fit on the GPU at once: only
# where the longest sequence has at most as many key blocks as the GPU has SMs. Measured (H200, D = 128, 16K tokens
# of documents of 256–1792, the backward alone, benchmarks/packed_probe.py --det runs 1 and 2): 1.21-1.22 ms against
# 0.93 and 0.82 unstaggered, thousands of waits polling: off (a measurement switch)
PACKED_DET_ROTATE = False
# the deterministic builds' dQ writer warp's registers. It shares a warp group with the loader warp, and a warp
# group's warps must ask for the same count (``setmaxnreg``), so at 48 the loader took 48 too and the first
# consumer warp group, which gets what is left, 224 against the default build's 248: the D = 128 builds' spill stack
# 232 bytes against 128 (packed) and 200 against 104 (dense). At 24, as the loader: 248, and the stack 168 and 184
# (the writer's own spills among them). Measured (H200, D = 128, packed, the backward alone, packed_probe.py --det
# run 2): 0.822 ms against 0.933 at 48 in the same rounds
DET_WRITER_REGS = 24
# the dQ writer waits for a step's turns before the consumers have staged its tiles, so that the counter's round
# trip (an L2 load) overlaps their products instead of following them; it then counts its previous step's additions
# after that wait, not before. Safe where every tile takes its turns in one order of the key blocks (``_turn``:
# descending under a causal mask, ascending otherwise): a program waits only for programs earlier in that order, and
# none of those waits for a later one, however late its counts; not with ``PACKED_DET_ROTATE``, whose orders differ
# from tile to tile. The turns cost the packed ordered build 6 % of its backward (0.773 ms without them against
# 0.822, benchmarks/packed_probe.py --det run 2). Measured (probe run 3, the same rounds): 0.832 ms against 0.822
# without it, its waits polling 482 times against 66: asked earlier, the counter is more often not yet there, so
# what the turns cost is the order's own waiting, not the counter's round trip. Its GPU tests pass (the same bits);
# off
DET_EARLY_TURN = False
# deterministic causal GQA calls: each K/V head read by up to this many programs, fewer query heads per
# program, and their dK, dV summed in a fixed order afterwards (``kv_split``, ``det_kv_split``):
# shorter ordered walks, more programs per wave. The grid model put the causal walks' makespan at 1.16x a
# perfect balance for two query heads per program and 1.08x for one, against 1.32x for four
# (benchmarks/det_order_sim.py, GQA 32/8 at 8K). Measured (H200, the backward alone at that shape, D = 64,
# bwd-dq-layout run 16): 2.10 ms unsplit, 1.90 split two ways, 1.81 four ways, against the default backward's
# 1.65-1.66 (run 15's build, which copied K and V per program head: 1.93 four ways).
# 1: off. Never where the programs' dK, dV would take more than DET_KV_SPLIT_BYTES.
DET_KV_SPLIT = 4
DET_KV_SPLIT_BYTES = 1 << 30
# the persistent build's programs at most (None: one per SM): a test hook, so that each program walks many key blocks
PERSISTENT_PROGRAMS: int | None = None
# the persistent build's tiles dealt out in rounds, every other round in reverse (``_bwd_tile_index``); False: in
# order (measured, bwd-block-m run 7: 0.64-0.91x the default build on uneven walks)
PERSISTENT_SNAKE = True
# non-causal calls (no window, ALiBi, packed batch or deterministic order): every program walks the same steps, so
# a grid of T programs on S SMs ends with T mod S of them running alone, a whole program's time for a part of the
# SMs. With this on, those last programs are cut into pieces (``tail_pieces``), each walking a share of the query
# blocks, their partial dK and dV summed after in a fixed order (``layout.sum_tail_pieces``); the cut is
# ``cost.tail_split``'s with TAIL_PIECE_STEPS steps of overhead a piece (its own K/V load, pipeline start and
# float32 stores), at most TAIL_MAX_PARTS pieces a block and TAIL_MAX_MB of partial gradients, and only where the
# model saves TAIL_MIN_SAVING of the grid's time. False: every program whole (measurements)
# The cut runs as two launches: the grid's whole programs (a build with TAIL_LIMIT, the cut blocks' programs walking
# nothing), then the pieces. Measured (H200, the backward alone from CUDA graphs, three rounds, bwd-block-m run 17): at
# D = 128 the whole programs' build ran 4.3-6.0 % faster than the plain build with nothing cut (ptxas's doing, not the
# schedule's, and not a shorter loop: in the sm_90 SASS of triton 3.6 the faster build's first consumer loop is the
# longer one, with more spill reloads, ``prefill_gluon.sass_loops``; nothing static found tells which build wins), the
# cut itself 0.7-1.1 % more; at D = 64 the cut came out -0.6 to +0.2 % at 4K-16K, and the GQA row ran 1.9 % slower cut, 3.0 % with
# the whole programs' build alone. So from TAIL_FROM_D on, every such call takes the whole programs' build, cut where
# the model says; below it, the plain build (run 18, as shipped: 5.1-7.4 % faster than the plain build at D = 128)
TAIL_PIECES = True
TAIL_FROM_D = 128
TAIL_PIECE_STEPS = 3
TAIL_MAX_PARTS = 64
TAIL_MAX_MB = 64
TAIL_MIN_SAVING = 0.01
# measurement: every dense call that is not deterministic or persistent (causal and windowed ones too) takes the whole
# programs' build (TAIL_LIMIT, nothing cut); bwd-block-m run 19: 0.972-1.024x the table's build on the causal rows,
# slower on six of eight, so off
TAIL_LIMIT_ALL = False
BWD_SUB_N = 64  # keys per consumer warp group
# registers per thread of the second consumer warp group (setmaxnreg); the loader's warp group keeps 24 and
# the first consumer takes the rest of the register file (248 at 232: the sm_90 PTX). At 240 the two
# consumers are even (240 + 240 + 24 warp-group rows of 128 threads fill 64,512 of 65,536 registers)
BWD_CONSUMER_REGS = 232
BWD_MAX_CONSUMER_REGS = 240

if HAVE_GLUON:

    @gluon.jit
    def _bwd_loader(desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                    dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, b, hk, hkv, G, H, nq_rows, pad, start_n,
                    m_lo, n_m, rot):
        """One warp: the consumers' K and V slices once (of K/V head ``hkv``: the program's head ``hk`` of dK, dV
        divided by ``KV_DIV``), then (Qᵢ, dOᵢ) for step t = (head g, block) into
        ring slot t % STAGES, each slot refilled once both consumers have released it; with LSE_TMA (a
        64-row lse_smem) the rows' L₂ and Dᵢ beside Qᵢ and dOᵢ, from buffers of whole query blocks per head
        (``nq_rows``: a head's rows, Nq, or a packed batch's padded rows; ``pad``: where a packed sequence's rows
        start in them, less where they start in the packed tensors; 0 for dense calls)."""
        _bwd_load_tile(desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                       dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, b, hk, hkv, G, H, nq_rows, pad, start_n,
                       m_lo, n_m, rot, 0, 0, 1, False)

    @gluon.jit
    def _bwd_load_tile(desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                       dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, b, hk, hkv, G, H, nq_rows, pad, start_n,
                       m_lo, n_m, rot, g0, kv_n, KVB: gl.constexpr, PERSIST: gl.constexpr):
        """One key block's loads (``_bwd_loader``): its steps are the ring's steps g0, g0 + 1, ...; its K and V go
        to K/V buffer kv_n % KVB, the block's kv_n-th with a step (the persistent build's: ``_bwd_loader_p``), once
        the consumers have freed that buffer from block kv_n − KVB; with one buffer, after the block's first
        STAGES (Qᵢ, dOᵢ) are asked for, so that those load while the consumers finish the block before."""
        BLOCK_M: gl.constexpr = q_smem.shape[3]
        STAGES: gl.constexpr = q_smem.shape[0]
        LSE_TMA: gl.constexpr = lse_smem.shape[1] == BLOCK_M
        KV_LATE: gl.constexpr = PERSIST and KVB == 1
        if n_m > 0 and not KV_LATE:  # (no step, no use of K and V: the consumers do not wait for them)
            _bwd_kv_in(desc_k, desc_v, k_smem, v_smem, kv_bar, b, hkv, start_n, kv_n, KVB, PERSIST)
        for t in range(G * n_m):
            g = g0 + t
            slot = g % STAGES
            h = hk * G + t // n_m
            m0 = m_lo + ((t % n_m + rot) % n_m) * BLOCK_M  # each key block starts at its own query block
            if g >= STAGES:
                mbarrier.wait(q_empty.index(slot), ((g // STAGES) - 1) & 1)
            row = (b * H + h) * (gl.cdiv(nq_rows, 64) * 64) + m0 + pad  # the block's first row of L₂, D (heads padded
            # to 64 rows, ``lse_rows``: a 128-row block's box may reach into the next head's rows, masked there)
            if LSE_TMA:
                mbarrier.expect(q_ready.index(slot), desc_q.block_type.nbytes + desc_lse.block_type.nbytes)
                _tma_load(desc_lse, [row], q_ready.index(slot), lse_smem.index(slot))
            else:
                mbarrier.expect(q_ready.index(slot), desc_q.block_type.nbytes)
            _tma_load(desc_q, [b, h, m0, 0], q_ready.index(slot), q_smem.index(slot))
            if g >= STAGES:
                mbarrier.wait(do_empty.index(slot), ((g // STAGES) - 1) & 1)
            if LSE_TMA:
                mbarrier.expect(do_ready.index(slot), desc_do.block_type.nbytes + desc_dl.block_type.nbytes)
                _tma_load(desc_dl, [row], do_ready.index(slot), dl_smem.index(slot))
            else:
                mbarrier.expect(do_ready.index(slot), desc_do.block_type.nbytes)
            _tma_load(desc_do, [b, h, m0, 0], do_ready.index(slot), do_smem.index(slot))
            if KV_LATE:
                if t == gl.minimum(G * n_m, STAGES) - 1:
                    _bwd_kv_in(desc_k, desc_v, k_smem, v_smem, kv_bar, b, hkv, start_n, kv_n, KVB, PERSIST)

    @gluon.jit
    def _bwd_kv_in(desc_k, desc_v, k_smem, v_smem, kv_bar, b, hkv, start_n, kv_n, KVB: gl.constexpr,
                   PERSIST: gl.constexpr):
        """A key block's K and V (its two 64-key slices) into buffer pair kv_n % KVB by TMA, on that pair's "ready"
        barrier; PERSIST: once both consumers have given the pair back from block kv_n − KVB."""
        NC: gl.constexpr = 2
        SUB_N: gl.constexpr = k_smem.shape[3]
        kvb = kv_n % KVB
        bar = kv_bar.index(kvb)
        if PERSIST:
            if kv_n >= KVB:
                mbarrier.wait(kv_bar.index(KVB + kvb), ((kv_n // KVB) - 1) & 1)
        mbarrier.expect(bar, NC * (desc_k.block_type.nbytes + desc_v.block_type.nbytes))
        for c in gl.static_range(NC):
            _tma_load(desc_k, [b, hkv, start_n + c * SUB_N, 0], bar, k_smem.index(kvb * NC + c))
            _tma_load(desc_v, [b, hkv, start_n + c * SUB_N, 0], bar, v_smem.index(kvb * NC + c))

    @gluon.jit
    def _turn(n, m0, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, causal_off, win_off, Nk, CAUSAL: gl.constexpr):
        """Key block n's turn (0 first) at the dQ tile of query block m0 in the deterministic backward, in the
        order the key blocks reach it. Causal: descending — key block n walks from its diagonal's query block
        on, so the last key block that sees m0 (min((m0 + BLOCK_M − 1 + causal_off) // BLOCK_N, blocks − 1))
        reaches it first, each block before it two steps later (and the grid launches key blocks last first,
        so a turn never waits for a program not yet started). Otherwise ascending from the first key block
        that sees m0 (the window's, else 0): every walk starts at the first query block."""
        if CAUSAL:
            return gl.minimum((m0 + BLOCK_M - 1 + causal_off) // BLOCK_N, gl.cdiv(Nk, BLOCK_N) - 1) - n
        else:
            return n - gl.maximum((m0 + win_off) // BLOCK_N, 0)

    @gluon.jit
    def _turn_arrival(n, u, m0, hoff, p_base, q_end, causal_off, Nk, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        """Key block n's turn (0 first) at the dQ tile of query block m0 of its sequence (causal, no window), with
        staggered walks: key block n2 walks its query blocks from m_lo(n2) (its diagonal's, rows from the sequence's
        first, p_base), n_m(n2) of them up to q_end, starting at the (n2 mod n_m(n2))-th and wrapping, head after head
        (``hoff`` heads before this tile's), so it reaches m0 at step hoff·n_m(n2) + ((m0 − m_lo(n2)) / BLOCK_M −
        n2 mod n_m(n2)) mod n_m(n2); this block reaches it at step u. The turn: the key blocks that see m0 and reach
        it at an earlier step, or at the same step with a lower number (``benchmarks/det_order_sim.py``'s arrival
        order). Coordinates as ``_turn``'s (the sequence's own key blocks, padded rows)."""
        last = gl.minimum((m0 + BLOCK_M - 1 + causal_off) // BLOCK_N, gl.cdiv(Nk, BLOCK_N) - 1)
        turn = 0
        for n2 in range(0, last + 1):
            lo2 = p_base + (gl.maximum(n2 * BLOCK_N - causal_off - p_base, 0) // BLOCK_M) * BLOCK_M
            nm2 = gl.maximum(gl.cdiv(q_end - lo2, BLOCK_M), 1)
            a2 = hoff * nm2 + ((m0 - lo2) // BLOCK_M - n2 % nm2 + nm2) % nm2
            earlier = (a2 < u) | ((a2 == u) & (n2 < n))
            turn += ((n2 != n) & (m0 >= lo2) & earlier).to(gl.int32)
        return turn

    @gluon.jit
    def _bwd_dq(u, desc_dq, DQ, k_smem, ds_smem, dq_smem, ds_bars, b, hk, G, H, start_n, win_off, m_lo,
                n_m, rot, Nq, nq_rows, pad, sm_scale,
                PART: gl.constexpr, DQ_SPLIT: gl.constexpr, DQ_ATOMIC: gl.constexpr, DQ_SHARED: gl.constexpr,
                ABLATE: gl.constexpr, DQ_PERM: gl.constexpr, DET: gl.constexpr, ug=None, kv0=0):
        """Step u's dQᵢ = dS K over all 128 keys of the block, by warp group u % 2 (they take turns) or by
        both, half of D's columns each (DQ_SHARED): one addition per element per key block (rows past Nq
        add exact zeros: their Pᵀ is 0). Waits for both halves of step u's dSᵀ and frees its slot. DET: the
        staged tile goes to the dQ writer warp (``_bwd_dq_writer``) through a pair of barriers per staging
        buffer (full, empty) after the dSᵀ ring's in ``ds_bars``; the writer adds it in its turn. ``ug``: the step's
        number in the program's ring (the persistent build counts on across key blocks; None: u), which sets the
        dSᵀ slot, its phase and the turn; ``kv0``: the block's first K buffer (the persistent build's K/V pairs)."""
        NC: gl.constexpr = ds_smem.shape[1] // k_smem.shape[3]
        if ug is None:
            ug = u
        SUB_N: gl.constexpr = k_smem.shape[3]
        HEAD_D: gl.constexpr = k_smem.shape[4]
        NSLOT: gl.constexpr = ds_smem.shape[0]
        BLOCK_M: gl.constexpr = ds_smem.shape[2]
        SPLIT_D: gl.constexpr = HEAD_D // (DQ_SPLIT * (1 + DQ_SHARED))  # columns of one dQ product
        COL0: gl.constexpr = PART * (HEAD_D // 2) * DQ_SHARED  # this warp group's first dQ column
        dqs_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, SPLIT_D, 16])
        slot = ug % NSLOT
        parity = ug % 2
        NBUF: gl.constexpr = dq_smem.shape[0]  # staging buffers
        h = hk * G + u // n_m
        m0 = m_lo + ((u % n_m + rot) % n_m) * BLOCK_M
        row0 = (b * H + h).to(gl.int64) * nq_rows
        my_turn = parity == PART
        if DQ_SHARED:
            my_turn = parity < 2
        if my_turn and ABLATE == 2:  # measurement only: no dQ product
            mbarrier.wait(ds_bars.index(slot), (ug // NSLOT) & 1)
            mbarrier.arrive(ds_bars.index(NSLOT + slot), count=1)
        if my_turn and (ABLATE < 2 or ABLATE >= 5):
            mbarrier.wait(ds_bars.index(slot), (ug // NSLOT) & 1)  # both halves of dSᵀ are in
            ds_all = ds_smem.index(slot)  # (NC·SUB_N, BLOCK_M)
            rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dqs_layout))
            offs_ds = gl.arange(0, SPLIT_D, layout=gl.SliceLayout(0, dqs_layout))
            for j in gl.static_range(DQ_SPLIT):
                dq = gl.zeros([BLOCK_M, SPLIT_D], gl.float32, layout=dqs_layout)
                for c in gl.static_range(NC):  # dS K = Σ_c dS[:, keys of c] K_c
                    dq = warpgroup_mma(ds_all.slice(c * SUB_N, SUB_N, dim=0).permute((1, 0)),
                                       k_smem.index(kv0 + c).reshape([SUB_N, HEAD_D]).slice(COL0 + j * SPLIT_D, SPLIT_D,
                                                                                         dim=1),
                                       dq, use_acc=c > 0, is_async=True)
                dq = warpgroup_mma_wait(0, deps=(dq, ))
                if j == DQ_SPLIT - 1:
                    mbarrier.arrive(ds_bars.index(NSLOT + slot), count=1)  # the tile is free again
                if ABLATE == 1:  # measurement only: dQ made, not added
                    dq = dq * 0.0
                if ABLATE != 1 and not DQ_ATOMIC:
                    # stage in this warp group's float32 tile (slice j), once the copy engine has read
                    # the additions made from it two steps ago, and add it asynchronously (shared dQ
                    # products: a tile per step parity, the last step's addition may still be reading)
                    if DQ_SHARED:
                        buf = PART * 2 + parity
                    else:
                        buf = PART * DQ_SPLIT + j
                    dq_stage = dq_smem.index(buf)
                    if DET:  # the writer has added this buffer's last tile (two steps ago) into global memory
                        if u >= 2:
                            mbarrier.wait(ds_bars.index(2 * NSLOT + NBUF + buf), ((u // 2) - 1) & 1)
                    elif DQ_SHARED:
                        tma.store_wait(1)
                        _warps_barrier()
                    elif j == 0:
                        tma.store_wait(0)
                        _warps_barrier()
                    if ABLATE != 7:  # (measurement only: 7 adds the stale tile)
                        # unscaled: gluon_backward scales the sum once, on its way to dq
                        if DQ_PERM and BLOCK_M == 64:  # rows 16w + 8a + l // 4, columns 8i + 2(l % 4) + e of the
                            # wgmma accumulator (warp w, lane l, register (i, a, e)) to position
                            # ((i·128 + 32w + l)·2 + a)·2 + e: each thread's four registers of one i are 16
                            # contiguous bytes, a warp's 512 in a row
                            dq_stage.store(dq.reshape([4, 2, 8, SPLIT_D // 8, 4, 2]).permute((3, 0, 2, 4, 1, 5))
                                           .reshape([2 * SPLIT_D, 32]))
                        elif DQ_PERM:  # 128 rows: two 64-row tiles (rows 64r + 16w + 8a + l // 4), each as above
                            dq_stage.store(dq.reshape([2, 4, 2, 8, SPLIT_D // 8, 4, 2]).permute((0, 4, 1, 3, 5, 2, 6))
                                           .reshape([4 * SPLIT_D, 32]))
                        else:
                            dq_stage.store(dq)
                        fence_async_shared()
                        _warps_barrier()
                    if DET:  # staged: the writer's
                        mbarrier.arrive(ds_bars.index(2 * NSLOT + buf), count=1)
                    elif ABLATE != 6 and DQ_PERM:  # (measurement only: 6 stages the tile but adds nothing)
                        # tile (b, h, 64-row query block, column slice) of the buffer: 2·SPLIT_D rows of 32
                        tile = (((b * H + h) * gl.cdiv(nq_rows, 64) + (m0 + pad) // 64) * (HEAD_D // SPLIT_D)
                                + COL0 // SPLIT_D + j)
                        if BLOCK_M == 64:
                            _tma_add(desc_dq, [tile * (2 * SPLIT_D), 0], dq_stage)
                        else:  # the next 64 rows' tile is HEAD_D // SPLIT_D tiles on (past Nq: exact zeros added
                            # into the next head's first tile, or clipped past the buffer's end)
                            _tma_add(desc_dq, [tile * (2 * SPLIT_D), 0], dq_stage.slice(0, 2 * SPLIT_D))
                            _tma_add(desc_dq, [(tile + HEAD_D // SPLIT_D) * (2 * SPLIT_D), 0],
                                     dq_stage.slice(2 * SPLIT_D, 2 * SPLIT_D))
                    elif ABLATE != 6:
                        _tma_add(desc_dq, [(row0 + m0 + pad).to(gl.int32), COL0 + j * SPLIT_D], dq_stage)
                    if ABLATE == 5:  # measurement only: wait for the read at once (the old way)
                        tma.store_wait(0)
                elif ABLATE != 1:
                    dq_ptrs = DQ + (row0 + pad) * HEAD_D + rows[:, None] * HEAD_D + (COL0 + j * SPLIT_D + offs_ds)[None, :]
                    gl.atomic_add(dq_ptrs, dq, mask=(rows[:, None] < Nq) & (offs_ds[None, :] < SPLIT_D),
                                  sem="relaxed")

    @gluon.jit
    def _staging_buf(p, u, SLICES: gl.constexpr):
        """The staging buffer of step u's tile p, as ``_bwd_dq`` stages it: warp group p's buffer of u's
        parity when both make every step's product (SLICES 2), else warp group u % 2's own."""
        if SLICES == 2:
            return p * 2 + u % 2
        else:
            return u % 2

    @gluon.jit
    def _bwd_dq_writer(desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m, causal_off,
                       win_off, flags, rot, p_base, q_end, CAUSAL: gl.constexpr):
        """One warp (deterministic builds): adds the consumers' staged dQ tiles into the float32 buffer, each in
        its turn (``_turn``), so the consumers never wait for a turn or an addition's round trip. Per step: for
        each staged tile (one, or two with DQ_SHARED: a column half per warp group) wait until it is staged;
        before the step's first turn, count the previous step's additions once they are complete (issued a
        step ago: done by now, or nearly; the next key block at a tile comes two steps later, and its turn
        never waits for this program's next one); wait for the tile's turn at its counter and add it by TMA;
        once the copy engine has read the step's tiles, free their buffers. A wait that gives up counts itself
        in SEM[0]; waits that polled, in SEM[1] (polls) and SEM[2] (waits); the tiles' counters follow. ``flags``:
        the consumers' (measurement only: ABLATE 8, its third dimension 256, adds each tile without its turn; its
        sixth 8: staggered walks, ``rot`` this block's start, turns in arrival order, ``_turn_arrival``, with the
        sequence's rows from p_base to q_end; else those three are unused; its sixth 16: each step's turns waited
        for before its tiles are staged, ``DET_EARLY_TURN``)."""
        SEM_TILE0: gl.constexpr = _SEM_TILE0
        NO_TURNS: gl.constexpr = flags.shape[2] >= 256
        ROT_TURNS: gl.constexpr = flags.shape[5] == 8
        EARLY: gl.constexpr = (flags.shape[5] == 16) and not NO_TURNS
        NSLOT: gl.constexpr = ds_smem.shape[0]
        BLOCK_N: gl.constexpr = ds_smem.shape[1]
        BLOCK_M: gl.constexpr = ds_smem.shape[2]
        NBUF: gl.constexpr = dq_smem.shape[0]
        ROWS: gl.constexpr = dq_smem.shape[1]  # rows of 32 floats per tile
        SLICES: gl.constexpr = 1 + (NBUF == 4)  # tiles per (head, query block): DQ_SHARED's column halves
        n = start_n // BLOCK_N
        prev = gl.to_tensor(-1)  # the previous step's first tile, added and not yet counted
        for u in range(G * n_m):
            h = hk * G + u // n_m
            if ROT_TURNS:  # (causal, the consumers' staggered walks)
                m0 = m_lo + ((u % n_m + rot) % n_m) * BLOCK_M
            else:
                m0 = m_lo + (u % n_m) * BLOCK_M
            base = ((b * H + h) * gl.cdiv(Nq, BLOCK_M) + m0 // BLOCK_M) * SLICES
            if ROT_TURNS:
                turn = _turn_arrival(n, u, m0, u // n_m, p_base, q_end, causal_off, Nk, BLOCK_M, BLOCK_N)
            else:
                turn = _turn(n, m0, BLOCK_M, BLOCK_N, causal_off, win_off, Nk, CAUSAL)
            if EARLY:  # (the turns in key block order at every tile: no wait here depends on this program's counts)
                for p in gl.static_range(SLICES):
                    _sem_wait(SEM + SEM_TILE0 + base + p, turn, SEM)
            for p in gl.static_range(SLICES):
                buf = _staging_buf(p, u, SLICES)
                mbarrier.wait(ds_bars.index(2 * NSLOT + buf), (u // 2) & 1)
                if p == 0:
                    if prev >= 0:
                        _adds_complete()
                        for q in gl.static_range(SLICES):
                            _lane0_adds(SEM + SEM_TILE0 + prev + q)
                if not (NO_TURNS or EARLY):
                    _sem_wait(SEM + SEM_TILE0 + base + p, turn, SEM)
                _tma_add(desc_dq, [(base + p) * ROWS, 0], dq_smem.index(buf))
            tma.store_wait(0)  # read: the buffers may be staged into again
            for p in gl.static_range(SLICES):
                mbarrier.arrive(ds_bars.index(2 * NSLOT + NBUF + _staging_buf(p, u, SLICES)), count=1)
            prev = base
        if prev >= 0:
            _adds_complete()
            for p in gl.static_range(SLICES):
                _lane0_adds(SEM + SEM_TILE0 + prev + p)

    @gluon.jit
    def _bwd_dq_writer_causal(desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m,
                              causal_off, win_off, flags, rot, p_base, q_end):
        _bwd_dq_writer(desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m, causal_off,
                       win_off, flags, rot, p_base, q_end, True)

    @gluon.jit
    def _bwd_dq_writer_full(desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m,
                            causal_off, win_off, flags, rot, p_base, q_end):
        _bwd_dq_writer(desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m, causal_off,
                       win_off, flags, rot, p_base, q_end, False)

    @gluon.jit
    def _bwd_consumer(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                      kv_bar, q_ready, do_ready, q_empty, do_empty,
                      b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                      SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, PART: gl.constexpr,
                      CAUSAL: gl.constexpr):
        """One warp group: keys start_n + PART·64 .. +63. Accumulates dK, dV of its keys over every step,
        shares each step's dSᵀ with the other warp group through a ring of NSLOT tiles and makes its share
        of the dQ products (``_bwd_dq``), DQ_LAG steps behind its own dSᵀ; writes dK·scale, dV by TMA (a packed
        sequence's last block by masked stores).
        With ALIBI each step's query head h subtracts slope_h·log2e·|i + Nk − Nq − j| from its scores
        (SLOPES[b·stride_sb + h·stride_sh]); without, SLOPES and its strides are unused (None)."""
        _bwd_consumer_tile(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                           do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                           b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                           SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, PART, CAUSAL,
                           0, 0, 1, False)

    @gluon.jit
    def _bwd_consumer_tile(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                           do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                           b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                           SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn,
                           PART: gl.constexpr, CAUSAL: gl.constexpr, g0, kv_n, KVB: gl.constexpr,
                           PERSIST: gl.constexpr):
        """One key block of ``_bwd_consumer``: its steps are the ring's steps g0, g0 + 1, ... (Q/dO slots, dSᵀ
        slots and dQ turns), its K and V in buffer pair kv_n % KVB (the block's kv_n-th with a step). PERSIST (the
        persistent build, ``_bwd_consumer_p``): the pair is given back to the loader as soon as the last dQ products
        have read K, and dK·scale, dV go out from registers by masked stores (no TMA store through the buffers)."""

        SUB_N: gl.constexpr = k_smem.shape[3]
        HEAD_D: gl.constexpr = k_smem.shape[4]
        BLOCK_M: gl.constexpr = q_smem.shape[3]
        STAGES: gl.constexpr = q_smem.shape[0]
        NSLOT: gl.constexpr = ds_smem.shape[0]  # the dSᵀ ring
        # (a partition takes no constexpr: the shape of a small buffer carries these six)
        DQ_SPLIT: gl.constexpr = flags.shape[0]
        DQ_ATOMIC: gl.constexpr = (flags.shape[1] == 2) or (flags.shape[1] == 8)
        DQ_SHARED: gl.constexpr = flags.shape[1] >= 4  # both warp groups every step, half of D's columns each
        ABLATE: gl.constexpr = ((flags.shape[2] >= 2) + (flags.shape[2] >= 4) + (flags.shape[2] >= 8)
                                + (flags.shape[2] >= 16) + (flags.shape[2] >= 32) + (flags.shape[2] >= 64)
                                + (flags.shape[2] >= 128) + (flags.shape[2] >= 256))  # log2 of the third dimension
        DQ_LAG: gl.constexpr = (flags.shape[3] >= 2) + (flags.shape[3] >= 4)  # log2 of the fourth
        ALIBI: gl.constexpr = flags.shape[4] == 2  # the ALiBi bias on the scores
        DQ_PERM: gl.constexpr = flags.shape[5] >= 2  # dQ tiles in the accumulator's register order
        DET: gl.constexpr = flags.shape[5] >= 4  # key blocks add into each dQ tile in their order (SEM)
        VARLEN: gl.constexpr = flags.shape[6] >= 2  # a packed batch: this program's sequence ends at Nq, Nk
        ZERO: gl.constexpr = flags.shape[6] == 4  # (ZERO_PAST) its rows past them set to 0 before their products
        # the pieces' build (``tail_pieces``): DK the pieces' float32 buffer, stride_dkh the program's slot in it
        TAIL: gl.constexpr = (not VARLEN) and (not PERSIST) and (DK is not None)
        LSE_TMA: gl.constexpr = lse_smem.shape[1] == BLOCK_M  # L₂ and Dᵢ in the ring (else loaded here)
        EXCHANGE: gl.constexpr = not (ABLATE == 3 or ABLATE == 4)  # (measurement only: 3, 4 have none)
        dtype: gl.constexpr = desc_dk.dtype
        # Sᵀ, dPᵀ: (SUB_N keys, BLOCK_M queries); dK, dV: (SUB_N, D); dQ: (BLOCK_M, D) — SUB_N = BLOCK_M = 64
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)

        NC: gl.constexpr = ds_smem.shape[1] // SUB_N
        kvb = kv_n % KVB
        kv0 = kvb * NC
        kc0 = start_n + PART * SUB_N
        offs_k = kc0 + gl.arange(0, SUB_N, layout=row_s)
        offs_qs = gl.arange(0, BLOCK_M, layout=col_s)
        k_tile = k_smem.index(kv0 + PART)
        v_tile = v_smem.index(kv0 + PART)
        k = k_tile.reshape([SUB_N, HEAD_D])
        v = v_tile.reshape([SUB_N, HEAD_D])
        dk = gl.zeros([SUB_N, HEAD_D], gl.float32, layout=acc_layout)
        dv = gl.zeros([SUB_N, HEAD_D], gl.float32, layout=acc_layout)
        s_zero = gl.zeros([SUB_N, BLOCK_M], gl.float32, layout=s_layout)
        # (ALiBi) the bias's diagonal is key j = row i + off, off = Nk − Nq (bottom-right, as the masks)
        kd = kc0 - (Nk - Nq)
        koff = offs_k - (Nk - Nq)  # j − off
        n_steps = G * n_m
        if n_steps > 0:  # (none: dK = dV = 0, and the loader brought no K, V)
            mbarrier.wait(kv_bar.index(kvb), (kv_n // KVB) & 1)
            if ZERO:  # this warp group's keys past the sequence's end are the next one's (the other group's dQ
                if kc0 + SUB_N > Nk:  # products read them only after this group's first dSᵀ has arrived)
                    _zero_past(k, Nk - kc0, 8)
                    _zero_past(v, Nk - kc0, 8)

        for t in range(n_steps):
            g = g0 + t  # the step's number in the ring
            slot = g % STAGES
            phase = (g // STAGES) & 1
            h = hk * G + t // n_m
            m0 = m_lo + ((t % n_m + rot) % n_m) * BLOCK_M  # each key block starts at its own query block
            row0 = (b * H + h).to(gl.int64) * nq_rows  # this head's rows of L₂ and D
            offs_q = m0 + offs_qs
            # -- Sᵀ = K_c Qᵢᵀ and dPᵀ = V_c dOᵢᵀ, both in flight
            mbarrier.wait(q_ready.index(slot), phase)
            q = q_smem.index(slot).reshape([BLOCK_M, HEAD_D])
            if ZERO:  # a query block that crosses the sequence's end (both groups write the same bytes)
                if m0 + BLOCK_M > Nq:
                    _zero_past(q, Nq - m0, 8)
            s_tok = warpgroup_mma(k, q.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(do_ready.index(slot), phase)
            do = do_smem.index(slot).reshape([BLOCK_M, HEAD_D])
            if ZERO:
                if m0 + BLOCK_M > Nq:
                    _zero_past(do, Nq - m0, 8)
            dp_tok = warpgroup_mma(v, do.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            # -- Pᵀ from L while dPᵀ is still in flight; mask before exp2 (a hidden score may exceed L)
            if LSE_TMA:  # in the ring slot beside Qᵢ (the loader's TMA): no global load to wait for here
                lse2 = gl.where(offs_q < Nq, lse_smem.index(slot).load(col_s), float("inf"))  # past Nq: P = 0
            else:
                lse2 = gl.load(LSE2 + row0 + pad + offs_q, mask=offs_q < Nq, other=float("inf"))
            sT = warpgroup_mma_wait(1, deps=(s_tok, ))
            masked = (kc0 + SUB_N > Nk) | (kc0 < m0 + BLOCK_M - 1 + win_off)
            if CAUSAL:
                masked = masked | (kc0 + SUB_N - 1 > m0 + causal_off)
            if ALIBI:  # this step's query head's slope (log2 units)
                slope2 = gl.load(SLOPES + b * stride_sb + h * stride_sh).to(gl.float32) * _LOG2E
                kpos = (koff - m0).to(gl.float32)  # j − off − m0
                if not CAUSAL:  # i + off − j at the block's first row and key, d0, says whether the bias's |·|
                    # has one sign over the block: every key at or before every row's diagonal (below), or at or
                    # after it. A block across the diagonal takes the element path (|·| per element)
                    d0 = m0 - kd
                    below = d0 >= SUB_N - 1
                    masked = masked | ((d0 < SUB_N - 1) & (d0 > 1 - BLOCK_M))
            if masked:
                if _MASK_LIMITS > 0 and HEAD_D >= _MASK_LIMITS_FROM_D:  # key j sees the query columns [lo_j, hi_j)
                    if CAUSAL:
                        lo = offs_k - (causal_off + m0)
                    else:
                        lo = gl.zeros_like(offs_k)
                    hi = gl.where(offs_k < Nk, offs_k + (1 - win_off - m0), 0)
                    visible = _col_range(lo, hi, offs_qs, _MASK_LIMITS)
                else:
                    visible = (offs_k[:, None] < Nk) & (offs_k[:, None] >= offs_q[None, :] + win_off)
                    if CAUSAL:
                        visible = visible & (offs_k[:, None] <= offs_q[None, :] + causal_off)
                if ALIBI and CAUSAL:  # every visible key is at or before its row's diagonal: as below it
                    sT = gl.where(visible, sT * qk_scale - lse2[None, :] + (slope2 * kpos)[:, None], float("-inf"))
                elif ALIBI:
                    dist = gl.abs(offs_q[None, :] - koff[:, None]).to(gl.float32)
                    sT = gl.where(visible, sT * qk_scale - lse2[None, :] - slope2 * dist, float("-inf"))
                else:
                    sT = gl.where(visible, sT * qk_scale - lse2[None, :], float("-inf"))
            elif ALIBI and CAUSAL:  # slope·(i + off − j) = slope·(i − m0) − slope·(j − off − m0): the query term
                # comes folded into L₂ (gluon_backward adds slope·log2e·(i mod BLOCK_M)), the key term is added
                # here, one add per score. Both terms are small (positions relative to m0, a multiple of BLOCK_M)
                sT = sT * qk_scale - lse2[None, :] + (slope2 * kpos)[:, None]
            elif ALIBI:  # one sign σ: slope·|i + off − j| = σ·slope·(i − m0) − σ·slope·(j − off − m0), a term per
                # query (into L₂) and one per key (positions relative to m0: exact in float32)
                sgn2 = gl.where(below, slope2, -slope2)
                qpos = offs_q.to(gl.float32) - m0.to(gl.float32)
                sT = sT * qk_scale - (lse2 + sgn2 * qpos)[None, :] + (sgn2 * kpos)[:, None]
            else:
                sT = sT * qk_scale - lse2[None, :]
            if ABLATE == 4:  # measurement only: no exponentials
                pT = sT
            else:
                pT = gl.exp2(sT)
            p_op = gl.convert_layout(pT.to(dtype), op_layout)
            if LSE_TMA:  # (rows past Nq: padding, maybe not finite; their Pᵀ is 0 and 0·(dPᵀ − 0) too)
                di = gl.where(offs_q < Nq, dl_smem.index(slot).load(col_s), 0.0)
            else:
                di = gl.load(DELTA + row0 + pad + offs_q, mask=offs_q < Nq, other=0.0)
            dpT = warpgroup_mma_wait(0, deps=(dp_tok, ))
            # -- dV += Pᵀ dOᵢ (issued first: it needs only Pᵀ), dSᵀ = Pᵀ ∘ (dPᵀ − Dᵢ), dK += dSᵀ Qᵢ
            dv_tok = warpgroup_mma(p_op, do, dv, is_async=True)
            ds = (pT * (dpT - di[None, :])).to(dtype)
            ds_op = gl.convert_layout(ds, op_layout)
            dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
            # -- dSᵀ into this warp group's half of the step's ring tile (t % NSLOT), once the readers of
            #    step t − NSLOT are done with it; then tell the readers
            ds_slot = g % NSLOT
            if EXCHANGE:
                if g >= NSLOT:
                    mbarrier.wait(ds_bars.index(NSLOT + ds_slot), ((g // NSLOT) - 1) & 1)
                ds_smem.index(ds_slot).slice(PART * SUB_N, SUB_N, dim=0).store(ds)
                fence_async_shared()
                _warps_barrier()  # every thread's share is written before the one arrival
                mbarrier.arrive(ds_bars.index(ds_slot), count=1)
            # dV and dK done: the slot's Qᵢ and dOᵢ are free for the loader
            dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, p_op, ds_op))
            mbarrier.arrive(q_empty.index(slot), count=1)
            mbarrier.arrive(do_empty.index(slot), count=1)
            # -- the dQ product of step t − DQ_LAG (its other half of dSᵀ has had DQ_LAG steps to arrive)
            if EXCHANGE and DQ_LAG == 0:
                _bwd_dq(t, desc_dq, DQ, k_smem, ds_smem, dq_smem, ds_bars, b, hk, G, H, start_n,
                        win_off, m_lo, n_m, rot, Nq, nq_rows, pad, sm_scale, PART, DQ_SPLIT, DQ_ATOMIC, DQ_SHARED, ABLATE,
                        DQ_PERM, DET, g, kv0)
            elif EXCHANGE:
                if t >= DQ_LAG:
                    _bwd_dq(t - DQ_LAG, desc_dq, DQ, k_smem, ds_smem, dq_smem, ds_bars, b, hk, G, H,
                            start_n, win_off, m_lo, n_m, rot, Nq, nq_rows, pad, sm_scale,
                            PART, DQ_SPLIT, DQ_ATOMIC, DQ_SHARED, ABLATE, DQ_PERM, DET, g - DQ_LAG, kv0)
        if EXCHANGE and DQ_LAG > 0:  # the last DQ_LAG steps' products
            for u in range(gl.maximum(n_steps - DQ_LAG, 0), n_steps):
                _bwd_dq(u, desc_dq, DQ, k_smem, ds_smem, dq_smem, ds_bars, b, hk, G, H, start_n,
                        win_off, m_lo, n_m, rot, Nq, nq_rows, pad, sm_scale, PART, DQ_SPLIT, DQ_ATOMIC, DQ_SHARED, ABLATE,
                        DQ_PERM, DET, g0 + u, kv0)

        # -- epilogue: dK·scale and dV through this warp group's K and V buffers, once the last dQ products
        #    (the other warp group's too) have read K: the last use of every ring slot is freed
        if EXCHANGE:
            for i in gl.static_range(NSLOT):
                if n_steps >= i + 1:
                    u = g0 + n_steps - 1 - i
                    mbarrier.wait(ds_bars.index(NSLOT + u % NSLOT), (u // NSLOT) & 1)
        if PERSIST:  # K and V are read no more: the loader may bring the next block's while dK, dV go out
            if n_steps > 0:
                mbarrier.arrive(kv_bar.index(KVB + kvb), count=1)
            rk = kc0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(1, acc_layout))
            cd = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, acc_layout))
            offs = ((b * (H // G) + hk).to(gl.int64) * stride_dkh + rk[:, None].to(gl.int64) * stride_dkn
                    + cd[None, :])
            keep = (rk[:, None] < Nk) & (cd[None, :] < HEAD_D)
            gl.store(DK + offs, (dk * sm_scale).to(dtype), mask=keep)
            gl.store(DV + offs, dv.to(dtype), mask=keep)
        elif VARLEN and start_n + 2 * SUB_N > Nk:  # the sequence's last key block (a TMA box would write into the
            # next one's rows), decided for the whole block, so that both consumer warp groups take the same path
            rk = kc0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(1, acc_layout))
            cd = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, acc_layout))
            offs = hk * stride_dkh + rk[:, None].to(gl.int64) * stride_dkn + cd[None, :]
            keep = (rk[:, None] < Nk) & (cd[None, :] < HEAD_D)
            gl.store(DK + offs, (dk * sm_scale).to(dtype), mask=keep)
            gl.store(DV + offs, dv.to(dtype), mask=keep)
        elif TAIL and stride_dkh >= 0:  # a piece of a cut key block (``tail_pieces``): its float32 partial dK
            # (unscaled) and dV, whole, into slot stride_dkh of the pieces' buffer DK (the same for both groups)
            rk = PART * SUB_N + gl.arange(0, SUB_N, layout=gl.SliceLayout(1, acc_layout))
            cd = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, acc_layout))
            slot_k = DK + stride_dkh.to(gl.int64) * (4 * SUB_N * HEAD_D)  # (int32 offsets from it: the stores'
            offs = rk[:, None] * HEAD_D + cd[None, :]  # addresses fold into immediates, no 64-bit offset per element)
            gl.store(slot_k + offs, dk)
            gl.store(slot_k + 2 * SUB_N * HEAD_D + offs, dv)
            tma.store_wait(0)  # (the dQ additions' reads of their staging tiles)
        else:
            k.store((dk * sm_scale).to(dtype))
            v.store(dv.to(dtype))
            fence_async_shared()
            _tma_store(desc_dk, [b, hk, kc0, 0], k_tile)  # rows past Nk are clipped
            _tma_store(desc_dv, [b, hk, kc0, 0], v_tile)
            tma.store_wait(0)

    @gluon.jit
    def _bwd_consumer_0_causal(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                               kv_bar, q_ready, do_ready, q_empty, do_empty,
                               b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                               SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn):
        _bwd_consumer(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                      kv_bar, q_ready, do_ready, q_empty, do_empty,
                      b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                      SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, 0, True)

    @gluon.jit
    def _bwd_consumer_0_full(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                             kv_bar, q_ready, do_ready, q_empty, do_empty,
                             b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                             SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn):
        _bwd_consumer(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                      kv_bar, q_ready, do_ready, q_empty, do_empty,
                      b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                      SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, 0, False)

    @gluon.jit
    def _bwd_consumer_1_causal(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                               kv_bar, q_ready, do_ready, q_empty, do_empty,
                               b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                               SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn):
        _bwd_consumer(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                      kv_bar, q_ready, do_ready, q_empty, do_empty,
                      b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                      SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, 1, True)

    @gluon.jit
    def _bwd_consumer_1_full(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                             kv_bar, q_ready, do_ready, q_empty, do_empty,
                             b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                             SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn):
        _bwd_consumer(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                      kv_bar, q_ready, do_ready, q_empty, do_empty,
                      b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                      SLOPES, stride_sb, stride_sh, nq_rows, pad, DK, DV, stride_dkh, stride_dkn, 1, False)

    @gluon.jit
    def _bwd_tile_pre(tile, GRID0, H, G, CU_Q, CU_K, CU_P, HEADS_FIRST: gl.constexpr):
        """The persistent build's loads of tile ``tile``'s sequence (a packed batch): CU_Q[s], CU_K[s], CU_P[s],
        CU_Q[s + 1], CU_K[s + 1], asked for a tile ahead so that their round trip to memory (dependent on the tile's
        number, ~1 µs) is not waited for at the tile's start (ncu: the persistent build's largest stalls on documents
        of 128, each program's ~31 tiles)."""
        if HEADS_FIRST:
            bhk = tile % GRID0
        else:
            bhk = tile // GRID0
        s = bhk // (H // G)
        return (gl.load(CU_Q + s), gl.load(CU_K + s), gl.load(CU_P + s), gl.load(CU_Q + s + 1), gl.load(CU_K + s + 1))

    @gluon.jit
    def _bwd_tile_index(r, p, P, SNAKE: gl.constexpr):
        """The tile program p of P takes in its round r: p + r·P, or in odd rounds with SNAKE P − 1 − p + r·P — so
        that a program's tiles are not all of one residue mod the grid's first axis (with 132 programs and 4 key
        blocks a sequence, program p would take key block p mod 4 every round: the same walk length each time);
        reversed every other round, long walks and short ones alternate. (Past the last tile: the caller's.)"""
        if SNAKE:
            return r * P + gl.where(r % 2 == 0, p, P - 1 - p)
        else:
            return r * P + p

    @gluon.jit
    def _bwd_round(r, nxt, tflags, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, N_TILES, GRID0,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        """The persistent build's tile of this program's round r (``_bwd_tile_index``) as ``_bwd_tile_of`` gives it,
        from ``nxt``, the tile's sequence lengths asked for a round ago (``_bwd_tile_pre``; a packed batch's), with the
        next round's asked for now: (b, hk, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, pad, the next round's
        lengths). Past the last tile (a last round's programs): the last tile's numbers with no step and Nk 0 (no
        store)."""
        VARLEN: gl.constexpr = tflags.shape[1] == 2
        HEADS_FIRST: gl.constexpr = tflags.shape[2] == 2
        SNAKE: gl.constexpr = tflags.shape[6] == 2
        P = gl.num_programs(0)
        tile = _bwd_tile_index(r, gl.program_id(0), P, SNAKE)
        live = tile < N_TILES
        tile = gl.minimum(tile, N_TILES - 1)
        if VARLEN:
            cur = nxt
            nxt = _bwd_tile_pre(gl.minimum(_bwd_tile_index(r + 1, gl.program_id(0), P, SNAKE), N_TILES - 1), GRID0,
                                H, G, CU_Q, CU_K, CU_P, HEADS_FIRST)
        else:
            cur = None
        b, hk, start_n, m_lo, n_m, rot, Nq_s, Nk_s, off_s, q_base, k_base, pad = _bwd_tile_of(
            tile % GRID0, tile // GRID0, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, BLOCK_M, BLOCK_N,
            tflags.shape[0] == 2, VARLEN, HEADS_FIRST, tflags.shape[3] == 2, tflags.shape[4] == 2, False, False, cur)
        return (b, hk, start_n, m_lo, gl.where(live, n_m, 0), rot, Nq_s, gl.where(live, Nk_s, 0), off_s, pad, nxt[0],
                nxt[1], nxt[2], nxt[3], nxt[4])

    @gluon.jit
    def _bwd_first(tflags, H, G, CU_Q, CU_K, CU_P, N_TILES, GRID0):
        """The lengths ``_bwd_round`` takes in round 0: the first tile's sequence's (a packed batch), else zeros."""
        if tflags.shape[1] == 2:
            return _bwd_tile_pre(gl.minimum(_bwd_tile_index(0, gl.program_id(0), gl.num_programs(0),
                                                            tflags.shape[6] == 2), N_TILES - 1),
                                 GRID0, H, G, CU_Q, CU_K, CU_P, tflags.shape[2] == 2)
        else:
            z = gl.program_id(0) * 0
            return z, z, z, z, z

    @gluon.jit
    def _bwd_loader_p(desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                      dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, tflags, H, G, Nq, Nk, causal_off, win_off,
                      CU_Q, CU_K, CU_P, KV_DIV, N_TILES, GRID0):
        """The persistent build's loader: ``_bwd_loader`` over the program's key blocks (``_bwd_round``), its Q/dO
        ring counted on from block to block, each block's K and V into the next K/V buffer pair (``tflags``: the
        build's switches, as ``_attn_bwd_gluon_ws`` sets them)."""
        KVB: gl.constexpr = tflags.shape[5]
        g0 = 0
        kv_n = 0
        q0, k0, p0, q1, k1 = _bwd_first(tflags, H, G, CU_Q, CU_K, CU_P, N_TILES, GRID0)  # (each loop-carried)
        for r in range(gl.cdiv(N_TILES, gl.num_programs(0))):
            b, hk, start_n, m_lo, n_m, rot, Nq_s, Nk_s, off_s, pad, q0, k0, p0, q1, k1 = _bwd_round(
                r, (q0, k0, p0, q1, k1), tflags, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, N_TILES, GRID0,
                q_smem.shape[3], 2 * k_smem.shape[3])
            _bwd_load_tile(desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem,
                           lse_smem, dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, b, hk, hk // KV_DIV, G, H,
                           Nq, pad, start_n, m_lo, n_m, rot, g0, kv_n, KVB, True)
            g0 += G * n_m
            kv_n += (n_m > 0).to(gl.int32)

    @gluon.jit
    def _bwd_consumer_p(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                        do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty, tflags,
                        H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh, CU_Q,
                        CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0, PART: gl.constexpr):
        """The persistent build's consumer warp group ``PART``: ``_bwd_consumer`` over the loader's key blocks
        (``_bwd_loader_p``), ring steps and K/V buffer pairs counted as it counts them."""
        KVB: gl.constexpr = tflags.shape[5]
        g0 = 0
        kv_n = 0
        q0, k0, p0, q1, k1 = _bwd_first(tflags, H, G, CU_Q, CU_K, CU_P, N_TILES, GRID0)
        for r in range(gl.cdiv(N_TILES, gl.num_programs(0))):
            b, hk, start_n, m_lo, n_m, rot, Nq_s, Nk_s, off_s, pad, q0, k0, p0, q1, k1 = _bwd_round(
                r, (q0, k0, p0, q1, k1), tflags, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, N_TILES, GRID0,
                q_smem.shape[3], ds_smem.shape[1])
            _bwd_consumer_tile(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem,
                               q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty,
                               do_empty, b, hk, G, H, start_n, m_lo, n_m, rot, Nq_s, Nk_s, off_s, win_off, qk_scale,
                               sm_scale, SLOPES, stride_sb, stride_sh, Nq, pad, DK, DV, stride_dkh, stride_dkn, PART,
                               tflags.shape[0] == 2, g0, kv_n, KVB, True)
            g0 += G * n_m
            kv_n += (n_m > 0).to(gl.int32)
        tma.store_wait(0)  # (the last dQ additions' reads of their staging tiles)

    @gluon.jit
    def _bwd_consumer_p0(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                         do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                         tflags, H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh,
                         CU_Q, CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0):
        _bwd_consumer_p(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                        do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                        tflags, H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh,
                        CU_Q, CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0, 0)

    @gluon.jit
    def _bwd_consumer_p1(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                         do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                         tflags, H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh,
                         CU_Q, CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0):
        _bwd_consumer_p(desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                        do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty,
                        tflags, H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh,
                        CU_Q, CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0, 1)

    @gluon.jit
    def _bwd_tile_of(pid0, pid1, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, BLOCK_M: gl.constexpr,
                     BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, VARLEN: gl.constexpr, HEADS_FIRST: gl.constexpr,
                     LAST_FIRST: gl.constexpr, ROTATE: gl.constexpr, DET: gl.constexpr, DET_LAST_FIRST: gl.constexpr,
                     pre=None):
        """The key block of program (pid0, pid1) of ``_attn_bwd_gluon_ws``'s grid (the persistent build's tile
        pid0 + pid1 · the grid's first axis): (b, hk, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, q_base,
        k_base, pad) — its batch and K/V head, first key, first query row and query blocks per head, the walk's
        first block, and (packed batches) its sequence's bounds, mask edge and rows' offset in the padded buffers.
        ``pre``: a packed batch's five lengths of the sequence as ``_bwd_tile_pre`` loaded them (None: loaded here)."""
        if HEADS_FIRST:  # grid (B·Hkv, key blocks): every head's first key blocks (the longest walks) start first
            pid_n = pid1
            bhk = pid0
        else:
            pid_n = pid0
            bhk = pid1
        if DET and CAUSAL and DET_LAST_FIRST and not VARLEN:  # key blocks last first: a causal dQ tile takes its
            pid_n = gl.cdiv(Nk, BLOCK_N) - 1 - pid_n  # additions in descending order (off: measurement only)
        Hkv = H // G
        b = bhk // Hkv
        hk = bhk % Hkv
        if VARLEN:  # sequence b: rows [q_base, Nq) and keys [k_base, Nk) of the packed tensors (batch 0)
            if pre is not None:  # (loaded a tile ahead)
                q_base, k_base, p_row, Nq, Nk = pre
                pad = p_row - q_base
            else:
                q_base = gl.load(CU_Q + b)
                k_base = gl.load(CU_K + b)
                pad = gl.load(CU_P + b) - q_base  # its rows of L₂, D and dQ tiles start at CU_P[b] (a multiple of 64)
                Nq = gl.load(CU_Q + b + 1)
                Nk = gl.load(CU_K + b + 1)
            causal_off = causal_off + Nk - Nq  # key j sees row i iff j − k_base <= i − q_base + right + len_k − len_q
            b = 0
            if CAUSAL and ((DET and DET_LAST_FIRST) or LAST_FIRST):  # the sequence's key blocks last first
                rel = gl.cdiv(Nk - k_base, BLOCK_N) - 1 - pid_n  # (programs past its last key block stay past it:
                pid_n = gl.where(rel >= 0, rel, pid_n)  # no step, no store)
        else:
            q_base = 0
            k_base = 0
            pad = 0
        start_n = k_base + pid_n * BLOCK_N
        # -- query rows that see some key of this block: [m_lo, m_end), in steps of BLOCK_M from q_base
        if CAUSAL:
            m_lo = q_base + (gl.maximum(start_n - causal_off - q_base, 0) // BLOCK_M) * BLOCK_M
        else:
            m_lo = q_base
        m_end = gl.minimum(gl.maximum(start_n + BLOCK_N - win_off, 0), Nq)  # NO_WINDOW: Nq
        n_m = gl.maximum(gl.cdiv(m_end - m_lo, BLOCK_M), 0)
        if VARLEN:  # past this sequence's keys (the grid is sized by the longest): no step, no load, no store
            n_m = gl.where(start_n < Nk, n_m, 0)
        if ROTATE:  # key blocks start their walk at different query blocks: their dQ additions spread out
            rot = pid_n % gl.maximum(n_m, 1)
        else:
            rot = 0

        return b, hk, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, q_base, k_base, pad

    @gluon.jit
    def _attn_bwd_gluon_ws(desc_q, desc_do, desc_k, desc_v, desc_dk, desc_dv, desc_dq, desc_lse, desc_dl, DQ, SEM, LSE2,
                           DELTA,
                           H, G, Nq, Nk, causal_off, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh,
                           CU_Q, CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, KV_DIV, N_TILES, GRID0, HCHUNK,
                           TAIL_LIMIT, TAIL_K, TAIL_F, TAIL_P, HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                           CONSUMER_REGS: gl.constexpr, DQ_SPLIT: gl.constexpr, DQ_ATOMIC: gl.constexpr,
                           DQ_SHARED: gl.constexpr, ROTATE: gl.constexpr, HEADS_FIRST: gl.constexpr = False,
                           DQ_LAG: gl.constexpr = 0, ABLATE: gl.constexpr = 0, ALIBI: gl.constexpr = False,
                           DQ_PERM: gl.constexpr = False, LSE_TMA: gl.constexpr = False, DET: gl.constexpr = False,
                           DET_LAST_FIRST: gl.constexpr = True, VARLEN: gl.constexpr = False,
                           ZERO_PAST: gl.constexpr = False, LAST_FIRST: gl.constexpr = False,
                           DET_ROTATE: gl.constexpr = False, WRITER_REGS: gl.constexpr = 48,
                           EARLY_TURN: gl.constexpr = False, PERSIST: gl.constexpr = 0,
                           SNAKE: gl.constexpr = False):
        """Grid (key blocks of 128, B·Hkv), or the reverse with HEADS_FIRST. Descriptors over
        (B, H|Hkv, N, D) with blocks [1, 1, 64, D]; DQ (B, H, Nq, D) float32, zeroed by the caller; LSE2,
        DELTA (B, H, Nq) from the preprocessing kernel. ALIBI: SLOPES float32, head h of batch b's slope at
        b·stride_sb + h·stride_sh (else the three are None). DQ_PERM: desc_dq is over the float32 buffer of
        ``layout.dq_tiles_shape`` (dQ in tiles, each in the accumulator's register order), zeroed by the
        caller. LSE_TMA: the loader brings each step's rows of LSE2 and DELTA by TMA into the ring beside Qᵢ
        and dOᵢ (desc_lse, desc_dl: 1-D descriptors over them, blocks of 64, each head's rows padded to a
        multiple of 64: ``lse_rows``; else LSE2 and DELTA are (B, H, Nq) contiguous). DET (with DQ_PERM): SEM
        is int32, SEM_TILE0 counters of the waits and one per dQ tile, zeroed by the caller; each tile's
        additions are made in a fixed order (``_turn``; the deterministic backward; ROTATE off), by a dQ writer
        warp. VARLEN: a packed batch — q, do (1, H, total_q, D), k, v, dk, dv (1, Hkv, total_k, D), CU_Q, CU_K the
        int32 cumulative lengths, program (key block, sequence · Hkv); Nk the total keys, causal_off the mask's
        right edge (each sequence's diagonal is bottom-right aligned on its own); LSE2, DELTA and the dQ tiles
        hold each sequence's rows from CU_P[s], a multiple of 64 (``layout.packed_rows``), in Nq rows per head
        (so a query block's L₂ box and dQ tiles start 16-byte aligned, as TMA needs); the last key block of a
        sequence stores dK, dV by masked stores into DK, DV (strides stride_dkh, stride_dkn; else None). With DET
        (causal) each sequence's key blocks run last first and the writer counts turns in them.
        KV_DIV: programs per K/V head (``kv_split``): H // G heads of dK, dV, program head hk reading K, V head
        hk // KV_DIV of desc_k, desc_v (1: the same heads).
        PERSIST > 0 (not with DET, ZERO_PAST or ablations): the persistent build — a grid of P programs, each taking
        the key blocks p, p + P, ... of the N_TILES programs the grid above would launch (block pid0 + pid1·GRID0:
        the same numbering), with PERSIST K/V buffer pairs (2: the next block's K and V load under the current
        block's steps; 1: once its last dQ products have read K); the Q/dO ring and the dSᵀ ring run on from block
        to block, and dK, dV go out by masked stores from registers into DK, DV (strides stride_dkh, stride_dkn,
        dense calls too). SNAKE: the tiles dealt out every other round in reverse (``_bwd_tile_index``).
        HCHUNK (an int; constexpr None: off; dense calls numbered key blocks first, not persistent): the programs
        numbered in chunks of HCHUNK heads (the grid's second axis), inside a chunk key block by key block, every head
        of the chunk at each (``head_chunk``): under a causal mask the longest walks of a chunk start first, so the
        last chunk's long walks do not start last, while a wave still reads the Q, dO and dQ rows of a few heads only.
        The last wave's key blocks cut into pieces (``tail_pieces``; dense calls numbered key blocks first, not
        persistent, deterministic or packed, HCHUNK None) take two launches. TAIL_LIMIT (an int; constexpr None: off):
        the grid above, its programs from TAIL_LIMIT on (lin = pid0 + pid1 · key blocks) walking nothing (they store
        zeros, overwritten after). TAIL_F (an int; constexpr None: off): the pieces' build, a 1-D grid of R · TAIL_P
        programs, program j piece s = j mod TAIL_P of key block TAIL_F + j // TAIL_P, walking query blocks
        [⌊s·n/TAIL_P⌋, ⌊(s + 1)·n/TAIL_P⌋) of its n of every head of its group from the first (no rotation), its float32
        dK (unscaled) and dV into TAIL_K (TAIL_P, R, 2, 128, D) at [s, block − TAIL_F] (``layout.sum_tail_pieces``
        adds them up). Two launches, not one grid of both: a build that gives the pieces' buffer and slot to its
        consumers moves their loops' bookkeeping from the uniform datapath to vector registers (sm_90, triton 3.6),
        and at D = 64 its cut grid ran slower than the uncut one (``benchmarks/NOTES-prefill.md``, v50).
        Two consumer warp groups of 4 warps (64 keys each), one loader warp and (DET) one writer warp."""
        NC: gl.constexpr = 2
        SUB_N: gl.constexpr = 64
        BLOCK_M: gl.constexpr = desc_q.block_type.shape[2]  # query rows per step: 64, or 128 (``block_m``)
        gl.static_assert((BLOCK_M == 64) or ((BLOCK_M == 128) and not DET and not ALIBI and not DQ_ATOMIC
                                             and DQ_PERM and (DQ_LAG == 0)),
                         "128-row query blocks: no deterministic, ALiBi, atomic or lagged build")
        BLOCK_N: gl.constexpr = NC * SUB_N
        dtype: gl.constexpr = desc_q.dtype
        nq_rows = Nq  # a head's rows of L₂, D and the dQ buffer (packed batches: padded, as CU_P sets out)
        Nk0 = Nk  # (the kernel's arguments, before the program's block narrows them: the persistent partitions')
        causal_off0 = causal_off
        pid0 = gl.program_id(0)
        pid1 = gl.program_id(1)
        if HCHUNK is not None:  # program (pid0, pid1) in launch order, lin, is key block r // gc of head c·HCHUNK + r % gc
            n_kb = gl.num_programs(0)  # (chunk c, r = lin − c·span; gc the chunk's heads, fewer in a last short chunk)
            span = HCHUNK * n_kb
            lin = pid0 + pid1 * n_kb
            c = lin // span
            r = lin - c * span
            gc = gl.minimum(HCHUNK, gl.num_programs(1) - c * HCHUNK)
            pid0 = r // gc
            pid1 = c * HCHUNK + (r - pid0 * gc)
        if TAIL_F is not None:  # the pieces' build: program j is piece j mod TAIL_P of key block TAIL_F + j // TAIL_P
            n_kb = gl.cdiv(Nk, BLOCK_N)
            tile = TAIL_F + pid0 // TAIL_P
            piece = pid0 % TAIL_P
            pid0 = tile % n_kb
            pid1 = tile // n_kb
        b, hk, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, q_base, k_base, pad = _bwd_tile_of(
            pid0, pid1, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, CU_P, BLOCK_M, BLOCK_N,
            CAUSAL, VARLEN, HEADS_FIRST, LAST_FIRST, ROTATE, DET, DET_LAST_FIRST)
        if TAIL_LIMIT is not None:  # the whole programs' launch: key blocks from TAIL_LIMIT on are the pieces' (no step;
            n_m = gl.where(pid0 + pid1 * gl.num_programs(0) < TAIL_LIMIT, n_m, 0)  # their zeros overwritten after)
        if TAIL_F is not None:  # piece s of a cut block: its share of the query blocks, from the first
            lo = piece * n_m // TAIL_P
            m_lo = m_lo + lo * BLOCK_M
            n_m = (piece + 1) * n_m // TAIL_P - lo
            rot = 0
            # (the consumers' DK, stride_dkh: the pieces' buffer and this piece's slot in it)
            out_k, out_v, out_at = TAIL_K, None, piece * (gl.num_programs(0) // TAIL_P) + tile - TAIL_F
        else:
            out_k, out_v, out_at = DK, DV, stride_dkh

        gl.static_assert((PERSIST == 0) or ((PERSIST <= 2) and not DET and not ZERO_PAST and (ABLATE == 0)),
                         "the persistent backward: 1 or 2 K/V buffer pairs, no deterministic order, ZERO_PAST or ablation")
        KVB: gl.constexpr = 1 if PERSIST == 0 else PERSIST  # K/V buffer pairs
        k_smem = gl.allocate_shared_memory(dtype, [KVB * NC, 1, 1, SUB_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [KVB * NC, 1, 1, SUB_N, HEAD_D], desc_v.layout)
        q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], desc_q.layout)
        do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], desc_do.layout)
        if LSE_TMA:  # each ring slot's L₂ and Dᵢ rows
            lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], desc_lse.layout)
            dl_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], desc_dl.layout)
        else:  # (unused, but for their shape: LSE_TMA's flag)
            lse_smem = gl.allocate_shared_memory(gl.float32, [1, 4], desc_lse.layout)
            dl_smem = lse_smem
        ds_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        NSLOT: gl.constexpr = 2 + 2 * (DQ_LAG > 0)  # the dSᵀ ring: two steps, or four with a lagged dQ
        ds_smem = gl.allocate_shared_memory(dtype, [NSLOT, NC * SUB_N, BLOCK_M], ds_layout)
        NBUF: gl.constexpr = NC * DQ_SPLIT * (1 + DQ_SHARED)  # dQ staging tiles
        # ready, free (the dSᵀ ring); DET: full, empty (the dQ staging tiles, between consumers and writer)
        ds_bars = gl.allocate_shared_memory(gl.int64, [2 * NSLOT + 2 * NBUF * DET, 1], mbarrier.MBarrierLayout())
        # K/V ready (PERSIST: one per buffer pair, then one per pair for "free": both consumers are done with it)
        kv_bar = gl.allocate_shared_memory(gl.int64, [KVB * (1 + (PERSIST > 0)), 1], mbarrier.MBarrierLayout())
        if DQ_ATOMIC:  # (unused: the compiler drops it)
            dq_smem = gl.allocate_shared_memory(gl.float32, [NC, 8, HEAD_D], desc_dq.layout)
        elif DQ_PERM:  # the same tiles in register order: (BLOCK_M · columns / 32) rows of 32
            dq_smem = gl.allocate_shared_memory(gl.float32, [NC * DQ_SPLIT * (1 + DQ_SHARED),
                                                             (BLOCK_M // 32) * HEAD_D // (DQ_SPLIT * (1 + DQ_SHARED)),
                                                             32], desc_dq.layout)
        else:  # each warp group's dQ tile (in DQ_SPLIT column slices) on its way to the TMA reduction
            dq_smem = gl.allocate_shared_memory(gl.float32, [NC * DQ_SPLIT * (1 + DQ_SHARED), BLOCK_M,
                                                             HEAD_D // (DQ_SPLIT * (1 + DQ_SHARED))],
                                                desc_dq.layout)
        flags = gl.allocate_shared_memory(gl.int8, [DQ_SPLIT, (1 + DQ_ATOMIC) << (2 * DQ_SHARED), 1 << ABLATE,
                                                    1 << DQ_LAG, 1 + ALIBI,
                                                    (1 + (DQ_PERM and not DQ_ATOMIC)) * (1 + (DET and DQ_PERM and not DQ_ATOMIC))
                                                    * (1 + (DET and DET_ROTATE) + 3 * (DET and EARLY_TURN and not DET_ROTATE)),
                                                    (1 + VARLEN) * (1 + (VARLEN and ZERO_PAST))],
                                          gl.SwizzledSharedLayout(1, 1, 1, [6, 5, 4, 3, 2, 1, 0]))
        q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        do_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(KVB):
            mbarrier.init(kv_bar.index(i), count=1)
            if PERSIST > 0:
                mbarrier.init(kv_bar.index(KVB + i), count=NC)
        for i in gl.static_range(NSLOT):
            mbarrier.init(ds_bars.index(i), count=NC)  # "ready": each warp group wrote its half
            if DQ_SHARED:  # "free": the readers' dQ products are done
                mbarrier.init(ds_bars.index(NSLOT + i), count=NC)
            else:
                mbarrier.init(ds_bars.index(NSLOT + i), count=1)
        if DET:
            for i in gl.static_range(2 * NBUF):
                mbarrier.init(ds_bars.index(2 * NSLOT + i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(do_ready.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=NC)  # one arrival per consumer warp group
            mbarrier.init(do_empty.index(i), count=NC)

        consumer_args = (desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ds_bars, flags,
                         kv_bar, q_ready, do_ready, q_empty, do_empty,
                         b, hk, G, H, start_n, m_lo, n_m, rot, Nq, Nk, causal_off, win_off, qk_scale, sm_scale,
                         SLOPES, stride_sb, stride_sh,  # (None without ALiBi: no arguments of the partitions)
                         nq_rows, pad, out_k, out_v, out_at, stride_dkn)  # (the last four None unless VARLEN, PERSIST or TAIL_F)
        loader_args = (desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                       dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, b, hk, hk // KV_DIV, G, H, nq_rows, pad,
                       start_n, m_lo, n_m, rot)
        if VARLEN:  # the writer in the sequence's own key blocks and the padded rows' tiles (m0 + pad, nq_rows)
            writer_args = (desc_dq, SEM, dq_smem, ds_smem, ds_bars, 0, hk, G, H, nq_rows, Nk - k_base, start_n - k_base,
                           m_lo + pad, n_m, causal_off - pad - k_base, win_off, flags, rot, q_base + pad, Nq + pad)
        else:
            writer_args = (desc_dq, SEM, dq_smem, ds_smem, ds_bars, b, hk, G, H, Nq, Nk, start_n, m_lo, n_m,
                           causal_off, win_off, flags, rot, 0, Nq)
        # a partition's arguments lose their constexpr-ness: the key slice and the mask are baked into wrappers
        if PERSIST > 0:  # (the switches the partitions need, in a small buffer's shape)
            tflags = gl.allocate_shared_memory(gl.int8, [1 + CAUSAL, 1 + VARLEN, 1 + HEADS_FIRST, 1 + LAST_FIRST,
                                                         1 + ROTATE, KVB, 1 + SNAKE],
                                               gl.SwizzledSharedLayout(1, 1, 1, [6, 5, 4, 3, 2, 1, 0]))
            p_args = (desc_dk, desc_dv, desc_dq, DQ, SEM, LSE2, DELTA, lse_smem, dl_smem, k_smem, v_smem, q_smem,
                      do_smem, ds_smem, dq_smem, ds_bars, flags, kv_bar, q_ready, do_ready, q_empty, do_empty, tflags,
                      H, G, nq_rows, Nk0, causal_off0, win_off, qk_scale, sm_scale, SLOPES, stride_sb, stride_sh, CU_Q,
                      CU_K, CU_P, DK, DV, stride_dkh, stride_dkn, N_TILES, GRID0)
            pl_args = (desc_q, desc_do, desc_k, desc_v, desc_lse, desc_dl, k_smem, v_smem, q_smem, do_smem, lse_smem,
                       dl_smem, kv_bar, q_ready, do_ready, q_empty, do_empty, tflags, H, G, nq_rows, Nk0, causal_off0,
                       win_off, CU_Q, CU_K, CU_P, KV_DIV, N_TILES, GRID0)
            gl.warp_specialize([(_bwd_consumer_p0, p_args), (_bwd_consumer_p1, p_args), (_bwd_loader_p, pl_args)],
                               [4, 1], [CONSUMER_REGS, 24])
        elif DET and CAUSAL:  # a fourth partition: the dQ writer warp
            gl.warp_specialize([(_bwd_consumer_0_causal, consumer_args), (_bwd_consumer_1_causal, consumer_args),
                                (_bwd_loader, loader_args), (_bwd_dq_writer_causal, writer_args)], [4, 1, 1],
                               [CONSUMER_REGS, 24, WRITER_REGS])
        elif DET:
            gl.warp_specialize([(_bwd_consumer_0_full, consumer_args), (_bwd_consumer_1_full, consumer_args),
                                (_bwd_loader, loader_args), (_bwd_dq_writer_full, writer_args)], [4, 1, 1],
                               [CONSUMER_REGS, 24, WRITER_REGS])
        elif CAUSAL:
            gl.warp_specialize([(_bwd_consumer_0_causal, consumer_args), (_bwd_consumer_1_causal, consumer_args),
                                (_bwd_loader, loader_args)], [4, 1], [CONSUMER_REGS, 24])
        else:
            gl.warp_specialize([(_bwd_consumer_0_full, consumer_args), (_bwd_consumer_1_full, consumer_args),
                                (_bwd_loader, loader_args)], [4, 1], [CONSUMER_REGS, 24])


SMEM_LIMIT = 227 * 1024  # shared memory of one Hopper thread block
# Causal backward on an H200 (benchmarks/data/bwd-gluon-ablation-h200-run5.json): numbering the programs head
# first took a GQA 32/8 layer at 8K (512 programs, 3.9 per SM) from 2.13 to 1.80 ms, but cost 4-19 % with
# 2048-4096 programs (MHA at 4K and 16K), where key blocks first keeps one head's Q and dO in L2. Head
# first below this many programs per SM (between the two):
HEADS_FIRST_WAVES = 8
# Causal calls (no window) of GQA layers that would be numbered heads first are numbered key blocks first in chunks of
# (batch · K/V head) units instead (``l2_chunk``): the largest chunks whose rows in flight fit in L2_CHUNK_MB, as evenly
# balanced as the list schedule of their walks allows. Heads first, a wave of programs walks every head's rows at once:
# in the model of benchmarks/bwd_l2_sim.py (LRU over the H200's 50 MB L2) the GQA rows of the prefill table move
# 4.3-16x the bytes of reading each Q, dO and dQ tile once, against 1.0-1.4x in such chunks, at a balance at most
# 0.8 % worse. Measured on an H200 (benchmarks/bwd_block_m.py, the backward alone, bwd-block-m runs 20 and 21): the
# GQA causal rows at 1.040-1.101x heads first's speed. The multi-head rows measured beside them have 8 or more
# programs per SM, numbered key blocks first with or without the switch (their 0.981-1.014x is the spread between two
# arms of the same launches); no multi-head call numbered heads first has been measured, so the numbering takes calls
# of L2_CHUNKS_MIN_GROUP or more query heads per K/V head only
L2_CHUNKS = True
L2_CHUNKS_MIN_GROUP = 2
L2_CHUNK_MB = 34
L2_CHUNK_SLACK = 0.05  # the most a chunked numbering's balance may exceed heads first's (list-schedule model)


def sem_stats(sem: torch.Tensor) -> dict[str, int]:
    """What the deterministic backward's counters (``gluon_backward(..., _sem_out=)``) say about a call: waits
    that gave up (``given_up``: 0 unless the order could not be kept), waits that had to poll for their
    turn (``waits``) and their polls together (``polls``; one poll is a round trip to L2, under a µs), and
    the dQ tile additions made (``additions``, each tile's counter ends at its number of key blocks)."""
    c = sem.to("cpu", torch.int64)
    return {"given_up": int(c[SEM_GIVEN_UP]), "waits": int(c[SEM_WAITS]), "polls": int(c[SEM_POLLS]),
            "additions": int(c[SEM_TILE0:].sum())}


def lse_rows(Nq: int) -> int:
    """Rows per head of the L₂ and Dᵢ buffers the kernel reads: Nq rounded up to whole query blocks where
    its loader brings them by TMA (``LSE_BY_TMA``: every block's 64 rows at a 16-byte aligned start, none
    past the buffer), else Nq."""
    return -(-Nq // BWD_BLOCK_M) * BWD_BLOCK_M if LSE_BY_TMA else Nq


def _rows_of(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x (B, H, Nq) float32 as a (B, H, rows) buffer whose first Nq rows per head are x's: the buffer x is a
    view of (``prefill_backward`` allocates so), or else a padded copy (rows past Nq left unset)."""
    B, H, Nq = x.shape
    if rows == Nq:
        return x.contiguous()
    if (x.stride() == (H * rows, rows, 1) and x.storage_offset() == 0
            and x.untyped_storage().nbytes() >= B * H * rows * x.element_size()):
        return x.as_strided((B, H, rows), (H * rows, rows, 1))
    buf = torch.empty((B, H, rows), dtype=x.dtype, device=x.device)
    buf[..., :Nq] = x
    return buf


def det_kv_split(group: int, causal: bool = True, kv_bytes: int = 0) -> int:
    """``kv_split`` for a deterministic call with ``group`` query heads per K/V head and K of ``kv_bytes``
    bytes: for plain causal calls (no window, no ALiBi: what the split was measured and tested on), the largest
    divisor of ``group`` up to ``DET_KV_SPLIT`` whose programs' dK, dV (that many per K/V head) fit in
    ``DET_KV_SPLIT_BYTES``; 1 (no split) otherwise (non-causal walks are even: the ordered additions cost them
    4-9 %, not the copies' worth)."""
    if not causal:
        return 1
    return max(s for s in range(1, max(DET_KV_SPLIT, 1) + 1)
               if group % s == 0 and (s == 1 or 2 * s * kv_bytes <= DET_KV_SPLIT_BYTES))


# Causal and windowed calls numbered key blocks first (``heads_first_default`` False) take their programs in chunks of
# heads whose Q, dO and float32 dQ rows and K, V fit in this many MB, two heads at least (``head_chunk``), at head dims
# from HEAD_CHUNK_FROM_D; 0: one head after another. Measured on an H200 (benchmarks/bwd_block_m.py, the backward
# alone from CUDA graphs, arms in turns; bwd-block-m runs 13 and 14): at D = 128 causal 4 x 4K 1.037x and 1.044x
# (chunks of 5 heads), 2 x 8K 1.054x and 1.045x (2), 16K 1.041x and 1.027x (2) the plain numbering's speed; at
# D = 64 0.980-1.021x, nothing that holds: from D = 128
HEAD_CHUNK_MB = 32
HEAD_CHUNK_FROM_D = 128


def head_chunk(heads: int, group: int, n_q: int, n_k: int, head_dim: int, budget_mb: int | None = None) -> int | None:
    """Heads per chunk of the chunked numbering (``_attn_bwd_gluon_ws``'s HCHUNK) for a grid of ``heads`` (batch · K/V
    head) programs per key block, each walking ``group`` query heads of ``n_q`` rows over ``n_k`` keys at
    ``head_dim``: as many heads as ``budget_mb`` (None: ``HEAD_CHUNK_MB``) holds of their Q and dO (bf16), dQ's
    float32 rows and K, V — what a wave of programs reads again and again — and two at least. None (the plain
    numbering) where the grid has one head or the budget is 0. In a list schedule of the causal walks
    (``benchmarks/det_order_sim.py``'s model, 132 SMs) one head at a time ends 5.9 % past a perfect balance at 2 x 8K,
    D = 128, two heads 0.7 %."""
    budget = (HEAD_CHUNK_MB if budget_mb is None else budget_mb) * (1 << 20)
    if budget <= 0:
        return None
    per_head = group * n_q * head_dim * (2 + 2 + 4) + 2 * n_k * head_dim * 2
    chunk = min(heads, max(2, budget // per_head))
    return int(chunk) if chunk > 1 else None


def walks_balance(units: int, n_kb: int, steps, chunk: int | None, sms: int) -> float:
    """The list schedule's makespan over a perfect balance (``benchmarks/det_order_sim.py``'s model) of ``units`` ×
    ``n_kb`` programs, key block n's walk ``steps(n)`` steps, numbered heads first (``chunk`` None: every unit's key
    block n before any unit's n + 1) or key blocks first in chunks of ``chunk`` units (the kernel's HCHUNK order)."""
    import heapq

    if chunk is None:
        order = [n for n in range(n_kb) for _ in range(units)]
    else:
        order = [n for c in range(0, units, chunk) for n in range(n_kb) for _ in range(min(chunk, units - c))]
    free = [0] * max(1, sms)
    total = 0
    for n in order:
        w = steps(n)
        total += w
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free) * len(free) / total if total else 1.0


def l2_chunk(units: int, group: int, n_q: int, n_k: int, head_dim: int, sms: int,
             budget_mb: int | None = None) -> int | None:
    """``L2_CHUNKS``' numbering for a causal call (diagonal bottom-right, no window) of ``units`` (batch · K/V head)
    programs per key block, each walking ``group`` query heads of ``n_q`` rows one after another over ``n_k`` keys:
    the chunk of units (HCHUNK; 1 the plain key-blocks-first order) for key blocks first, or None to stay heads first.
    A unit's rows in flight are two query heads' Q, dO (bf16) and dQ (float32) rows (its walk passes from one head to
    the next while the programs of other key blocks are still on the last); the chunk is the one of 1, 2, 4, ...
    units whose rows fit in ``budget_mb`` (None: ``L2_CHUNK_MB``) with the best balance (``walks_balance``; the smaller
    chunk on a tie), taken when that balance is within ``L2_CHUNK_SLACK`` of heads first's."""
    budget = (L2_CHUNK_MB if budget_mb is None else budget_mb) << 20
    per_unit = 2 * n_q * head_dim * (2 + 2 + 4)
    n_kb = -(-n_k // (2 * BWD_SUB_N))
    n_qb = -(-n_q // BWD_BLOCK_M)
    off = n_k - n_q  # key j sees row i iff j <= i + off

    def steps(n):
        lo = max(n * 2 * BWD_SUB_N - off, 0) // BWD_BLOCK_M
        return group * max(n_qb - lo, 0)

    cap = min(units, budget // per_unit)
    if cap < 1 or units < 2:
        return None
    chunks = [1 << i for i in range(cap.bit_length()) if (1 << i) <= cap]
    scored = [(round(walks_balance(units, n_kb, steps, c, sms), 3), c) for c in chunks]
    best, chunk = min(scored)
    if best > walks_balance(units, n_kb, steps, None, sms) * (1 + L2_CHUNK_SLACK):
        return None
    return chunk


def l2_numbering(units: int, group: int, n_q: int, n_k: int, head_dim: int, sms: int, causal_off: int | None,
                 win_off: int | None) -> int | None:
    """The chunk of units (``l2_chunk``) in which a call the library would number heads first is numbered key blocks
    first instead, or None to keep heads first: only with ``L2_CHUNKS`` on, for a causal call whose diagonal is the
    bottom-right one and no window, of at least ``L2_CHUNKS_MIN_GROUP`` query heads per K/V head."""
    if (not L2_CHUNKS or group < max(1, L2_CHUNKS_MIN_GROUP) or causal_off is None or causal_off != n_k - n_q
            or win_off is not None):
        return None
    return l2_chunk(units, group, n_q, n_k, head_dim, sms)


def heads_first_default(uneven: bool, programs: int, sms: int, deterministic: bool = False) -> bool:
    """Number the programs head first? Only where the walks are uneven (causal or windowed calls) and
    there are fewer than ``HEADS_FIRST_WAVES`` programs per SM: then the longest walks must not start last.
    Never for deterministic calls: each writer waits for its additions' round trips, and numbered head
    first a wave adds into every head's dQ tiles, more than L2 holds (bwd-dq-layout run 8: 0.57-0.69x the
    default backward on the causal rows head first, 0.78-0.94x head by head)."""
    return not deterministic and uneven and programs < HEADS_FIRST_WAVES * sms


def tail_pieces(programs: int, sms: int, steps: int, blocks: int, head_dim: int) -> tuple[int, int, int] | None:
    """How a grid of ``programs`` equal key-block programs of ``steps`` steps each (``blocks`` query blocks per head) on
    ``sms`` SMs, one program at a time each, cuts its last wave (``TAIL_PIECES``): (F, R, P) — the first F programs
    whole, the R = programs mod sms left over each cut into P pieces of whole query blocks — or None where nothing is
    cut (no partial wave, ``TAIL_PIECES`` off, or ``cost.tail_split`` saving less than ``TAIL_MIN_SAVING`` with
    ``TAIL_PIECE_STEPS`` steps of overhead a piece, within ``TAIL_MAX_PARTS`` pieces, ``blocks`` and ``TAIL_MAX_MB``
    of float32 partial dK and dV)."""
    from ..cost.grid import tail_split

    if not TAIL_PIECES or programs < 1 or steps < 1 or sms < 1:
        return None
    tail = programs % sms
    if tail == 0:
        return None
    cap = min(TAIL_MAX_PARTS, blocks, (TAIL_MAX_MB << 20) // (tail * 2 * 2 * BWD_SUB_N * head_dim * 4))
    if cap < 2:
        return None
    cut = tail_split(programs=programs, sms=sms, max_parts=cap, overhead=TAIL_PIECE_STEPS / steps)
    if cut.parts < 2 or cut.saving < TAIL_MIN_SAVING:
        return None
    return programs - tail, tail, cut.parts


def smem_bytes(head_dim: int, stages: int, dq_split: int = 1, dq_atomic: bool = False, dq_lag: int = 0,
               lse_tma: bool | None = None, block_m: int = BWD_BLOCK_M, kv_bufs: int = 1) -> int:
    """Shared memory of the backward: K and V of the block (``kv_bufs`` pairs: the persistent build's), the
    Q/dO ring (with ``lse_tma``, default ``LSE_BY_TMA``, each slot's float32 L₂ and Dᵢ rows), the dSᵀ ring (two
    tiles, four with a lagged dQ) and (dQ by TMA reduction) each consumer's float32 dQ tile."""
    D = head_dim
    ds_slots = 2 if dq_lag == 0 else 4
    lse = (LSE_BY_TMA if lse_tma is None else lse_tma) * 2 * stages * block_m * 4
    return (kv_bufs * 2 * 2 * BWD_SUB_N * D * 2 + 2 * stages * block_m * D * 2 + ds_slots * 2 * BWD_SUB_N * block_m * 2
            + (0 if dq_atomic else 2 * block_m * D * 4) + lse)


def _check_tiles(head_dim: int, stages: int, dq_split: int, dq_atomic: bool = False,
                 dq_shared: bool = False, consumer_regs: int = BWD_CONSUMER_REGS, dq_lag: int = 0,
                 block_m: int = BWD_BLOCK_M, deterministic: bool = False, alibi: bool = False,
                 dq_perm: bool = True, persistent: int = 0) -> None:
    if block_m not in (64, 128):
        raise ValueError(f"the Gluon backward takes block_m 64 or 128 (query rows per step), got {block_m!r}")
    if block_m == 128 and (deterministic or alibi or dq_atomic or dq_lag or not dq_perm):
        raise ValueError("the Gluon backward takes 128-row query blocks without deterministic order, ALiBi, dQ "
                         "atomics or dq_lag, with dQ in register-order tiles")
    if dq_lag not in (0, 1, 2):
        raise ValueError(f"the Gluon backward takes dq_lag 0, 1 or 2 (steps between a dSᵀ and its dQ product), "
                         f"got {dq_lag}")
    if consumer_regs % 8 or not 24 <= consumer_regs <= BWD_MAX_CONSUMER_REGS:
        raise ValueError(f"the Gluon backward takes consumer_regs, a multiple of 8 from 24 to {BWD_MAX_CONSUMER_REGS} "
                         f"(two warp groups of them and the loader's at 24 fill a register file), got {consumer_regs}")
    if dq_shared and dq_split != 1:
        raise ValueError(f"the Gluon backward takes dq_split 1 with dq_shared (got {dq_split}): each warp group "
                         "already makes half of D's columns")
    if stages not in (1, 2, 3) or dq_split not in (1, 2, 4) or head_dim // dq_split < 32:
        raise ValueError("the Gluon backward takes stages 1, 2 or 3 (the Q/dO ring) and dq_split 1, 2 or 4 with "
                         f"head_dim / dq_split >= 32; got stages={stages}, dq_split={dq_split}, head_dim={head_dim}")
    if persistent not in (0, 1, 2) or (persistent and (deterministic or dq_atomic)):
        raise ValueError("the Gluon backward's persistent build takes 1 or 2 K/V buffer pairs (0: off), without "
                         f"deterministic order or dQ atomics; got persistent={persistent!r}")
    need = smem_bytes(head_dim, stages, dq_split, dq_atomic, dq_lag, block_m=block_m, kv_bufs=max(persistent, 1))
    if need > SMEM_LIMIT:
        raise ValueError(f"the Gluon backward takes fewer stages (or no dq_lag) at head_dim {head_dim}: stages={stages}"
                         f"{', dQ by TMA' if not dq_atomic else ''}{f', dq_lag={dq_lag}' if dq_lag else ''}"
                         f"{f', persistent={persistent}' if persistent else ''} need "
                         f"{need // 1024} KB of shared memory, more than a block has")


def gluon_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse2: torch.Tensor,
                   delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, *,
                   causal_off: int | None, scale: float, stages: int = 2, dq_split: int = 1,
                   dq_atomic: bool = False, dq_shared: bool = False, rotate: bool | None = None,
                   heads_first: bool | None = None, win_off: int | None = None,
                   consumer_regs: int = BWD_CONSUMER_REGS, dq_lag: int = 0, slopes: torch.Tensor | None = None,
                   deterministic: bool = False, cu_seqlens: tuple[torch.Tensor, torch.Tensor] | None = None,
                   max_seqlen_k: int | None = None, max_seqlen_q: int | None = None, cu_rows: torch.Tensor | None = None,
                   kv_split: int = 1, _ablate: int = 0, _sem_out: list | None = None,
                   _det_last_first: bool = True, _kv_div: int = 1, _last_first: bool = False,
                   block_m: int = BWD_BLOCK_M, persistent: int = 0) -> _BwdPlan | None:
    """Run the Gluon backward: q, do (B, H, Nq, D); k, v (B, Hkv, Nk, D); ``lse2``, ``delta`` (B, H, Nq)
    float32 from ``prefill_bwd``'s preprocessing kernel (L in log2 units, +inf on empty rows; D_i), read
    without a copy where they are views of (B, H, ``lse_rows(Nq)``) buffers, as that kernel writes them. Writes
    dq (like q), dk, dv (like k, v; contiguous) in place. ``causal_off``/``win_off`` as in
    ``prefill_gluon.gluon_forward``. ``stages``: depth of the Q/dO ring. dQ by TMA bulk reductions, or by
    float32 atomics with ``dq_atomic``; ``dq_split`` > 1: the dQ product in that many column slices, each
    added on its own (fewer registers live at once). ``dq_shared``: both warp groups make every step's dQ
    product, half of D's columns each (instead of whole products in turns). ``heads_first``: programs
    numbered head first, so that every head's first key blocks (under a causal mask, the longest walks)
    start before any head's last (None: ``heads_first_default``, as measured). ``rotate``: key blocks
    start at staggered query blocks (None: for TMA reductions only, as measured). ``consumer_regs``: the
    consumer warp groups' register budget (setmaxnreg; a multiple of 8 up to ``BWD_MAX_CONSUMER_REGS``).
    ``dq_lag``: a step's dQ product is made that many steps after its dSᵀ (a ring of four dSᵀ tiles), so a
    warp group never waits for the other's half of the current step (sweep 16: +2 to +8 % at D = 64 non-causal). ``slopes``:
    ALiBi, (H,) or (B, H) float32 on q's device: head h's scores lose slope_h·|i + Nk − Nq − j| (bottom-right,
    as the masks; the forward's ``lse`` must include the bias; the slopes get no gradient); with a causal
    right edge only at the diagonal (``causal_off == Nk − Nq``). ``deterministic``: every dQ tile takes its
    additions in a fixed order (a counter per tile: each key block waits for its turn), so the gradients
    are bit-identical run to run (with the register-order dQ tiles, ``DQ_PERMUTED``, and TMA reductions;
    ``_sem_out``, a list, receives the counters: ``sem_stats`` reads them; ``_det_last_first`` False,
    measurement only: causal key blocks launched first first, so a turn may wait for a program launched
    after it, which is safe only while one head's key blocks all fit on the GPU at once). ``cu_seqlens``: a
    packed batch, (cu_q, cu_k) int32 cumulative lengths on q's device, with q, do (1, H, total_q, D) and k, v,
    dk, dv (1, Hkv, total_k, D) (``prefill_bwd.packed_as_bhnd`` views), ``max_seqlen_q``, ``max_seqlen_k`` the
    longest sequence's rows and keys (the grids), ``causal_off`` the mask's right edge (None: no causal mask;
    each sequence's diagonal bottom-right aligned on its own), ``cu_rows`` the sequences' padded row starts
    (``layout.packed_rows``), lse2 and delta (1, H, rows) with each sequence's rows from there (rows a
    multiple of 64, as ``prefill_bwd``'s preprocessing kernel writes them); no window, ALiBi or dQ atomics, and
    ``deterministic`` with ``_det_last_first`` only. ``block_m``: query rows per step, 64 or 128 (128: fewer, wider
    products per key block — Sᵀ and dPᵀ of 64 keys × 128 rows a warp group —, no deterministic, ALiBi, dQ atomics or
    ``dq_lag``; dQ still added in 64-row tiles; under triton 3.6 its build spills and it ran at 0.70-0.99x the 64-row
    build on an H200, so no table entry takes it: ``benchmarks/RESULTS.md``, "Bwd-block-m runs 1–5"). ``persistent``
    (1 or 2; not for deterministic calls, which keep their own build): one program per SM, each walking key block
    after key block, with that many K/V buffer pairs (2, where shared memory allows: the next block's K and V load
    under the current block's steps), dK and dV stored from registers; measured at 0.78-1.05x the table's backward on
    16K-token rows (gaining only on documents of 128 at D = 64), so no table entry takes it (``benchmarks/RESULTS.md``,
    "Bwd-block-m runs 7–9"). Non-causal calls without a window, ALiBi, packed batch or deterministic order cut the
    grid's last, partial wave into pieces from ``TAIL_FROM_D`` on (``tail_pieces``, ``TAIL_PIECES``). ``kv_split`` > 1
    (dividing H / Hkv; not with packed batches): each K/V head read by that
    many programs of H / (Hkv · kv_split) query heads each, their dK, dV summed in a fixed order into dk, dv
    (so shorter walks, twice or more the programs; bit-identical run to run with ``deterministic``; dK, dV
    rounded twice, once per program and once for the sum: ``layout.sum_head_copies``). ``_kv_div`` (what a split
    call runs): dk, dv have ``_kv_div`` heads per head of k, v, and head h of dk, dv is made from K/V head
    h // ``_kv_div`` and query heads h·G' to (h + 1)·G' − 1, G' = H / dk's heads.
    ``_ablate`` (measurement only, wrong gradients): leave stages out, as
    ``benchmarks/bwd_gluon_ablation.py`` lists; 8 (deterministic builds): the writer adds each dQ tile without
    waiting for its turn (right gradients, in no fixed order). ``_last_first`` (measurement only; packed causal
    batches): each sequence's key blocks last first, as the deterministic build launches them. No input checks
    beyond the tiles (``gluon_supported`` and the public entry points do them). Returns the call's kept plan (``_BwdPlan``: what a later call of the
    same signature runs), or None where it keeps none."""
    causal_off, win_off = clamp_edges(causal_off, win_off)
    B, H, Nq, D = q.shape
    key = None
    if kv_split == 1 and slopes is None and not _ablate and _sem_out is None and not dq_atomic and q.is_cuda:
        key = (tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(do), tensor_key(lse2), tensor_key(delta),
               tensor_key(dq), tensor_key(dk), tensor_key(dv), causal_off, scale, stages, dq_split, dq_shared, rotate,
               heads_first, win_off, consumer_regs, dq_lag, deterministic, max_seqlen_k, max_seqlen_q, block_m, persistent,
               _det_last_first, _kv_div, _last_first, TAIL_PIECES, TAIL_FROM_D, TAIL_LIMIT_ALL, TAIL_PIECE_STEPS, TAIL_MAX_PARTS, TAIL_MAX_MB, TAIL_MIN_SAVING, PERSISTENT_PROGRAMS, PERSISTENT_SNAKE, PACKED_DET_ROTATE, DET_WRITER_REGS, DET_EARLY_TURN, DQ_PERMUTED, LSE_BY_TMA, DQ_SWIZZLE, HEADS_FIRST_WAVES, ZERO_PAST,
               L2_CHUNKS, L2_CHUNKS_MIN_GROUP, L2_CHUNK_MB, L2_CHUNK_SLACK,
               torch.cuda.current_device(),
               None if cu_seqlens is None else (*map(tensor_key, cu_seqlens), tensor_key(cu_rows)))
        plan = _PLANS.get(key)
        if plan is not None and not hooks_set():
            plan.run(q, k, v, do, lse2, delta, dq, dk, dv, cu_seqlens, cu_rows)
            return plan
    if kv_split != 1:
        Hkv = k.shape[1]
        if type(kv_split) is not int or kv_split < 1 or (H // Hkv) % kv_split or cu_seqlens is not None:
            raise ValueError(f"the Gluon backward's kv_split must be a positive int dividing the {H // Hkv} query heads "
                             f"per K/V head, without packed batches; got {kv_split!r}")
        # each K/V head read in place by kv_split programs of G / kv_split query heads each (``_kv_div``), their
        # dK, dV into kv_split heads each, summed per head in a fixed order, in float32, rounded once more
        dk2, dv2 = (torch.empty((B, Hkv * kv_split, *x.shape[2:]), dtype=x.dtype, device=x.device) for x in (dk, dv))
        _split_kernel(q, k, v, do, lse2, delta, dq, dk2, dv2, causal_off=causal_off, scale=scale, stages=stages,
                      dq_split=dq_split, dq_atomic=dq_atomic, dq_shared=dq_shared, rotate=rotate,
                      heads_first=heads_first, win_off=win_off, consumer_regs=consumer_regs, dq_lag=dq_lag,
                      slopes=slopes, deterministic=deterministic, _ablate=_ablate, _sem_out=_sem_out,
                      _det_last_first=_det_last_first, _kv_div=kv_split, block_m=block_m, persistent=persistent)
        sum_head_copies(dk2, dk, kv_split)
        sum_head_copies(dv2, dv, kv_split)
        return None
    if slopes is not None and causal_off is not None and causal_off != k.shape[2] - Nq:
        raise ValueError("the Gluon backward takes ALiBi with a causal right edge at the diagonal only "
                         f"(causal_off {causal_off}, Nk − Nq {k.shape[2] - Nq}): a band past it runs the Triton kernels")
    if deterministic or _ablate or (ZERO_PAST and cu_seqlens is not None):  # (their builds are not persistent)
        persistent = 0
    if persistent and cu_seqlens is None and (dk.stride() != dv.stride() or dk.stride(3) != 1
                                               or dk.stride(0) != dk.shape[1] * dk.stride(1)):
        persistent = 0  # (its dK, dV stores take one head stride over batch and head: dk, dv as allocated)
    _check_tiles(D, stages, dq_split, dq_atomic, dq_shared, consumer_regs, dq_lag, block_m, deterministic,
                 slopes is not None, DQ_PERMUTED, persistent)
    if cu_seqlens is not None:
        if slopes is not None or win_off is not None or B != 1 or (deterministic and not _det_last_first):
            raise ValueError("the Gluon backward takes packed batches (cu_seqlens) as (1, H, total, D) views without "
                             "a window or ALiBi (those run the Triton kernels), deterministic ones with their key "
                             "blocks last first")
        if max_seqlen_k is None or max_seqlen_q is None or cu_rows is None or dk.stride() != dv.stride():
            raise ValueError("the Gluon backward's packed batches need max_seqlen_q, max_seqlen_k, cu_rows and dk, dv "
                             "of one layout")
        if dq_atomic or not DQ_PERMUTED or lse2.shape[-1] % BWD_BLOCK_M or lse2.shape != delta.shape \
                or not (lse2.is_contiguous() and delta.is_contiguous()):
            raise ValueError("the Gluon backward's packed batches add dQ in register-order tiles (no dq_atomic) from "
                             "padded contiguous (1, H, rows) L₂ and D buffers, rows a multiple of 64")
    if deterministic and (dq_atomic or dq_split != 1 or _ablate not in (0, 8) or not DQ_PERMUTED):
        raise ValueError("the Gluon backward is deterministic with dQ by TMA reductions of whole register-order tiles "
                         "only (dq_atomic=False, dq_split=1, DQ_PERMUTED, no ablation)")
    det_rotate = False
    if deterministic:  # every key block walks the query blocks in the same order: short waits for each turn (or,
        # PACKED_DET_ROTATE, staggered walks with turns in arrival order where a sequence's key blocks fit at once)
        from .decode_config import _device_sms

        det_rotate = (PACKED_DET_ROTATE and cu_seqlens is not None and causal_off is not None
                      and -(-max_seqlen_k // (2 * BWD_SUB_N)) <= _device_sms(q.device))
        rotate = det_rotate
    if rotate is None:  # measured (benchmarks/bwd_gluon_ablation.py): staggered starts help the TMA reductions
        # (+10 % causal at D = 128) and cost the atomics 2-3 % at D = 64; packed batches' short walks ran 4 % faster
        # unstaggered (benchmarks/packed_probe.py --det, run 1: 0.751 against 0.781 ms, D = 128)
        rotate = not dq_atomic and cu_seqlens is None
    Hkv, Nk = dk.shape[1], k.shape[2]  # (the programs' K/V heads: ``_kv_div`` per head of k, v)
    if dk.shape[1] != k.shape[1] * _kv_div:
        raise ValueError(f"the Gluon backward's dk has {dk.shape[1]} heads for {k.shape[1]} K/V heads split {_kv_div} "
                         "ways")
    el = gl.float16 if q.dtype == torch.float16 else gl.bfloat16

    def desc(x, rows=BWD_SUB_N):
        return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, D], nvmma_layout((1, 1, rows, D), el))

    split_d = D // (dq_split * (1 + dq_shared))  # columns of one dQ tile
    perm = DQ_PERMUTED and not dq_atomic
    # packed batches: L₂, D and dQ's tiles hold each sequence's rows from a multiple of 64 (cu_rows), in this
    # many padded rows per head; the kernel's Nq
    n_rows = Nq if cu_seqlens is None else lse2.shape[-1]
    sem = None
    if perm:  # tiles in the accumulator's register order (layout.dq_tiles_shape); rows past Nq add into padding
        dq_acc = torch.zeros(dq_tiles_shape(B, H, n_rows, D, split_d), device=q.device, dtype=torch.float32)
        if deterministic:  # a counter per tile, after three of the waits (``sem_stats``)
            sem = torch.zeros(SEM_TILE0 + dq_acc.shape[0] // (2 * split_d), device=q.device, dtype=torch.int32)
            if _sem_out is not None:
                _sem_out.append(sem)
        dq_block = [2 * split_d, 32]
        desc_dq = TensorDescriptor(dq_acc, list(dq_acc.shape), list(dq_acc.stride()), dq_block,
                                   _dq_layout(dq_block, perm=True))
    else:
        dq_acc = torch.zeros((B, H, Nq, D), device=q.device, dtype=torch.float32)
        dq_rows = dq_acc.view(B * H * Nq, D)  # a block past a head's last row adds exact zeros to the next head's
        dq_block = [BWD_BLOCK_M, split_d]
        desc_dq = TensorDescriptor(dq_rows, list(dq_rows.shape), list(dq_rows.stride()), dq_block, _dq_layout(dq_block))
    lse_tma = LSE_BY_TMA
    # each head's rows of L₂ and Dᵢ padded to whole query blocks for the TMA loads (no copy where the
    # preprocessing kernel wrote into such buffers), contiguous rows otherwise (the kernel's stride: Nq). A 1-D
    # TMA box must start 16-byte aligned (one that did not stopped an H200 on an illegal instruction): packed
    # batches come padded per sequence
    if cu_seqlens is None:
        rows = lse_rows(Nq) if lse_tma else Nq
        lse2, delta = _rows_of(lse2, rows), _rows_of(delta, rows)
    else:
        rows = n_rows
    desc_lse, desc_dl = (TensorDescriptor(x.view(-1), [x.numel()], [1], [block_m], row_layout())
                         for x in (lse2, delta))
    if cu_seqlens is None:
        grid = (-(-Nk // (2 * BWD_SUB_N)), B * Hkv)
        # (the persistent build stores dK, dV from registers, dense calls too)
        varlen = (None,) * 3 + ((dk, dv, dk.stride(1), dk.stride(2)) if persistent else (None,) * 4)
    else:  # (key blocks of the longest sequence, sequence · K/V head): programs past a sequence's keys return
        cu_q, cu_k = (c if c.dtype == torch.int32 else c.to(torch.int32) for c in cu_seqlens)
        grid = (-(-max_seqlen_k // (2 * BWD_SUB_N)), (cu_q.numel() - 1) * Hkv)
        if max(grid) > 65535:
            raise ValueError(f"the Gluon backward's grid {grid} for this packed batch has an axis past 65,535")
        cu_p = cu_rows if cu_rows.dtype == torch.int32 else cu_rows.to(torch.int32)
        varlen = (cu_q, cu_k, cu_p, dk, dv, dk.stride(1), dk.stride(2))
    defaulted = heads_first is None  # (the library's numbering, which L2_CHUNKS may change; not a caller's)
    if heads_first is None:
        from .decode_config import _device_sms

        heads_first = heads_first_default(causal_off is not None or win_off is not None, grid[0] * grid[1],
                                          _device_sms(q.device), deterministic)
    if heads_first:
        grid = grid[::-1]
    tiles = (None, None)
    hchunk = None  # (constexpr None: the build without the chunked numbering)
    if defaulted and heads_first and not persistent and not deterministic and cu_seqlens is None and L2_CHUNKS:
        from .decode_config import _device_sms

        # (grid heads first: (units, key blocks))
        chunk = l2_numbering(grid[0], H // Hkv, Nq, Nk, D, _device_sms(q.device), causal_off, win_off)
        if chunk is not None:  # key blocks first, in chunks of units (1: one unit after another)
            heads_first, grid = False, grid[::-1]
            hchunk = chunk if chunk > 1 else None
    elif (not heads_first and not persistent and not deterministic and cu_seqlens is None and D >= HEAD_CHUNK_FROM_D
            and (causal_off is not None or win_off is not None)):
        hchunk = head_chunk(grid[1], H // Hkv, Nq, Nk, D)
    if persistent:  # one program per SM (one fits: ``smem_bytes``), the grid's blocks dealt out in its order
        from .decode_config import _device_sms

        tiles = (grid[0] * grid[1], grid[0])
        grid = (max(1, min(tiles[0], PERSISTENT_PROGRAMS or _device_sms(q.device))),)
    tail, pieces = None, None
    if (TAIL_PIECES and D >= TAIL_FROM_D and cu_seqlens is None and causal_off is None and win_off is None
            and slopes is None and not deterministic and not persistent and not heads_first and hchunk is None
            and not _ablate and _kv_div == 1 and not dq_atomic):
        from .decode_config import _device_sms

        n_m = -(-Nq // block_m)
        programs = grid[0] * grid[1]  # (nothing cut: the whole programs' build all the same)
        tail = tail_pieces(programs, _device_sms(q.device), (H // Hkv) * n_m, n_m, D) or (programs, 0, 1)
    elif TAIL_LIMIT_ALL and cu_seqlens is None and not deterministic and not persistent and not _ablate:
        tail = (grid[0] * grid[1], 0, 1)
    if tail is not None:  # the last R key blocks cut in P pieces each: their partial dK, dV (R = 0: the whole
        first, n_cut, parts = tail  # programs' build, nothing cut)
        if n_cut:
            pieces = torch.empty((parts, n_cut, 2, 2 * BWD_SUB_N, D), device=q.device, dtype=torch.float32)
    if slopes is None:  # constexpr None: the non-ALiBi build takes no slope arguments
        alibi = (None, None, None)
    else:
        alibi = (slopes, 0, slopes.stride(0)) if slopes.dim() == 1 else (slopes, slopes.stride(0), slopes.stride(1))
        if causal_off is not None:  # every visible key at or before its row's diagonal j = i + Nk − Nq
            # the bias's query term, slope·log2e·(i − m0) with m0 = i rounded down to BWD_BLOCK_M, folded into
            # L₂ once (a new tensor: the caller's is left as it was); the kernel adds the key term
            sl = slopes.to(torch.float32).expand(B, H)  # (H,) or (B, H)
            pos = (torch.arange(rows, device=q.device) % BWD_BLOCK_M).to(torch.float32)
            lse2 = lse2 + (sl * LOG2E)[:, :, None] * pos
            desc_lse = TensorDescriptor(lse2.view(-1), [lse2.numel()], [1], [BWD_BLOCK_M], row_layout())
    descs = (desc(q, block_m), desc(do, block_m), desc(k), desc(v), desc(dk), desc(dv), desc_dq, desc_lse, desc_dl)
    args = (*descs, dq_acc, sem, lse2, delta, H, H // Hkv, n_rows, Nk, causal_off if causal_off is not None else 0,
            NO_WINDOW if win_off is None else win_off, scale * LOG2E, scale, *alibi, *varlen, _kv_div, *tiles, hchunk,
            None if tail is None else first, None, None, None)  # (TAIL_LIMIT, TAIL_K, TAIL_F, TAIL_P)
    with recording() as launches:
        # (the kept compiled kernel after a specialisation's first call: Triton's binding of these arguments took
        # more host time than a short call's GPU time; launch.launch_kept)
        consts = dict(
            HEAD_D=D, STAGES=stages, CAUSAL=causal_off is not None, CONSUMER_REGS=consumer_regs, DQ_SPLIT=dq_split,
            DQ_ATOMIC=dq_atomic, DQ_SHARED=dq_shared, ROTATE=rotate, HEADS_FIRST=heads_first, DQ_LAG=dq_lag,
            ABLATE=_ablate, ALIBI=slopes is not None, DQ_PERM=perm, LSE_TMA=lse_tma, DET=deterministic,
            DET_LAST_FIRST=_det_last_first, VARLEN=cu_seqlens is not None,
            ZERO_PAST=ZERO_PAST and cu_seqlens is not None,
            LAST_FIRST=_last_first and cu_seqlens is not None, DET_ROTATE=det_rotate,
            WRITER_REGS=DET_WRITER_REGS, EARLY_TURN=DET_EARLY_TURN, PERSIST=persistent,
            SNAKE=bool(persistent) and PERSISTENT_SNAKE)
        named_args = dict(zip(_attn_bwd_gluon_ws.arg_names, args))
        launch_kept(_attn_bwd_gluon_ws, grid, named_args | consts, num_warps=4)
        if pieces is not None:  # the cut blocks' pieces (after the whole programs, in stream order), then their sum
            launch_kept(_attn_bwd_gluon_ws, (n_cut * parts,), named_args | consts | dict(
                TAIL_LIMIT=None, TAIL_K=pieces, TAIL_F=first, TAIL_P=parts), num_warps=4)
            sum_tail_pieces(pieces, dk, dv, first=first, scale=scale)
        # the kernel adds dS K unscaled: one multiply per element, not per key block
        if cu_seqlens is not None:
            store_dq_tiles(dq_acc, dq, split_d, scale=scale, packed=(cu_q, cu_p, n_rows, max_seqlen_q))
        elif perm:
            store_dq_tiles(dq_acc, dq, split_d, scale=scale)
        else:
            store_dq(dq_acc, dq, scale=scale)
    if key is not None and perm:
        named = dict(q=q, k=k, v=v, do=do, dk=dk, dv=dv, dq=dq, dq_acc=dq_acc, sem=sem, lse2=lse2, delta=delta,
                     cu_q=varlen[0], cu_k=varlen[1], cu_p=varlen[2], pieces=pieces)
        named |= zip(_DESC_BASES, descs)
        plan = _BwdPlan.make(launches, named, dq_acc.shape, None if sem is None else sem.shape,
                             rows if cu_seqlens is None else None, descs, None if pieces is None else pieces.shape)
        if plan is not None:
            keep_plan(_PLANS, key, plan)
            return plan
    return None


# -- plans: a call's launches kept per signature -----------------------------------------------------------

# each descriptor's name and the name of the tensor it is made over (``_BwdPlan.run`` rebases them)
_DESC_BASES = {"desc_q": "q", "desc_do": "do", "desc_k": "k", "desc_v": "v", "desc_dk": "dk", "desc_dv": "dv",
               "desc_dq": "dq_acc", "desc_lse": "lse2", "desc_dl": "delta"}
# kernel parameter -> the plan's name for the tensor or descriptor it takes: the backward's, the dQ store's
_SOURCES = dict({n: n for n in _DESC_BASES}, DQ="dq_acc", SEM="sem", LSE2="lse2", DELTA="delta", CU_Q="cu_q",
                CU_K="cu_k", CU_P="cu_p", DK="dk", DV="dv", SRC="dq_acc", DST="dq", TAIL_K="pieces")
_PLANS: dict = {}


class _BwdPlan:
    """What a ``gluon_backward`` call derives from its signature (its key: every input's ``tensor_key``, the
    options, the module's measurement switches), kept after the first call: the launches (the backward — where
    it cuts its last wave, its whole programs and its pieces, then the pieces' sum —, the dQ store) with their
    compiled kernels and arguments, the dQ accumulator's and the pieces' buffers' shapes, the descriptors' shapes
    and layouts. A later call of the signature allocates the accumulator, rebases the descriptors
    and launches: no checks, no configuration, no argument binding (on an H200's host the first path took
    ~0.6 ms of host time a call, more than a short call's GPU time). Calls with ALiBi, ``kv_split``, dQ
    atomics or the measurement-only arguments keep no plan."""

    __slots__ = ("launches", "acc_shape", "sem_shape", "rows", "descs", "tail_shape")

    @classmethod
    def make(cls, launches, named, acc_shape, sem_shape, rows, descs, tail_shape=None) -> _BwdPlan | None:
        kept = [KeptLaunch.make(launcher, args, _SOURCES, named) for launcher, args in launches]
        if len(kept) != 2 + 2 * (tail_shape is not None) or any(k is None for k in kept):  # (the interpreter, or a
            return None  # launch the plan cannot redo)
        plan = cls()
        plan.launches, plan.acc_shape, plan.sem_shape, plan.rows = kept, acc_shape, sem_shape, rows
        plan.tail_shape = tail_shape
        # (the descriptors' shapes and layouts without their tensors: a plan keeps no call's memory alive)
        plan.descs = tuple((name, rebased(d, None), _DESC_BASES[name]) for name, d in zip(_DESC_BASES, descs))
        return plan

    def run(self, q, k, v, do, lse2, delta, dq, dk, dv, cu_seqlens, cu_rows) -> None:
        if self.rows is not None:  # (dense calls: L₂ and Dᵢ as the padded buffers the first call read)
            lse2, delta = _rows_of(lse2, self.rows), _rows_of(delta, self.rows)
        named = dict(q=q, k=k, v=v, do=do, dk=dk, dv=dv, dq=dq, lse2=lse2, delta=delta,
                     dq_acc=torch.zeros(self.acc_shape, device=q.device, dtype=torch.float32))
        if self.sem_shape is not None:
            named["sem"] = torch.zeros(self.sem_shape, device=q.device, dtype=torch.int32)
        if self.tail_shape is not None:  # (every piece writes all of its rows)
            named["pieces"] = torch.empty(self.tail_shape, device=q.device, dtype=torch.float32)
        if cu_seqlens is not None:
            named["cu_q"], named["cu_k"], named["cu_p"] = (c if c.dtype == torch.int32 else c.to(torch.int32)
                                                           for c in (*cu_seqlens, cu_rows))
        for name, d, base in self.descs:
            named[name] = rebased(d, named[base])
        stream = current_stream(q.device)
        for launch in self.launches:
            launch.run(named, stream)


# what a split call (``kv_split``) runs on the copies: this module's own ``gluon_backward`` as defined, never a
# wrapper put in its place (a measurement's or a test's, which would see each backward call once)
_split_kernel = gluon_backward


def _dq_layout(block: list[int], perm: bool = False):
    """The shared layout of the float32 dQ staging tile (and its descriptor): ``DQ_SWIZZLE`` or the default
    (``perm``, the tiles in register order in rows of 32: Triton's default, 128 bytes, whatever the hook)."""
    if DQ_SWIZZLE is None or perm:
        return nvmma_layout(tuple(block), gl.float32)
    return gl.NVMMASharedLayout(swizzle_byte_width=DQ_SWIZZLE, element_bitwidth=32, rank=2)


def compile_sm90(head_dim: int, *, causal: bool, stages: int = 2, dtype: torch.dtype = torch.bfloat16,
                 dq_split: int = 1, dq_atomic: bool = False, dq_shared: bool = False, rotate: bool = True,
                 heads_first: bool = False, regs: int = BWD_CONSUMER_REGS, dq_lag: int = 0, alibi: bool = False,
                 dq_perm: bool | None = None, lse_tma: bool | None = None, deterministic: bool = False,
                 varlen: bool = False, zero_past: bool | None = None, det_rotate: bool = False,
                 writer_regs: int | None = None, early_turn: bool | None = None, _ablate: int = 0,
                 block_m: int = BWD_BLOCK_M, persistent: int = 0, chunked: bool = False, tail: bool = False,
                 tail_limit: bool = False):
    """Build the Gluon backward for Hopper (sm_90) on any machine, GPU or not, as
    ``prefill_gluon.compile_sm90`` does for the forward. ``alibi``: the build for ALiBi slopes, with
    the slopes' head stride 1 (a launch specialises it so: (H,), (B, H) and (H,) expanded to (B, H)).
    ``dq_perm``: dQ tiles in register order (None: ``DQ_PERMUTED``, as a launch; never with atomics);
    ``lse_tma``: L₂ and Dᵢ by TMA (None: ``LSE_BY_TMA``); ``deterministic``: the ordered dQ additions;
    ``varlen``: the packed-batch build; ``zero_past``: with its rows past a sequence set to 0 (None: ``ZERO_PAST``);
    ``det_rotate`` (deterministic, varlen, causal): staggered walks, turns in arrival order (``PACKED_DET_ROTATE``);
    ``writer_regs``: the dQ writer warp's registers (None: ``DET_WRITER_REGS``); ``early_turn``: the writer waits for
    a step's turns before its tiles are staged (None: ``DET_EARLY_TURN``); ``block_m``: query rows per step;
    ``persistent``: the persistent build with that many K/V buffer pairs (0: one program per key block);
    ``chunked``: the build with the programs numbered in chunks of heads (HCHUNK an int, not None); ``tail``: the build
    of the last wave's key blocks cut into pieces (``tail_pieces``; TAIL_F an int, not None); ``tail_limit``: the build
    of the whole programs beside it (TAIL_LIMIT an int)."""
    if not HAVE_GLUON:
        raise RuntimeError("this triton has no Gluon (triton >= 3.5 needed)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    perm = (DQ_PERMUTED if dq_perm is None else dq_perm) and not dq_atomic
    _check_tiles(head_dim, stages, dq_split, dq_atomic, dq_shared, regs, dq_lag, block_m, deterministic, alibi, perm,
                 persistent)
    el = gl.float16 if dtype == torch.float16 else gl.bfloat16
    name = "fp16" if dtype == torch.float16 else "bf16"

    def desc(rows):
        layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, head_dim], el)
        return f"tensordesc<{name}[1,1,{rows},{head_dim}],{layout!r}>"
    fn = _attn_bwd_gluon_ws
    const = dict(HEAD_D=head_dim, STAGES=stages, CAUSAL=causal, CONSUMER_REGS=regs, DQ_SPLIT=dq_split,
                 DQ_ATOMIC=dq_atomic, DQ_SHARED=dq_shared, ROTATE=rotate, HEADS_FIRST=heads_first, DQ_LAG=dq_lag,
                 ABLATE=_ablate, ALIBI=alibi)
    const["DQ_PERM"] = perm
    const["VARLEN"] = varlen
    const["ZERO_PAST"] = varlen and (ZERO_PAST if zero_past is None else zero_past)
    const["LAST_FIRST"] = False
    const["DET_ROTATE"] = det_rotate
    const["WRITER_REGS"] = DET_WRITER_REGS if writer_regs is None else writer_regs
    const["EARLY_TURN"] = DET_EARLY_TURN if early_turn is None else early_turn
    const["PERSIST"] = persistent
    const["SNAKE"] = bool(persistent) and PERSISTENT_SNAKE
    if not varlen:  # as a launch without cu_seqlens: constexpr None
        const.update(CU_Q=None, CU_K=None, CU_P=None)
        if not persistent:  # (the persistent build stores dK, dV by pointers, dense calls too)
            const.update(DK=None, DV=None, stride_dkh=None, stride_dkn=None)
    if not persistent:
        const.update(N_TILES=None, GRID0=None)
    if not chunked:
        const["HCHUNK"] = None
    if not tail:
        const.update(TAIL_K=None, TAIL_F=None, TAIL_P=None)
    if not tail_limit:
        const["TAIL_LIMIT"] = None
    const["LSE_TMA"] = LSE_BY_TMA if lse_tma is None else lse_tma
    const["DET"] = deterministic
    if not deterministic:
        const["SEM"] = None
    if alibi:
        const["stride_sh"] = 1
    else:  # as a launch without slopes: constexpr None
        const.update(SLOPES=None, stride_sb=None, stride_sh=None)
    ptrs = ("DQ", "LSE2", "DELTA", "TAIL_K")
    dq_cols = head_dim // (dq_split * (1 + dq_shared))
    dq_block = [2 * dq_cols, 32] if perm else [BWD_BLOCK_M, dq_cols]
    dq_layout = _dq_layout(dq_block, perm)
    desc_dq = f"tensordesc<fp32[{dq_block[0]},{dq_block[1]}],{dq_layout!r}>"
    row_layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    desc_row = f"tensordesc<fp32[{block_m}],{row_layout!r}>"
    sig = {n: ("constexpr" if n in const else desc_dq if n == "desc_dq" else desc_row if n in ("desc_lse", "desc_dl")
               else desc(block_m) if n in ("desc_q", "desc_do") else desc(BWD_SUB_N) if n.startswith("desc_")
               else "*fp32" if n in ptrs or n == "SLOPES" else "*i32" if n in ("SEM", "CU_Q", "CU_K", "CU_P")
               else f"*{name}" if n in ("DK", "DV")
               else "fp32" if n in ("qk_scale", "sm_scale") else "i32") for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptrs}
    src = GluonASTSource(fn, sig, const, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def sm90_report(head_dim: int, *, causal: bool, stages: int = 2, dq_split: int = 1, dq_atomic: bool = False,
                dq_shared: bool = False, dtype: torch.dtype = torch.bfloat16, dq_lag: int = 0, alibi: bool = False,
                dq_perm: bool | None = None, lse_tma: bool | None = None, deterministic: bool = False,
                varlen: bool = False, zero_past: bool | None = None, det_rotate: bool = False,
                writer_regs: int | None = None, early_turn: bool | None = None, _ablate: int = 0,
                block_m: int = BWD_BLOCK_M, persistent: int = 0, chunked: bool = False, tail: bool = False,
                tail_limit: bool = False) -> dict:
    """``prefill_gluon.kernel_report`` of one sm_90 build of the backward: shared memory, registers, spill
    stack, wgmma waits, TMA loads, float32 atomics. Needs a process without TRITON_INTERPRET."""
    from .prefill_gluon import kernel_report

    return kernel_report(compile_sm90(head_dim, causal=causal, stages=stages, dq_split=dq_split, dq_atomic=dq_atomic,
                                      dq_shared=dq_shared, dtype=dtype, dq_lag=dq_lag, alibi=alibi, dq_perm=dq_perm,
                                      lse_tma=lse_tma, deterministic=deterministic, varlen=varlen, zero_past=zero_past,
                                      det_rotate=det_rotate, writer_regs=writer_regs, early_turn=early_turn,
                                      _ablate=_ablate, block_m=block_m, persistent=persistent,
                                      chunked=chunked, tail=tail, tail_limit=tail_limit))
