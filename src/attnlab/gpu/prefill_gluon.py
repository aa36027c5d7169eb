"""FlashAttention forward for Hopper in Gluon, Triton's lower-level dialect: the softmax of one key
block runs while the tensor cores multiply the previous block's P̃ by V (FlashAttention-3's
intra-warpgroup overlap, lecture §6.3 taken one step further).

Plain Triton (``prefill_fwd``) cannot express that schedule on Hopper: each ``tl.dot`` becomes an
asynchronous wgmma, but the compiler waits for a score tile right where it is made, so a program
alternates between tensor-core work and exponentials and the two never overlap inside it
(``benchmarks/NOTES-prefill.md``). Here the waits are written by hand. Each warp group of 64 query
rows of one (batch, head) does, per key block t:

    wait K_t (TMA) ─ issue S_t = Q K_tᵀ ─ wait V_{t−1} ─ issue O += P̃_{t−1} V_{t−1}
    ─ wait S_t only (the P̃V product stays in flight) ─ softmax of S_t: m, P̃_t, l
    ─ wait P̃V ─ O ·= exp2(m_old − m_new)

so the exponentials of block t are computed while the tensor cores work on block t − 1.

Three kernels:

* ``_attn_fwd_gluon_ws`` (the table's): warp-specialised. One loader warp issues every TMA load into
  a ring of ``STAGES`` K and V buffers; two or three consumer warp groups (BLOCK_M = 128 or 192) share
  the ring, release each slot through an "empty" mbarrier once their wgmma on it has completed, and
  never wait on each other, so one's softmax also falls under another's matrix products. Dense,
  causal and sliding-window calls, with or without ALiBi; packed batches (cu_seqlens) without ALiBi, one
  program per (sequence, head, query block), each sequence's rows and keys found from the cumulative
  lengths in the kernel and its last rows stored without TMA.
* ``_attn_fwd_gluon_wsp``: the warp-specialised kernel as a persistent one, at most one program per SM taking
  the tiles of its row of a schedule made on the host (``persistent_schedule``), the next tile's loads under
  this one's end; or (``DYNAMIC``) taking them from a counter in global memory in that order, each program's
  loader asking for the next tile as it finishes loading the current one (packed batches too). Causal calls of
  either kernel can take the part query block first (``part_first_shift``) and their longest walks first over
  groups of heads (``head_chunk``, ``auto_head_chunk``); every order gives the same bits.
* ``_attn_fwd_gluon``: one program of ``num_warps`` warps that refills the ring itself. The refills
  need CTA-wide barriers, which keep its warp groups in lockstep; measured no faster than the Triton
  kernel and kept as a sweep candidate (dense and causal only, with or without ALiBi).

Same mathematics as ``prefill_fwd`` (online softmax in log2 units, bottom-right alignment, the same
empty-row convention), one more rounding order. ALiBi subtracts slope·|i + Nk − Nq − j| from every
visible score before the mask, as ``prefill_fwd``'s ``_score_mod`` does; it is a constexpr (``ALIBI``),
so a build without it is the kernel it was before (``_softmax_alibi`` says how the bias is split into a
row and a column term). MHA/GQA/MQA at D = 64 and 128 in float16/bfloat16 with tensor descriptors;
everything else (softcap, packed batches with ALiBi, other head dims) runs on the Triton kernel. The Triton
interpreter cannot run Gluon: the CPU tests build these kernels for sm_90 (no GPU needed) and the GPU
tests check them against the reference.
"""

from __future__ import annotations

import functools
import math

import torch

from .._runtime import LN2, LOG2E
from .launch import launch_kept

try:  # Gluon ships with triton >= 3.5; older tritons run the Triton kernel only
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # the TMA copies' names changed after triton 3.6 (async_copy_* -> async_load / async_store)
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    # and the barrier of a partition's warps (thread_barrier -> barrier)
    _warps_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed triton
    HAVE_GLUON = False


def triton_version() -> tuple[int, int]:
    """The installed triton's (major, minor), (0, 0) without one."""
    try:
        import triton
    except ImportError:  # pragma: no cover - depends on the environment
        return (0, 0)
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


GLUON_HEAD_DIMS = (64, 128)
# packed batches (cu_seqlens) without softcap or ALiBi on the warp-specialised kernel (``config._GLUON_PACKED_FWD``),
# causal, windowed or not: each program's sequence read from the cumulative lengths, its last rows stored without TMA. A
# sequence's last key block is loaded whole (its keys past the sequence's end masked, their rows of V set to 0 in shared
# memory before P·V: ``_zero_past``), so no value of the next sequence reaches this one's outputs, a NaN or infinity
# included, as with the Triton kernel's masked loads. On an H200 (16K tokens of documents of 256–1792, causal, the
# forward alone) the grid kernel ran level with the Triton kernel at D = 128 (308 against 307 TFLOP/s, variants-sweep
# varlen run 5) and 12 % behind at D = 64; the persistent build with its tiles taken from a counter
# (``FwdConfig.dynamic``) ran 338 against 309 and 312 for the grid kernel at D = 128 (sweep run 6; 337-345 against
# 308-309 in variants runs 20 and 21) and 235 against 251 at D = 64, so the table has a D = 128 entry only (D = 64 keeps
# the Triton kernel); forward+backward at D = 128 294-306 against 292-293 on the Triton forward (variants runs 20 and
# 21). In the first GPU test run with it on, a worker met an illegal memory access in the bad-lengths test (overlapping,
# out-of-range int64 lengths) that no later run repeated: two more runs of the whole GPU suite with it on, 500 rounds of
# the test's five cases on this kernel and one under compute-sanitizer's memcheck (no error). Not traced to this kernel;
# on since those runs. True: a plain packed batch takes the table's Gluon entry; False: the Triton kernel
PACKED = True
# of every 8 exponentials of an unmasked key block, how many the warp-specialised kernels compute by a polynomial on
# the FMA pipe (``exp2_poly_asm``) instead of the exponentials' unit, by head dim. At D = 64 a key block's products
# are half of D = 128's for the same scores, and a profile of the window forward put the exponentials (22 % of its
# stall samples, most waiting on their unit or their operands) between the tensor cores and more work
# (benchmarks/NOTES-prefill.md v27). Measured (H200, benchmarks/exp_poly.py run 2, every split against none in the
# same rounds): slower on every row, the D = 64 window forward 0.933x at 1 in 8 and 0.799x at 4, the dense D = 64 rows
# 0.907-0.963x at 1, D = 128 0.98-1.01x at 1: each polynomial puts seven instructions where one went, and the consumers
# pay for the issue slots more than the exponentials' unit saves. 0 (off) for both
EXP_POLY = {64: 0, 128: 0}
# the row maximum of a key block's scores as a tree of folds (``_row_max``) rather than gl.max's reduction, which
# triton 3.6 lowers to one max after another (31 dependent maxima per row and thread at 128 keys; triton 3.9's is
# already a tree). Same instructions, bit-identical outputs. Measured (H200, triton 3.6, benchmarks/row_max.py runs 1
# and 2, both builds in the same rounds): no faster where the softmax limits (the D = 64 window forward 0.98-1.00x),
# slower on the dense D = 64 non-causal 4K row (0.94x in both runs), the other Gluon rows 0.98-1.02x: the chain's
# latency hides under the thread's other row and the other warps. False (off); a compile-time switch (the kernels
# read ``_ROW_MAX_TREE``)
ROW_MAX_TREE = False
# O's rescaling by alpha after each key block, skipped by a warp whose rows' alphas are all exactly 1 (no row's
# maximum moved: the multiplies would change nothing, so the bits are the same): a vote across the warp, then a
# uniform branch around the multiplies (``_scale_rows``). With ``RESCALE_TAU`` > 0 (log2 units), an unmasked block
# moves a row's maximum only when it grows by more than that (FlashAttention-4's rule): P̃ of a stale maximum is at
# most 2^RESCALE_TAU, and most blocks then skip. Both apply in the warp-specialised kernels at head dims of at least
# ``RESCALE_FROM_D`` (64: both head dims). Measured (H200, benchmarks/fwd_switches.py runs 1 and 2): the skip alone
# 0.980-1.012x (bits kept), the bound alone 0.988-1.008x, both with the bound 8 at D = 128 1.014-1.026x (run 2) and
# 1.008-1.067x (run 1), at D = 64 0.986-1.007x; on at D = 128 against off, run 4: 1.007-1.035x, with the whole GPU
# suite passing with them on. So on from D = 128 at first; those D = 64 runs took their builds in one order, and timed
# with the order reversed every other round (run 16) the switches at D = 64 were worth 1.015-1.021x on the window,
# causal and dense rows: on at both head dims since. Compile-time switches (the kernels read ``_RESCALE_SKIP``,
# ``_RESCALE_TAU`` and ``_RESCALE_FROM_D``)
RESCALE_SKIP = True
RESCALE_TAU = 8.0
RESCALE_FROM_D = 64
# 192-key blocks at D = 64 (``block_n`` 192): FlashAttention-3's D = 64 tile, three 64-key Q·Kᵀ wgmmas a step, one softmax
# step for the three, P̃ through shared memory and three P̃·V wgmmas of k = 64; the K/V ring eight 64-key boxes. A grid
# build only (224 KB of shared memory with three consumer groups). Measured (H200, benchmarks/fwd_switches.py runs 5 and
# 6): 0.53-0.64x the same grid on 128-key blocks on the D = 64 window, causal and dense rows (three groups, whose sm_90
# builds spill), 0.76-0.84x on two groups; no table entry takes it, it runs where a caller's configuration names it.
# Three changes to the warp-specialised forward's step from a side-by-side reading of FlashAttention-4's Hopper
# forward (the flash-attn-4 package, whose D = 64 tile is this kernel's, 192 × 128 with P̃ in registers, and which ran
# 1.07-1.14x faster than it at D = 64 on an H200: benchmarks/RESULTS.md, "FlashAttention-4 runs 1 and 2"):
#   PACK_P      P̃ to 16 bits two elements at a time (``cvt.rn.bf16x2.f32`` / ``cvt.rn.f16x2.f32``): triton 3.6 converts
#               one element at a time and ptxas then swaps the halves of every pair (32 PRMTs a step just before the
#               P̃·V wgmma). The same bits.
#   MASK_RANGE  a masked block's scores masked raw, by one unsigned range test per score against each row's first
#               and last visible key, then the unmasked block's arithmetic (one FFMA and one exponential per score), in
#               place of three comparisons, a multiply, a select and a subtraction per score.
#   PINGPONG    the consumer warp groups take turns at issuing their wgmmas, in order, by named barriers (FlashAttention-3's
#               warp-scheduler barrier): a group waits for its turn before its step's Q·Kᵀ and hands the turn on after
#               its P̃·V, so the groups' softmaxes stay staggered under the others' products. The same bits.
#   ROW_SUM_LANES  each thread keeps its own partial row sums (``_lane_sums``), added across a row's four threads once
#               after the last block, in place of a sum across threads (two shuffles and adds per row) every block.
# Compile-time switches (the kernels read ``_PACK_P``, ``_MASK_RANGE``, ``_PINGPONG``, ``_ROW_SUM_LANES``). Measured
# (H200, benchmarks/fwd_switches.py runs 7 and 8, each build against the shipped one in the same rounds, D = 64 rows:
# the sliding window, causal and dense 4 x 4K): PACK_P 1.009x and 1.027x on the window, 0.994-1.003x causal,
# 1.005-1.014x dense, 1.007-1.017x at D = 128, the same bits (and no spill left in the persistent D = 64 build): on.
# MASK_RANGE 0.943-0.970x (its builds spill 8-48 bytes), PINGPONG 0.997-1.003x: off. ROW_SUM_LANES measured
# 0.974-0.999x there, with each round taking the builds in one order; with the order reversed every other round (run
# 16), the lanes and the rescale switches at D = 64 together against neither: 1.004-1.039x at D = 64, the lanes alone
# 1.002-1.027x at D = 128 (the same build compiled twice spread 0.989-1.007x): on.
PACK_P = True
MASK_RANGE = False
# A masked key block's visible scores from each row's limits (``_visible_limits``): row i sees the block's columns
# [lo_i, hi_i), and a wgmma accumulator's thread holds columns 8j + 2(lane % 4) + k, so each test can be written
# against a constant of the score's register. 2: each row's visible registers as a bit mask made once per row
# (``mask_bits_reference`` is its arithmetic in Python), then one AND per score (the sm_90 builds lose 400-1250 of
# their 2300-9400 instructions, none spills more); 1: two comparisons against constants per score; 0: three
# comparisons of the score's column, held in a register, per score, and the scale before the select. 1 and 2 select
# the raw scores, so the scale must be positive (a zero scale takes the Triton kernel); ``MASK_RANGE`` on takes
# precedence. Measured against 0 (H200, benchmarks/fwd_switches.py runs 9 and 10): the packed batch 1.026-1.046x at
# D = 64 and 1.035-1.037x at D = 128, the D = 64 window 1.014-1.021x, the other rows within 0.98-1.02x; 1 no better.
# Compile-time switch (the kernels read ``_MASK_LIMITS``)
MASK_LIMITS = 2
# Each consumer warp group walks only its own key blocks: those holding a key one of its 64 rows sees
# (``group_blocks``). A tile's walk covers the keys of all its rows, so with 192-row tiles on 128-key blocks a group
# at the diagonal or at a window's left edge would otherwise take a whole block whose scores are all masked for it;
# it still waits for each such block to arrive and gives its slot back (the ring counts one release per group).
# Not in ALiBi builds (they spill more with it) or with ``PINGPONG``.
# A wholly masked block changes nothing in a row's softmax (alpha 1, P̃ 0), so the bits are the same. Measured
# (H200, benchmarks/fwd_switches.py runs 11-13): the same bits on every row; the D = 64 window 1.027x, 1.015x and, with
# the arms' order reversed every other round (run 13, where a row timing one kernel under both builds came out 1.001x),
# 1.044x, faster in each of its six rounds; the other rows within 0.988-1.012x. On (triton 3.9's D = 64 window build
# also spills 152 bytes without it, none with it).
# Compile-time switch (the kernels read ``_OWN_BLOCKS``)
OWN_BLOCKS = True
PINGPONG = False
ROW_SUM_LANES = True
# Q·Kᵀ's A operand from registers: each consumer group reads its Q slice from shared memory into registers once a tile
# (64 × D bfloat16: 32 registers a thread at D = 128) and every Q·Kᵀ wgmma of the tile takes it from there, so a step
# reads only K from shared memory for its scores (a 64 × 128 × 16 wgmma then reads 4 KB there in place of 6); a
# persistent program's Q slot goes back to the loader once it is read, before the tile's first product. The same
# bits. From head dim Q_REGS on (0: none); not in ALiBi, 192-key, packed or polynomial-exponential (``EXP_POLY``)
# builds. Under triton 3.6 the dense D = 128 builds take it without a spill; the D = 64 builds of three consumer groups
# (160 registers a thread) spill 96 bytes with it, the packed D = 128 grid build 8 and the D = 128 polynomial build 40.
# Measured on an H100 (benchmarks/energy_parts.py runs 1 and 2, the D = 128 forward at N = 16K, not causal, run back to
# back at the 700 W limit): 645 against 633 TFLOP/s with 16 heads (ahead in each of 3 rounds), 647 against 641 with
# 16/4 heads, 0.987x and 0.986x the energy a FLOP; fwd-switches run 21 (do_bench): dense 4 x 4K 1.026x, causal 4 x 4K
# 1.002x, one causal 16K sequence 0.998x. On from D = 128 under the triton it was measured with (3.6, whose builds
# take it without a spill); off under others, not measured with it (triton 3.9's D = 128 builds spill 24-48 bytes a
# thread with it, outside the step's loop).
# Compile-time switch (the kernels read ``_Q_REGS``)
Q_REGS = 128 if triton_version() == (3, 6) else 0
PINGPONG_BAR0 = 8  # the named barriers of the turns: PINGPONG_BAR0 + group (Triton's own barriers take the low ids)
WIDE_KEYS = 192
WIDE_BOXES = 8  # its K/V ring: eight 64-key boxes (other rings have at most 4 slots: the count tells them apart)
NO_WINDOW = -(1 << 30)  # win_off of a call without a left edge: every key is right of it


def clamp_edges(causal_off: int | None, win_off: int | None) -> tuple[int | None, int | None]:
    """A call's mask offsets within ±2^30 (``NO_WINDOW``): a left edge further than that is no left edge, a right
    edge further than that sees every key (no sequence is that long), and the kernels' sums of an offset and a row
    or block number then stay within int32."""
    return (None if causal_off is None else min(causal_off, -NO_WINDOW),
            None if win_off is None else max(win_off, NO_WINDOW))


@functools.lru_cache(maxsize=64)
def nvmma_layout(block: tuple[int, ...], dtype):
    """The default shared layout of a TMA block (``gl.NVMMASharedLayout.get_default_for``), made once per
    block shape and element type: ~15 µs of Python each time, and every launch needs several."""
    return gl.NVMMASharedLayout.get_default_for(list(block), dtype)


# 2^f on [0, 1) as 1 + f·(c1 + f·(c2 + f·c3)): minimax in relative error with p(0) = 1 (a linear programme over 4,001
# points), at most 8.6e-5 evaluated in float32, against the 2^-9 of the bfloat16 P̃ it becomes (FlashAttention-4's
# emulated exponentials, there on Blackwell's FMA units). As float32 bit patterns, for the PTX
EXP2_POLY = (0.6951166391372681, 0.22764497995376587, 0.07706724107265472)
_EXP2_POLY_HEX = ("0f3F31F32A", "0f3E691BC4", "0f3D9DD56E")
# which of an inline-asm pack's 8 elements (a thread's 2 rows × 4 columns of a wgmma accumulator) take the polynomial
_EXP2_POLY_SLOTS = {1: (7,), 2: (3, 7), 3: (1, 4, 7), 4: (1, 3, 5, 7)}


# ``_scale_rows``'s vote (two rows' alphas a thread, pack 2): each output is its input if any alpha of the warp is not
# exactly 1 (NaN included), else −1, the same in every lane of the warp
VOTE_ASM = "\n".join([
    "{", ".reg .pred p, q;", "setp.neu.f32 p, $2, 0f3F800000;", "setp.neu.f32 q, $3, 0f3F800000;", "or.pred p, p, q;",
    "vote.sync.any.pred p, p, 0xffffffff;", "selp.f32 $0, $2, 0fBF800000, p;", "selp.f32 $1, $3, 0fBF800000, p;", "}"])


def mask_bits_reference(lo: int, hi: int, lane: int, block_n: int) -> list[bool]:
    """``_col_range``'s bit mask (mode 2, ``MASK_LIMITS`` 2) in Python, for one row and one thread: for each of the
    thread's columns of a ``block_n``-key block in register order (column 8j + 2(lane % 4) + k, j-major), whether the
    kernel takes it as visible for the row's limits [lo, hi) (block columns; any int32). The arithmetic is the
    kernel's, step by step, so a test can hold it to the plain comparison."""
    nj = block_n // 8
    base = (lane & 3) * 2
    lo, hi = lo - base, hi - base

    def clamp(x):
        return min(max(x >> 3, 0), nj)  # (Python's >> floors, as the kernel's arithmetic shift)

    def bit_range(a, b):
        return ((1 << b) - 1) & ~((1 << a) - 1)

    bits = bit_range(clamp(lo + 7), clamp(hi + 7)) | (bit_range(clamp(lo + 6), clamp(hi + 6)) << nj)
    out = []
    for j in range(nj):
        for k in range(2):
            cc = 8 * j + k  # the column less the thread's base, ``offs_n & -7``
            out.append(bool(bits & (1 << ((cc >> 3) + (cc & 1) * nj))))
    return out


def scale_rows_asm(n: int) -> str:
    """The inline assembly of ``_scale_rows`` for packs of ``n`` accumulator elements (outputs $0..n−1, each tied to
    its input $n+i; the vote's value for its row $2n+i): a uniform branch past the n multiplies where the vote says
    −1 (every alpha of the warp exactly 1), else each element times its row's alpha."""
    if n < 1:
        raise ValueError(f"scale_rows_asm: a pack of at least 1 element, got {n}")
    return "\n".join(["{", ".reg .pred skip;", f"setp.lt.f32 skip, ${2 * n}, 0f00000000;", "@skip bra.uni SKIP;"]
                     + [f"mul.f32 ${i}, ${n + i}, ${2 * n + i};" for i in range(n)] + ["SKIP:", "}"])


def scale_rows_constraints(n: int) -> str:
    return ",".join(["=f"] * n + [str(i) for i in range(n)] + ["f"] * n)


def exp2_poly_asm(n_poly: int) -> str:
    """The PTX of ``_exp2_mixed``'s inline assembly: 8 float32 exponents in ($8–$15), their powers of 2 out
    ($0–$7), ``n_poly`` (1–4) of them computed on the FMA pipe, the rest by ``ex2.approx.ftz.f32`` (what
    ``gl.exp2`` lowers to: without ``.ftz``, ptxas wraps each in a denormal fix-up, and a first build that used it
    ran 20 % slower at one polynomial in 8, exp_poly run 1). The polynomial path, per element: x clamped to ≥ −127
    (``max``), t = x + 1.5·2²³ rounded down (its low mantissa bits are ⌊x⌋), j = t − 1.5·2²³, f = x − j ∈ [0, 1),
    p = the cubic ``EXP2_POLY`` at f (3 FMAs), and ⌊x⌋ added to p's exponent field by one integer multiply-add
    (bits(t)·2²³ ≡ ⌊x⌋·2²³ mod 2³²): 7 instructions, none on the exponentials' unit. At or below −127 (−∞ too) it
    gives 0, from −127 to −126 a denormal near ex2's; NaN counts as −127 (0, where ex2 gives NaN), so ``_softmax``
    uses it on unmasked blocks only, whose scores are finite. ``exp2_poly_reference`` computes the same bits on the
    CPU."""
    if n_poly not in _EXP2_POLY_SLOTS:
        raise ValueError(f"n_poly must be 1 to 4 (of every 8 exponentials), got {n_poly!r}")
    c1, c2, c3 = _EXP2_POLY_HEX
    lines = ["{"]
    for i in range(8):
        if i not in _EXP2_POLY_SLOTS[n_poly]:
            lines.append(f"ex2.approx.ftz.f32 ${i}, ${8 + i};")
            continue
        lines += ["{", ".reg .f32 x, t, j, f, p;", ".reg .b32 tb, pb;",
                  f"max.f32 x, ${8 + i}, 0fC2FE0000;",  # −127
                  "add.rm.f32 t, x, 0f4B400000;",  # 1.5·2²³: t's low bits hold ⌊x⌋
                  "sub.f32 j, t, 0f4B400000;",
                  "sub.f32 f, x, j;",
                  f"fma.rn.f32 p, f, {c3}, {c2};",
                  f"fma.rn.f32 p, p, f, {c1};",
                  "fma.rn.f32 p, p, f, 0f3F800000;",
                  "mov.b32 tb, t;", "mov.b32 pb, p;",
                  "mad.lo.u32 pb, tb, 8388608, pb;",  # + ⌊x⌋·2²³: the exponent field
                  f"mov.b32 ${i}, pb;", "}"]
    lines.append("}")
    return "\n".join(lines)


def exp2_poly_reference(x: torch.Tensor) -> torch.Tensor:
    """``exp2_poly_asm``'s polynomial path on the CPU, bit for bit (float32 in, float32 out): the clamp, ⌊x⌋, the
    three FMAs (each rounded once: the float64 product and sum are exact here) and the exponent's integer add."""
    x = x.to(torch.float32).clamp_min(-127.0)
    j = torch.floor(x)
    f = (x - j).double()
    c1, c2, c3 = (torch.tensor(c, dtype=torch.float32).double() for c in EXP2_POLY)
    p = (f * c3 + c2).float().double()
    p = (p * f + c1).float().double()
    p = (p * f + 1.0).float()
    bits = p.view(torch.int32).to(torch.int64) + j.to(torch.int64) * (1 << 23)
    return bits.to(torch.int32).view(torch.float32)


@functools.lru_cache(maxsize=8)
def row_layout():
    """The unswizzled shared layout of a 1-D float32 TMA block (L₂ and Dᵢ rows)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)

if HAVE_GLUON:
    _VOTE_ASM = gl.constexpr(VOTE_ASM)
    _VOTE_CONSTRAINTS = gl.constexpr("=f,=f,f,f")
    _SCALE_ASM_32 = gl.constexpr(scale_rows_asm(32))
    _SCALE_CONSTRAINTS_32 = gl.constexpr(scale_rows_constraints(32))
    _SCALE_ASM_64 = gl.constexpr(scale_rows_asm(64))
    _SCALE_CONSTRAINTS_64 = gl.constexpr(scale_rows_constraints(64))
    _EXP2_CONSTRAINTS = gl.constexpr(",".join(["=f"] * 8 + ["f"] * 8))
    _EXP2_ASM_1 = gl.constexpr(exp2_poly_asm(1))
    _EXP2_ASM_2 = gl.constexpr(exp2_poly_asm(2))
    _EXP2_ASM_3 = gl.constexpr(exp2_poly_asm(3))
    _EXP2_ASM_4 = gl.constexpr(exp2_poly_asm(4))
    _LN2 = gl.constexpr(LN2)
    _LOG2E = gl.constexpr(LOG2E)
    _NO_WINDOW = gl.constexpr(NO_WINDOW)
    _ROW_MAX_TREE = gl.constexpr(ROW_MAX_TREE)
    _RESCALE_SKIP = gl.constexpr(RESCALE_SKIP)
    _RESCALE_TAU = gl.constexpr(RESCALE_TAU)
    _RESCALE_FROM_D = gl.constexpr(RESCALE_FROM_D)
    _PACK_P = gl.constexpr(PACK_P)
    _MASK_RANGE = gl.constexpr(MASK_RANGE)
    _MASK_LIMITS = gl.constexpr(MASK_LIMITS)
    _OWN_BLOCKS = gl.constexpr(OWN_BLOCKS)
    _PINGPONG = gl.constexpr(PINGPONG)
    _ROW_SUM_LANES = gl.constexpr(ROW_SUM_LANES)
    _Q_REGS = gl.constexpr(Q_REGS)
    _PINGPONG_BAR0 = gl.constexpr(PINGPONG_BAR0)
    _CVT_BF16X2 = gl.constexpr("cvt.rn.bf16x2.f32 $0, $2, $1;")
    _CVT_F16X2 = gl.constexpr("cvt.rn.f16x2.f32 $0, $2, $1;")
    _BAR_SYNC = gl.constexpr("bar.sync $1, 256;\nmov.b32 $0, $1;")
    _BAR_ARRIVE = gl.constexpr("bar.arrive $1, 256;\nmov.b32 $0, $1;")
    _WIDE_KEYS = gl.constexpr(WIDE_KEYS)
    _WIDE_BOXES = gl.constexpr(WIDE_BOXES)
    _SUB_KEYS = gl.constexpr(64)

    @gluon.jit
    def _issue_kv(desc, bars, bufs, t, n_blocks, b, hk, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
        """Start the TMA load of key (or value) block t into ring slot t % STAGES, if t < n_blocks."""
        slot = t % STAGES
        ok = t < n_blocks
        bar = bars.index(slot)
        mbarrier.expect(bar, desc.block_type.nbytes, pred=ok)
        _tma_load(desc, [b, hk, t * BLOCK_N, 0], bar, bufs.index(slot), pred=ok)

    @gluon.jit
    def _ring_load(desc, ready, empty, bufs, u, b, hk, row):
        """The loader's TMA loads of the ring's u-th key (or value) block, keys row .. row + BLOCK_N − 1 of (b, hk),
        each slot refilled once every consumer has released it (``empty`` completed a phase). A ring of
        [STAGES, 1, 1, BLOCK_N, D] (STAGES <= 4): slot u % STAGES, one load. The wide ring of ``WIDE_KEYS`` blocks
        ([8, 1, 1, 64, D]: a tensor descriptor's box and a shared buffer are powers of two, 192 is not): eight
        64-key boxes with a barrier each, block u in boxes 3u, 3u + 1, 3u + 2 (mod 8)."""
        if bufs.shape[0] != _WIDE_BOXES:
            STAGES: gl.constexpr = bufs.shape[0]
            slot = u % STAGES
            if u >= STAGES:
                mbarrier.wait(empty.index(slot), ((u // STAGES) - 1) & 1)
            mbarrier.expect(ready.index(slot), desc.block_type.nbytes)
            _tma_load(desc, [b, hk, row, 0], ready.index(slot), bufs.index(slot))
        else:
            ROWS: gl.constexpr = bufs.shape[3]
            for j in gl.static_range(3):
                w = 3 * u + j
                slot = w % _WIDE_BOXES
                if w >= _WIDE_BOXES:
                    mbarrier.wait(empty.index(slot), ((w // _WIDE_BOXES) - 1) & 1)
                mbarrier.expect(ready.index(slot), desc.block_type.nbytes)
                _tma_load(desc, [b, hk, row + j * ROWS, 0], ready.index(slot), bufs.index(slot))

    @gluon.jit
    def _box(bufs, w):
        """Box w (mod 8) of the wide ring as a [64, D] tile, and its slot."""
        slot = w % _WIDE_BOXES
        return bufs.index(slot).reshape([bufs.shape[3], bufs.shape[4]]), slot

    @gluon.jit
    def _exp2_mixed(x, EXP_POLY: gl.constexpr):
        """2^x of finite float32 x: EXP_POLY of every 8 elements by ``exp2_poly_asm``'s polynomial on the FMA
        pipe, the rest on the exponentials' unit (``ex2.approx``, as ``gl.exp2``); 0: ``gl.exp2`` alone."""
        if EXP_POLY == 0:
            y = gl.exp2(x)
        elif EXP_POLY == 1:
            y = gl.inline_asm_elementwise(_EXP2_ASM_1, _EXP2_CONSTRAINTS, [x], dtype=gl.float32, is_pure=True, pack=8)
        elif EXP_POLY == 2:
            y = gl.inline_asm_elementwise(_EXP2_ASM_2, _EXP2_CONSTRAINTS, [x], dtype=gl.float32, is_pure=True, pack=8)
        elif EXP_POLY == 3:
            y = gl.inline_asm_elementwise(_EXP2_ASM_3, _EXP2_CONSTRAINTS, [x], dtype=gl.float32, is_pure=True, pack=8)
        else:
            gl.static_assert(EXP_POLY == 4, "EXP_POLY: 0 to 4 of every 8 exponentials")
            y = gl.inline_asm_elementwise(_EXP2_ASM_4, _EXP2_CONSTRAINTS, [x], dtype=gl.float32, is_pure=True, pack=8)
        return y

    @gluon.jit
    def _row_max(s):
        """gl.max(s, 1) of a wgmma accumulator (float32 [M, N], N = 64 or 128); with ``_ROW_MAX_TREE`` as a tree: the
        columns in each thread's registers folded in halves down to 8 (each fold one independent max per register
        left), then gl.max over those 8 (two in each thread, four threads). The same instructions as gl.max, in a
        chain of log2(N / 8) + 1 per row and thread instead of triton 3.6's N / 4 − 1 (the N / 4 scores of a row that
        each thread holds, taken in turn). No data moves: a fold's halves differ in a column bit that the layout
        keeps in registers."""
        if not _ROW_MAX_TREE:
            return gl.max(s, 1)
        M: gl.constexpr = s.shape[0]
        N: gl.constexpr = s.shape[1]
        x = gl.max(gl.reshape(s, [M, 2, N // 2]), 1)
        if N // 2 > 8:
            x = gl.max(gl.reshape(x, [M, 2, N // 4]), 1)
        if N // 4 > 8:
            x = gl.max(gl.reshape(x, [M, 2, N // 8]), 1)
        if N // 8 > 8:
            x = gl.max(gl.reshape(x, [M, 2, N // 16]), 1)
        return gl.convert_layout(gl.max(x, 1), gl.SliceLayout(1, s.type.layout))

    @gluon.jit
    def _scale_rows(acc, alpha):
        """acc · alpha[:, None] (alpha a row tensor of the scores' layout); with ``_RESCALE_SKIP`` (at head dims from
        ``_RESCALE_FROM_D``) a warp whose rows'
        alphas are all exactly 1 leaves its rows as they are, by a uniform branch (``VOTE_ASM``, ``scale_rows_asm``):
        the same bits, without the multiplies. Each thread holds HEAD_D / 2 elements of its warp group's 64-row
        accumulator (two rows), one pack."""
        a = gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout))
        if not _RESCALE_SKIP:
            return acc * a[:, None]
        if acc.shape[1] < _RESCALE_FROM_D:
            return acc * a[:, None]
        enc = gl.inline_asm_elementwise(_VOTE_ASM, _VOTE_CONSTRAINTS, [a], dtype=gl.float32, is_pure=False, pack=2)
        enc = gl.broadcast(enc[:, None], acc)[0]
        if acc.shape[1] == 64:
            out = gl.inline_asm_elementwise(_SCALE_ASM_32, _SCALE_CONSTRAINTS_32, [acc, enc], dtype=gl.float32,
                                            is_pure=True, pack=32)
        else:
            gl.static_assert(acc.shape[1] == 128, "_scale_rows: head dim 64 or 128")
            out = gl.inline_asm_elementwise(_SCALE_ASM_64, _SCALE_CONSTRAINTS_64, [acc, enc], dtype=gl.float32,
                                            is_pure=True, pack=64)
        return out

    @gluon.jit
    def _to_16(p, dtype: gl.constexpr, PACK: gl.constexpr):
        """P̃ (float32) as ``dtype`` (bfloat16 or float16); with ``PACK`` two elements per instruction."""
        if not PACK:
            out = p.to(dtype)
        elif dtype == gl.bfloat16:
            out = gl.inline_asm_elementwise(_CVT_BF16X2, "=r,f,f", [p], dtype=gl.bfloat16, is_pure=True, pack=2)
        else:
            out = gl.inline_asm_elementwise(_CVT_F16X2, "=r,f,f", [p], dtype=gl.float16, is_pure=True, pack=2)
        return out

    @gluon.jit
    def _turn(bar, ARRIVE: gl.constexpr):
        """Named barrier ``bar`` of two warp groups (256 threads), from one warp group's 128 threads: wait on it
        (``bar.sync``), or arrive without waiting (``bar.arrive``)."""
        ids = gl.full([128], bar, gl.int32, layout=gl.BlockedLayout([1], [32], [4], [0]))
        if ARRIVE:
            gl.inline_asm_elementwise(_BAR_ARRIVE, "=r,r", [ids], dtype=gl.int32, is_pure=False, pack=1)
        else:
            gl.inline_asm_elementwise(_BAR_SYNC, "=r,r", [ids], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _softmax(s, m_i, l_i, start_n, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, masked,
                 CAUSAL: gl.constexpr, EXP_POLY: gl.constexpr = 0, TAU: gl.constexpr = 0.0):
        """Online-softmax step on raw scores s (float32): (P̃ in float32, alpha, new m, new l).
        ``masked``: the block reaches past the diagonal (CAUSAL), before the window's left edge
        (keys j < i + win_off; NO_WINDOW: none) or past the last key (element mask). ``EXP_POLY``: of every 8
        exponentials of an unmasked block, so many by a polynomial (``_exp2_mixed``); a masked block's, with its
        −∞, all on the exponentials' unit. ``TAU`` > 0: an unmasked block moves a row's maximum only when it grows by
        more than TAU (``RESCALE_TAU``)."""
        if masked:
            if _MASK_RANGE:  # row i sees the block's columns [lo_i, hi_i): one unsigned comparison per score (the
                # scores masked before the scale, so the scale must be positive: the library's Gluon calls' is)
                lo = gl.maximum(offs_m + win_off, 0) - start_n
                if CAUSAL:
                    hi = gl.minimum(offs_m + causal_off + 1, Nk) - start_n
                else:
                    hi = gl.zeros_like(offs_m) + (Nk - start_n)
                width = gl.maximum(hi - lo, 0).to(gl.uint32)
                visible = (offs_n[None, :] - lo[:, None]).to(gl.uint32) < width[:, None]
                s = gl.where(visible, s, float("-inf"))
                m_new = gl.maximum(m_i, _row_max(s) * qk_scale)
                m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
                p = gl.exp2(s * qk_scale - m_use[:, None])
            elif _MASK_LIMITS:  # each row's first and last visible column, against each score's column as a constant
                s = gl.where(_visible_limits(offs_m, offs_n, start_n, Nk, causal_off, win_off, CAUSAL), s,
                             float("-inf"))
                m_new = gl.maximum(m_i, _row_max(s) * qk_scale)  # (scale > 0: the maximum of the scaled scores)
                m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
                p = gl.exp2(s * qk_scale - m_use[:, None])
            else:
                cols = start_n + offs_n
                visible = (cols[None, :] < Nk) & (cols[None, :] >= offs_m[:, None] + win_off)
                if CAUSAL:
                    visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
                s = gl.where(visible, s * qk_scale, float("-inf"))
                m_new = gl.maximum(m_i, _row_max(s))
                m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
                p = gl.exp2(s - m_use[:, None])
        else:
            m_new = gl.maximum(m_i, _row_max(s) * qk_scale)
            if TAU > 0:  # keep a row's maximum unless it grows by more than the bound
                m_new = gl.where(m_new > m_i + TAU, m_new, m_i)
            m_use = m_new
            p = _exp2_mixed(s * qk_scale - m_use[:, None], EXP_POLY)
        alpha = gl.exp2(m_i - m_use)
        if len(l_i.shape) == 2:  # each thread's partial sums (``_lane_sums``)
            a = gl.convert_layout(alpha, gl.SliceLayout(1, l_i.type.layout))
            l_i = l_i * a[:, None] + _lane_sums(p)
        else:
            l_i = l_i * alpha + gl.sum(p, 1)
        return p, alpha, m_new, l_i

    @gluon.jit
    def _visible_limits(offs_m, offs_n, start_n, Nk, causal_off, win_off, CAUSAL: gl.constexpr):
        """Which scores of a masked key block (keys start_n + offs_n, rows offs_m) are visible: row i sees the
        block's columns [lo_i, hi_i), lo_i = i + win_off − start_n and hi_i = min(i + causal_off + 1, Nk) − start_n
        (Nk − start_n without CAUSAL), by ``_col_range`` in the form ``MASK_LIMITS`` names."""
        lo = offs_m + (win_off - start_n)
        if CAUSAL:
            hi = gl.minimum(offs_m + (causal_off + 1 - start_n), Nk - start_n)
        else:
            hi = gl.zeros_like(offs_m) + (Nk - start_n)
        return _col_range(lo, hi, offs_n, _MASK_LIMITS)

    @gluon.jit
    def _col_range(lo, hi, offs_n, MODE: gl.constexpr):
        """[M, N] booleans of a wgmma accumulator's layout: row r's columns lo_r <= c < hi_r (``offs_n``: the columns,
        0 .. N − 1; lo, hi: any int32 of the rows' layout). A thread holds the columns 8j + 2(lane % 4) + k: its
        base 2(lane % 4) (``offs_n & 6``) plus a constant of the register, 8j + k (``offs_n & -7``), so no column needs
        a register of its own. ``MODE`` 1: each register's constant against the row's limits less the base, two
        comparisons against immediates per element. 2 (N <= 128; wider takes 1): each row's registers in range as a
        bit mask, register (j, k) bit j + k·N/8, made once per row (for k = 0 the j with lo <= 8j < hi, for k = 1
        those with lo <= 8j + 1 < hi: ``mask_bits_reference``), then one AND with a constant bit per element."""
        base = offs_n & 6
        cc = offs_n & -7
        NJ: gl.constexpr = offs_n.shape[0] // 8
        if MODE == 1 or NJ > 16:
            visible = (cc[None, :] >= lo[:, None] - base[None, :]) & (cc[None, :] < hi[:, None] - base[None, :])
        else:
            lane = gl.inline_asm_elementwise("mov.u32 $0, %laneid;", "=r,r", [lo], dtype=gl.int32, is_pure=True,
                                             pack=1)
            lo = lo - (lane & 3) * 2  # the limits less the thread's base
            hi = hi - (lane & 3) * 2
            m0 = _bit_range(gl.minimum(gl.maximum((lo + 7) >> 3, 0), NJ),
                            gl.minimum(gl.maximum((hi + 7) >> 3, 0), NJ))
            m1 = _bit_range(gl.minimum(gl.maximum((lo + 6) >> 3, 0), NJ),
                            gl.minimum(gl.maximum((hi + 6) >> 3, 0), NJ))
            bits = m0 | (m1 << NJ)
            idx = (cc >> 3) + (cc & 1) * NJ
            visible = (bits[:, None] & (1 << idx[None, :])) != 0
        return visible

    @gluon.jit
    def _bit_range(a, b):
        """Bits a .. b − 1 set (none where a >= b); 0 <= a, b <= 16."""
        return ((1 << b) - 1) & ~((1 << a) - 1)

    @gluon.jit
    def _lane_sums(p):
        """The row sums of a wgmma accumulator's scores [M, N] as each thread holds them, not yet added across the
        four threads of a row: [M, 8], column c the sum of columns c, c + 8, c + 16, ... (a thread's registers; the
        lanes' sums are added once, after the last block)."""
        return gl.sum(gl.reshape(p, [p.shape[0], p.shape[1] // 8, 8]), 1)

    @gluon.jit
    def _zero_past(v, end, CH: gl.constexpr = 16):
        """Rows ``end`` onwards of a tile in shared memory (``v``, [rows, head dim]) set to 0: a packed sequence's last
        block of keys (or, in the backward, of query rows), loaded whole by TMA, holds the next sequence's first
        rows there, and a product whose other factor is 0 on them (P·V: P) would still take 0 · NaN = NaN from a
        NaN or infinity among their values. ``CH`` rows at a time, only the slices that reach past ``end`` (all
        of them where ``end`` <= 0); warp groups that share the tile may all run it: they write the same bytes.
        Then a proxy fence and the warp group's barrier, so the next wgmma reads what every thread wrote."""
        ROWS: gl.constexpr = v.shape[0]
        HEAD_D: gl.constexpr = v.shape[1]
        TC: gl.constexpr = HEAD_D // 8  # threads across a row, 8 elements (16 bytes) each
        lay: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TC, TC], [4, 1], [1, 0])
        for c in gl.static_range(ROWS // CH):
            if (c + 1) * CH > end:
                sub = v.slice(c * CH, CH)
                x = sub.load(lay)
                rows = c * CH + gl.arange(0, CH, layout=gl.SliceLayout(1, lay))
                sub.store(gl.where(rows[:, None] < end, x, gl.zeros_like(x)))
        fence_async_shared()
        _warps_barrier()

    @gluon.jit
    def _softmax_alibi(s, m_i, l_i, start_n, row0, offs_m, offs_n, Nk, causal_off, win_off, alibi_off, qk_scale,
                       slope2, c, masked, CAUSAL: gl.constexpr):
        """``_softmax`` with ALiBi: the scores are s·qk_scale − slope2·|i + alibi_off − j| in log2 units
        (slope2 = slope·log2 e), the bias on every visible score, before the mask. ``row0``: the block's
        first row; ``c``: slope2·n for the block's columns n = 0 .. BLOCK_N − 1 (the same every block).

        In the block's own coordinates |i + alibi_off − j| = |a_i − n| with a_i = i + alibi_off − start_n,
        so the bias is b_i − c_n up to its sign, b_i = slope2·a_i. A block wholly left of every row's
        diagonal (a_i >= n throughout: every unmasked block of a causal call with right = 0) has the
        scores t − b_i with t = s·qk_scale + c_n: the column term goes into the scale's FMA, the row term
        into the row's max and exponent, one add per score more than ``_softmax``'s unmasked step. A
        block wholly right of it (non-causal calls) is the same with both signs turned. A masked block,
        or one the diagonal crosses, takes |b_i − c_n| per score, then the element mask."""
        BLOCK_M: gl.constexpr = offs_m.shape[0]
        BLOCK_N: gl.constexpr = offs_n.shape[0]
        a0 = row0 + alibi_off - start_n  # a_i of the first row; a_i grows by one a row
        left = a0 >= BLOCK_N - 1  # every key at or left of every row's diagonal
        if CAUSAL:  # a causal block right of the diagonal is masked (but with right > 0, rarely): general step
            one_sided = left
        else:
            one_sided = left | (a0 + BLOCK_M - 1 <= 0)
        b = slope2 * (offs_m + (alibi_off - start_n)).to(gl.float32)  # a_i exact in float32
        if masked | ~one_sided:
            cols = start_n + offs_n
            visible = (cols[None, :] < Nk) & (cols[None, :] >= offs_m[:, None] + win_off)
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
            sign = gl.where(slope2 < 0, -1.0, 1.0)  # slope2·|a − n| = sign·|b − c|
            s = s * qk_scale - sign * gl.abs(b[:, None] - c[None, :])
            s = gl.where(visible, s, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, 1))
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            p = gl.exp2(s - m_use[:, None])
        else:
            if CAUSAL:
                t = s * qk_scale + c[None, :]
            else:
                if left:
                    t = s * qk_scale + c[None, :]
                else:  # |a_i − n| = n − a_i
                    t = s * qk_scale - c[None, :]
                    b = -b
            m_new = gl.maximum(m_i, gl.max(t, 1) - b)
            m_use = m_new
            p = gl.exp2(t - (m_use + b)[:, None])
        alpha = gl.exp2(m_i - m_use)
        l_i = l_i * alpha + gl.sum(p, 1)
        return p, alpha, m_new, l_i

    @gluon.jit
    def _attn_fwd_gluon(desc_q, desc_k, desc_v, desc_o, LSE, H, G, Nq, Nk, causal_off, qk_scale,
                        HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr,
                        SLOPES=None, stride_sb=None, stride_sh=None, alibi_off=None, ALIBI: gl.constexpr = False):
        """Grid (query blocks, B·H). Descriptors over (B, H|Hkv, N, D) with blocks [1, 1, rows, D]; LSE
        (B, H, Nq) float32. Causal: row i sees keys j <= i + causal_off (bottom-right aligned). ALIBI: the
        scores less slope·|i + alibi_off − j|, the slope at SLOPES + b·stride_sb + h·stride_sh (float32);
        without it the four arguments are None (constexprs: the kernel is the one built before ALiBi)."""
        dtype: gl.constexpr = desc_q.dtype
        pid_m = gl.program_id(0)
        if CAUSAL:  # heaviest query blocks first
            pid_m = gl.num_programs(0) - 1 - pid_m
        bh = gl.program_id(1)
        b = bh // H
        h = bh % H
        hk = h // G
        start_m = pid_m * BLOCK_M
        if ALIBI:
            slope2 = gl.load(SLOPES + b * stride_sb + h * stride_sh).to(gl.float32) * _LOG2E

        # -- layouts: one wgmma accumulator layout (8 warps along M, 16 rows each) for S and O
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

        # -- shared memory: Q (reused for O), rings of K and V blocks, one barrier per buffer
        q_smem = gl.allocate_shared_memory(dtype, [1, 1, BLOCK_M, HEAD_D], desc_q.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_v.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_bars.index(i), count=1)
            mbarrier.init(v_bars.index(i), count=1)

        # -- key range: [0, full) unmasked, [full, hi) masked (diagonal, ragged end); the rest skipped
        if CAUSAL:
            hi = gl.maximum(gl.minimum(Nk, start_m + BLOCK_M + causal_off), 0)
            full = gl.maximum(gl.minimum(Nk, start_m + 1 + causal_off), 0)
        else:
            hi = Nk
            full = Nk
        full = (full // BLOCK_N) * BLOCK_N
        n_blocks = gl.cdiv(hi, BLOCK_N)

        mbarrier.expect(q_bar, desc_q.block_type.nbytes)
        _tma_load(desc_q, [b, h, start_m, 0], q_bar, q_smem)
        for i in gl.static_range(STAGES):
            _issue_kv(desc_k, k_bars, k_smem, i, n_blocks, b, hk, BLOCK_N, STAGES)
            _issue_kv(desc_v, v_bars, v_smem, i, n_blocks, b, hk, BLOCK_N, STAGES)

        offs_m = start_m + gl.arange(0, BLOCK_M, layout=row_s)
        offs_n = gl.arange(0, BLOCK_N, layout=col_s)
        if ALIBI:
            c = slope2 * offs_n.to(gl.float32)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
        acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, layout=o_layout)
        s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        q = q_smem.reshape([BLOCK_M, HEAD_D])
        mbarrier.wait(q_bar, 0)

        if n_blocks > 0:
            # -- block 0: S_0 and its softmax, nothing to overlap with yet
            mbarrier.wait(k_bars.index(0), 0)
            s_tok = warpgroup_mma(q, k_smem.index(0).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                                  use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s_tok, ))
            _issue_kv(desc_k, k_bars, k_smem, STAGES, n_blocks, b, hk, BLOCK_N, STAGES)
            if ALIBI:
                p, alpha, m_i, l_i = _softmax_alibi(s, m_i, l_i, 0, start_m, offs_m, offs_n, Nk, causal_off,
                                                    _NO_WINDOW, alibi_off, qk_scale, slope2, c, 0 >= full, CAUSAL)
            else:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, 0, offs_m, offs_n, Nk, causal_off, _NO_WINDOW, qk_scale,
                                              0 >= full, CAUSAL)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            for t in range(1, n_blocks):
                slot = t % STAGES
                prev = (t - 1) % STAGES
                # S_t = Q K_tᵀ, then O += P̃_{t-1} V_{t-1}, both in flight
                mbarrier.wait(k_bars.index(slot), (t // STAGES) & 1)
                s_tok = warpgroup_mma(q, k_smem.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                                      use_acc=False, is_async=True)
                mbarrier.wait(v_bars.index(prev), ((t - 1) // STAGES) & 1)
                acc_tok = warpgroup_mma(p_op, v_smem.index(prev).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
                # S_t done (wgmma groups retire in order), P̃V still running: its softmax overlaps it
                s = warpgroup_mma_wait(1, deps=(s_tok, ))
                _issue_kv(desc_k, k_bars, k_smem, t + STAGES, n_blocks, b, hk, BLOCK_N, STAGES)
                if ALIBI:
                    p, alpha, m_i, l_i = _softmax_alibi(s, m_i, l_i, t * BLOCK_N, start_m, offs_m, offs_n, Nk,
                                                        causal_off, _NO_WINDOW, alibi_off, qk_scale, slope2, c,
                                                        t * BLOCK_N >= full, CAUSAL)
                else:
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, t * BLOCK_N, offs_m, offs_n, Nk, causal_off, _NO_WINDOW,
                                                  qk_scale, t * BLOCK_N >= full, CAUSAL)
                acc, p_op = warpgroup_mma_wait(0, deps=(acc_tok, p_op))
                _issue_kv(desc_v, v_bars, v_smem, t - 1 + STAGES, n_blocks, b, hk, BLOCK_N, STAGES)
                acc = acc * gl.convert_layout(alpha, row_o)[:, None]
                p_op = gl.convert_layout(p.to(dtype), p_layout)
            last = (n_blocks - 1) % STAGES
            mbarrier.wait(v_bars.index(last), ((n_blocks - 1) // STAGES) & 1)
            acc_tok = warpgroup_mma(p_op, v_smem.index(last).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc_tok, ))

        for i in gl.static_range(STAGES):
            mbarrier.invalidate(k_bars.index(i))
            mbarrier.invalidate(v_bars.index(i))
        mbarrier.invalidate(q_bar)

        # -- epilogue: O = acc / l, L = (m + log2 l)·ln 2; empty rows: O = 0, L = -inf
        empty = l_i == 0.0
        l_safe = gl.where(empty, 1.0, l_i)
        lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * _LN2)
        gl.store(LSE + bh.to(gl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)
        out = acc * gl.convert_layout(1.0 / l_safe, row_o)[:, None]
        q.store(out.to(dtype))  # Q's buffer is free: every wgmma that read it has completed
        fence_async_shared()
        _tma_store(desc_o, [b, h, start_m, 0], q_smem)  # rows past Nq are clipped
        tma.store_wait(0)


    # -- warp-specialised: a loader warp and two consumer warp groups that run out of step ----------

    @gluon.jit
    def _ws_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                   b, h, hk, start_m, lo_blk, n_blocks, k_base):
        """One warp: the two halves of the Q block, then key blocks lo_blk .. lo_blk + n_blocks − 1 of K
        and V into the rings (block i of the walk in slot i % STAGES), each slot
        refilled once both consumers have released it (its empty barrier completed a phase). A worker
        partition takes no constexpr arguments: the tile sizes come from the buffers' shapes. ``start_m``: the
        block's first row in q; ``k_base``: the row of k and v where key 0 is (a packed batch's sequence; else 0)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        NC: gl.constexpr = q_smem.shape[0]
        for i in gl.static_range(NC):  # one Q slice per consumer
            mbarrier.expect(q_bars.index(i), desc_q.block_type.nbytes)
            _tma_load(desc_q, [b, h, start_m + i * HALF_M, 0], q_bars.index(i), q_smem.index(i))
        for t in range(n_blocks):
            _ring_load(desc_k, k_ready, k_empty, k_smem, t, b, hk, k_base + (lo_blk + t) * BLOCK_N)
            _ring_load(desc_v, v_ready, v_empty, v_smem, t, b, hk, k_base + (lo_blk + t) * BLOCK_N)

    @gluon.jit
    def _mask_scores(s, start_n, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, CAUSAL: gl.constexpr):
        """s·qk_scale where key start_n + n is visible to row offs_m (``_softmax``'s mask), −∞ elsewhere."""
        cols = start_n + offs_n
        visible = (cols[None, :] < Nk) & (cols[None, :] >= offs_m[:, None] + win_off)
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
        return gl.where(visible, s * qk_scale, float("-inf"))

    @gluon.jit
    def _softmax3(s0, s1, s2, m_i, l_i, start_n, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, masked,
                  CAUSAL: gl.constexpr):
        """``_softmax`` of one 192-key block held as three 64-key score tiles s0, s1, s2 (keys start_n + 64j + n):
        one row maximum and one rescale for the three, P̃ of each tile."""
        SN: gl.constexpr = offs_n.shape[0]
        if masked:
            s0 = _mask_scores(s0, start_n, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, CAUSAL)
            s1 = _mask_scores(s1, start_n + SN, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, CAUSAL)
            s2 = _mask_scores(s2, start_n + 2 * SN, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, CAUSAL)
            m_new = gl.maximum(m_i, gl.maximum(gl.maximum(_row_max(s0), _row_max(s1)), _row_max(s2)))
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            p0 = gl.exp2(s0 - m_use[:, None])
            p1 = gl.exp2(s1 - m_use[:, None])
            p2 = gl.exp2(s2 - m_use[:, None])
        else:
            m_new = gl.maximum(m_i, gl.maximum(gl.maximum(_row_max(s0), _row_max(s1)), _row_max(s2)) * qk_scale)
            m_use = m_new
            p0 = gl.exp2(s0 * qk_scale - m_use[:, None])
            p1 = gl.exp2(s1 * qk_scale - m_use[:, None])
            p2 = gl.exp2(s2 * qk_scale - m_use[:, None])
        alpha = gl.exp2(m_i - m_use)
        l_i = l_i * alpha + (gl.sum(p0, 1) + gl.sum(p1, 1) + gl.sum(p2, 1))
        return p0, p1, p2, alpha, m_new, l_i

    @gluon.jit
    def _store_p3(p_smem, p0, p1, p2):
        """P̃'s three tiles into the warp group's shared buffers, visible to its next wgmma."""
        dtype: gl.constexpr = p_smem[0].dtype
        p_smem[0].store(p0.to(dtype))
        p_smem[1].store(p1.to(dtype))
        p_smem[2].store(p2.to(dtype))
        fence_async_shared()
        _warps_barrier()

    @gluon.jit
    def _wide_qk(q, k_smem, k_ready, u, s_zero):
        """Q·Kᵀ of the ring's u-th 192-key block: three wgmmas of 64 keys in flight, once each box has arrived."""
        BOXES: gl.constexpr = _WIDE_BOXES
        k0, slot0 = _box(k_smem, 3 * u)
        k1, slot1 = _box(k_smem, 3 * u + 1)
        k2, slot2 = _box(k_smem, 3 * u + 2)
        ph = ((3 * u) // BOXES) & 1
        mbarrier.wait(k_ready.index(slot0), ph)
        t0 = warpgroup_mma(q, k0.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(k_ready.index(slot1), ((3 * u + 1) // BOXES) & 1)
        t1 = warpgroup_mma(q, k1.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(k_ready.index(slot2), ((3 * u + 2) // BOXES) & 1)
        t2 = warpgroup_mma(q, k2.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        return t0, t1, t2

    @gluon.jit
    def _wide_pv(p_smem, v_smem, v_ready, u, acc, PACKED: gl.constexpr = False, end=0):
        """O += P̃·V of the ring's u-th 192-key block: three wgmmas of k = 64 reading P̃ from ``p_smem``, in flight.
        ``PACKED``: value rows from ``end`` on (the next sequence's) set to 0 first."""
        BOXES: gl.constexpr = _WIDE_BOXES
        SN: gl.constexpr = v_smem.shape[3]
        for j in gl.static_range(3):
            vj, slot = _box(v_smem, 3 * u + j)
            mbarrier.wait(v_ready.index(slot), ((3 * u + j) // BOXES) & 1)
            if PACKED:
                if end < (j + 1) * SN:
                    _zero_past(vj, end - j * SN)
            acc = warpgroup_mma(p_smem[j], vj, acc, is_async=True)
        return acc

    @gluon.jit
    def _wide_release(empty, u, BOXES: gl.constexpr):
        """This consumer's release of the ring's u-th 192-key block's three boxes in ``empty``."""
        for j in gl.static_range(3):
            mbarrier.arrive(empty.index((3 * u + j) % BOXES), count=1)

    @gluon.jit
    def _wide_steps(q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, q_empty, HALF: gl.constexpr, it0,
                    n_blocks, start0, lo_full, full, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, m_i, l_i, acc,
                    s_zero, CAUSAL: gl.constexpr, PACKED: gl.constexpr):
        """``_ws_consumer``'s walk over 192-key blocks (``WIDE_KEYS``, FlashAttention-3's D = 64 tile): each block's
        Q·Kᵀ as three wgmmas of 64 keys, one softmax step for the three (``_softmax3``), P̃ through this warp group's
        shared buffer (three 64 × 64 tiles: its scores' registers are free again before the next block's arrive),
        and P̃·V as three wgmmas of k = 64 reading it, in flight under the next block's softmax as in the 128-key
        walk. Returns (acc, m, l)."""
        HALF_M: gl.constexpr = q.shape[0]
        SN: gl.constexpr = offs_n.shape[0]
        BOXES: gl.constexpr = _WIDE_BOXES
        dtype: gl.constexpr = q.dtype
        p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF_M, SN], dtype)
        p_ab = gl.allocate_shared_memory(dtype, [2, HALF_M, SN], p_layout)  # (three tiles: two buffers, 24 KB)
        p_c = gl.allocate_shared_memory(dtype, [1, HALF_M, SN], p_layout)
        p_smem = (p_ab.index(0), p_ab.index(1), p_c.index(0))
        if n_blocks > 0:
            t0, t1, t2 = _wide_qk(q, k_smem, k_ready, it0, s_zero)
            s0, s1, s2 = warpgroup_mma_wait(0, deps=(t0, t1, t2))
            _wide_release(k_empty, it0, BOXES)
            if q_empty is not None:
                if n_blocks == 1:
                    mbarrier.arrive(q_empty.index(HALF), count=1)
            p0, p1, p2, alpha, m_i, l_i = _softmax3(s0, s1, s2, m_i, l_i, start0, offs_m, offs_n, Nk, causal_off,
                                                    win_off, qk_scale, (start0 < lo_full) | (start0 >= full), CAUSAL)
            _store_p3(p_smem, p0, p1, p2)
            for t in range(1, n_blocks):
                u = it0 + t
                t0, t1, t2 = _wide_qk(q, k_smem, k_ready, u, s_zero)
                a_tok = _wide_pv(p_smem, v_smem, v_ready, u - 1, acc)
                s0, s1, s2 = warpgroup_mma_wait(3, deps=(t0, t1, t2))  # the scores done, P̃·V still running
                _wide_release(k_empty, u, BOXES)
                if q_empty is not None:
                    if t == n_blocks - 1:
                        mbarrier.arrive(q_empty.index(HALF), count=1)
                start_n = start0 + t * _WIDE_KEYS
                p0, p1, p2, alpha, m_i, l_i = _softmax3(s0, s1, s2, m_i, l_i, start_n, offs_m, offs_n, Nk,
                                                        causal_off, win_off, qk_scale,
                                                        (start_n < lo_full) | (start_n >= full), CAUSAL)
                acc = warpgroup_mma_wait(0, deps=(a_tok, ))
                _wide_release(v_empty, u - 1, BOXES)
                acc = _scale_rows(acc, alpha)
                _store_p3(p_smem, p0, p1, p2)  # (the P̃·V that read the buffer has completed)
            u = it0 + n_blocks - 1
            a_tok = _wide_pv(p_smem, v_smem, v_ready, u, acc, PACKED, Nk - (start0 + (n_blocks - 1) * _WIDE_KEYS))
            acc = warpgroup_mma_wait(0, deps=(a_tok, ))
            _wide_release(v_empty, u, BOXES)
        return acc, m_i, l_i

    @gluon.jit
    def _pass_blocks(k_ready, v_ready, k_empty, v_empty, u0, u1, STAGES: gl.constexpr):
        """The ring's uses u0 .. u1 − 1, which hold no key this consumer's rows see: each slot given back once it has
        been filled (a release before that would count toward the slot's previous use)."""
        for u in range(u0, u1):
            slot = u % STAGES
            phase = (u // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            mbarrier.arrive(k_empty.index(slot), count=1)
            mbarrier.wait(v_ready.index(slot), phase)
            mbarrier.arrive(v_empty.index(slot), count=1)

    @gluon.jit
    def _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                     HALF: gl.constexpr, CAUSAL: gl.constexpr, ALIBI: gl.constexpr = False, slope2=0.0, alibi_off=0,
                     it0=0, q_phase=0, q_empty=None, o_smem=None, q_base=0, O=None, stride_on=0,
                     EXP_POLY: gl.constexpr = 0):
        """One warp group: HALF_M query rows (half HALF of the block), the same schedule as the
        single-program kernel, releasing each K and V slot as soon as its wgmma has completed. Tile
        sizes come from the buffers' shapes (partitions take no constexpr arguments). ALIBI: the scores
        less slope2·|i + alibi_off − j| (``_softmax_alibi``). One tile of a persistent program (``q_empty``
        and ``o_smem`` given): its key blocks are the ring's uses it0, it0 + 1, ... (slot and phase from there),
        its Q slice arrives in phase ``q_phase`` and is released on ``q_empty`` once its last Q·Kᵀ is done,
        and O leaves through ``o_smem``, whose previous store is waited for first and this one's later.
        A packed batch's sequence (``O`` given): rows and keys counted from the sequence's first (Nq, Nk its
        lengths), its rows of q and O from row ``q_base`` of the packed tensors, ``LSE`` and ``O`` (row stride
        ``stride_on``) pointing at its first row; a slice that reaches past the sequence's last row is stored
        by masked stores, not TMA (whose box would write into the next sequence's rows)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        HEAD_D: gl.constexpr = q_smem.shape[4]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        STAGES: gl.constexpr = k_smem.shape[0]
        dtype: gl.constexpr = desc_o.dtype
        SN: gl.constexpr = _SUB_KEYS if BLOCK_N == _WIDE_KEYS else BLOCK_N  # keys of one Q·Kᵀ wgmma
        NC: gl.constexpr = q_smem.shape[0]  # consumer warp groups
        PP: gl.constexpr = _PINGPONG and NC > 1  # turns at the tensor cores (``PINGPONG``)
        # (where it was measured: dense calls; ALiBi and packed batches as before, whose D = 128 builds spill with it
        # under triton 3.9)
        PACK: gl.constexpr = _PACK_P and not ALIBI and O is None
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, SN, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        TAU: gl.constexpr = _RESCALE_TAU if HEAD_D >= _RESCALE_FROM_D else 0.0
        row0 = start_m + HALF * HALF_M
        if CAUSAL:
            full = gl.maximum(gl.minimum(Nk, row0 + 1 + causal_off), 0)
        else:
            full = Nk
        full = (full // BLOCK_N) * BLOCK_N
        lo_full = gl.maximum(row0 + HALF_M - 1 + win_off, 0)  # keys every row of this half sees from
        lo_full = gl.cdiv(lo_full, BLOCK_N) * BLOCK_N
        # (not with PINGPONG, whose turns need every group to take every step; not with ALiBi, whose builds spill
        # more with it: D = 128 without a mask 0 -> 120 bytes under triton 3.9, D = 64 232 -> 240 under 3.6)
        OWN: gl.constexpr = _OWN_BLOCKS and BLOCK_N != _WIDE_KEYS and not PP and not ALIBI
        if OWN:  # this group's own blocks (``group_blocks``): the tile's others are passed on unread
            if CAUSAL:
                own_hi = gl.maximum(gl.minimum(Nk, row0 + HALF_M + causal_off), 0)
            else:
                own_hi = Nk
            first = gl.minimum(gl.maximum(gl.maximum(row0 + win_off, 0) // BLOCK_N - lo_blk, 0), n_blocks)
            end = gl.maximum(gl.minimum(gl.cdiv(own_hi, BLOCK_N) - lo_blk, n_blocks), first)
            if row0 >= Nq:  # (rows none of which is stored)
                end = first
            _pass_blocks(k_ready, v_ready, k_empty, v_empty, it0, it0 + first, STAGES)
            tail0 = it0 + end
            tail1 = it0 + n_blocks
            it0 = it0 + first
            lo_blk = lo_blk + first
            n_blocks = end - first
        start0 = lo_blk * BLOCK_N

        offs_m = row0 + gl.arange(0, HALF_M, layout=row_s)
        offs_n = gl.arange(0, SN, layout=col_s)
        if ALIBI:
            c = slope2 * offs_n.to(gl.float32)
        m_i = gl.full([HALF_M], float("-inf"), gl.float32, layout=row_s)
        if _ROW_SUM_LANES and not ALIBI and BLOCK_N != _WIDE_KEYS:  # each thread's partial row sums (``_lane_sums``)
            l_i = _lane_sums(gl.zeros([HALF_M, SN], gl.float32, layout=s_layout))
        else:
            l_i = gl.zeros([HALF_M], gl.float32, layout=row_s)
        acc = gl.zeros([HALF_M, HEAD_D], gl.float32, layout=o_layout)
        s_zero = gl.zeros([HALF_M, SN], gl.float32, layout=s_layout)
        q_tile = q_smem.index(HALF)
        q = q_tile.reshape([HALF_M, HEAD_D])
        mbarrier.wait(q_bars.index(HALF), q_phase)
        # Q·Kᵀ's A from registers (``Q_REGS``; not in packed or polynomial builds, which spill with it)
        QR: gl.constexpr = (_Q_REGS > 0 and HEAD_D >= _Q_REGS and BLOCK_N != _WIDE_KEYS and not ALIBI and O is None
                            and EXP_POLY == 0)
        if QR:
            q_op = q.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))
            if q_empty is not None:  # the slot is read: the loader may bring the next tile's Q
                mbarrier.arrive(q_empty.index(HALF), count=1)
        else:
            q_op = q

        if BLOCK_N == _WIDE_KEYS:
            gl.static_assert(not ALIBI, "192-key blocks: no ALiBi build")
            acc, m_i, l_i = _wide_steps(q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, q_empty, HALF, it0,
                                        n_blocks, start0, lo_full, full, offs_m, offs_n, Nk, causal_off, win_off,
                                        qk_scale, m_i, l_i, acc, s_zero, CAUSAL, O is not None)
        elif n_blocks > 0:
            slot0 = it0 % STAGES
            mbarrier.wait(k_ready.index(slot0), (it0 // STAGES) & 1)
            s_tok = warpgroup_mma(q_op, k_smem.index(slot0).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                                  use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s_tok, ))
            mbarrier.arrive(k_empty.index(slot0), count=1)
            if q_empty is not None and not QR:
                if n_blocks == 1:  # the tile's last product that reads Q: the loader may bring the next tile's
                    mbarrier.arrive(q_empty.index(HALF), count=1)
            if ALIBI:
                p, alpha, m_i, l_i = _softmax_alibi(s, m_i, l_i, start0, row0, offs_m, offs_n, Nk, causal_off, win_off,
                                                    alibi_off, qk_scale, slope2, c,
                                                    (start0 < lo_full) | (start0 >= full), CAUSAL)
            else:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, start0, offs_m, offs_n, Nk, causal_off, win_off, qk_scale,
                                              (start0 < lo_full) | (start0 >= full), CAUSAL, EXP_POLY, TAU)
            p_op = gl.convert_layout(_to_16(p, dtype, PACK), p_layout)
            if PP:
                if q_empty is None:  # a grid program: the first group's first turn is given here (a persistent
                    if HALF == 0:  # program's, once, by its consumer loop)
                        _turn(_PINGPONG_BAR0, True)
            for t in range(1, n_blocks):
                u = it0 + t  # this block's use of the ring
                slot = u % STAGES
                prev = (u - 1) % STAGES
                mbarrier.wait(k_ready.index(slot), (u // STAGES) & 1)
                if PP:  # this group's turn at the tensor cores
                    _turn(_PINGPONG_BAR0 + HALF, False)
                s_tok = warpgroup_mma(q_op, k_smem.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                                      use_acc=False, is_async=True)
                mbarrier.wait(v_ready.index(prev), ((u - 1) // STAGES) & 1)
                acc_tok = warpgroup_mma(p_op, v_smem.index(prev).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
                if PP:  # and the next group's
                    _turn(_PINGPONG_BAR0 + (HALF + 1) % NC, True)
                s = warpgroup_mma_wait(1, deps=(s_tok, ))
                mbarrier.arrive(k_empty.index(slot), count=1)
                if q_empty is not None and not QR:
                    if t == n_blocks - 1:
                        mbarrier.arrive(q_empty.index(HALF), count=1)
                start_n = start0 + t * BLOCK_N
                if ALIBI:
                    p, alpha, m_i, l_i = _softmax_alibi(s, m_i, l_i, start_n, row0, offs_m, offs_n, Nk, causal_off,
                                                        win_off, alibi_off, qk_scale, slope2, c,
                                                        (start_n < lo_full) | (start_n >= full), CAUSAL)
                else:
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, start_n, offs_m, offs_n, Nk, causal_off, win_off,
                                                  qk_scale, (start_n < lo_full) | (start_n >= full), CAUSAL, EXP_POLY,
                                                  TAU)
                acc, p_op = warpgroup_mma_wait(0, deps=(acc_tok, p_op))
                mbarrier.arrive(v_empty.index(prev), count=1)
                acc = _scale_rows(acc, alpha)
                p_op = gl.convert_layout(_to_16(p, dtype, PACK), p_layout)
            last = (it0 + n_blocks - 1) % STAGES
            mbarrier.wait(v_ready.index(last), ((it0 + n_blocks - 1) // STAGES) & 1)
            if O is not None:  # a packed sequence: its last block's keys past Nk are the next sequence's
                end = Nk - (start0 + (n_blocks - 1) * BLOCK_N)
                if end < BLOCK_N:
                    _zero_past(v_smem.index(last).reshape([BLOCK_N, HEAD_D]), end)
            acc_tok = warpgroup_mma(p_op, v_smem.index(last).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc_tok, ))
            mbarrier.arrive(v_empty.index(last), count=1)
        if OWN:
            _pass_blocks(k_ready, v_ready, k_empty, v_empty, tail0, tail1, STAGES)
        if q_empty is not None and not QR:
            if n_blocks == 0:  # (no product read this Q slice)
                mbarrier.arrive(q_empty.index(HALF), count=1)

        if len(l_i.shape) == 2:
            l_i = gl.convert_layout(gl.sum(l_i, 1), row_s)
        empty = l_i == 0.0
        l_safe = gl.where(empty, 1.0, l_i)
        lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * _LN2)
        if O is None:
            gl.store(LSE + bh.to(gl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)
        else:
            gl.store(LSE + offs_m, lse, mask=offs_m < Nq)
        out = acc * gl.convert_layout(1.0 / l_safe, row_o)[:, None]
        if O is not None:  # a packed batch's sequence
            if row0 + HALF_M <= Nq:
                if o_smem is None:
                    q.store(out.to(dtype))
                    fence_async_shared()
                    _tma_store(desc_o, [b, h, q_base + row0, 0], q_tile)
                    tma.store_wait(0)
                else:
                    o_tile = o_smem.index(HALF)
                    tma.store_wait(0)
                    o_tile.reshape([HALF_M, HEAD_D]).store(out.to(dtype))
                    fence_async_shared()
                    _tma_store(desc_o, [b, h, q_base + row0, 0], o_tile)
            else:  # the sequence's last rows: a box would write into the next sequence's
                rows = row0 + gl.arange(0, HALF_M, layout=row_o)
                cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
                ptrs = O + rows[:, None].to(gl.int64) * stride_on + cols[None, :]
                gl.store(ptrs, out.to(dtype), mask=(rows[:, None] < Nq) & (cols[None, :] < HEAD_D))
        elif o_smem is None:
            q.store(out.to(dtype))  # this half's Q buffer is free: its wgmmas have completed
            fence_async_shared()
            _tma_store(desc_o, [b, h, row0, 0], q_tile)  # rows past Nq are clipped
            tma.store_wait(0)
        else:  # a buffer of its own: the previous tile's store from it read out first, this one's waited for later
            o_tile = o_smem.index(HALF)
            tma.store_wait(0)
            o_tile.reshape([HALF_M, HEAD_D]).store(out.to(dtype))
            fence_async_shared()
            _tma_store(desc_o, [b, h, row0, 0], o_tile)

    @gluon.jit
    def _ws_consumer_0_causal(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, True,
                     EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_0_full(EXP_POLY: gl.constexpr,
                            desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, False,
                     EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_causal(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, True,
                     EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_full(EXP_POLY: gl.constexpr,
                            desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, False,
                     EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_causal(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, True,
                     EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_full(EXP_POLY: gl.constexpr,
                            desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                              b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, False,
                     EXP_POLY=EXP_POLY)

    # -- a packed batch's sequence: three more arguments (``_ws_consumer``'s q_base, O, stride_on)

    @gluon.jit
    def _ws_consumer_0_causal_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, True,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_0_full_packed(EXP_POLY: gl.constexpr,
                                   desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, False,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_causal_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, True,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_full_packed(EXP_POLY: gl.constexpr,
                                   desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, False,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_causal_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, True,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_full_packed(EXP_POLY: gl.constexpr,
                                   desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                                     v_empty, b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off,
                                     qk_scale, q_base, O, stride_on):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, False,
                     q_base=q_base, O=O, stride_on=stride_on, EXP_POLY=EXP_POLY)

    # -- the same with ALiBi: two more arguments, the slope in log2 units (slope2) and the bias's offset

    @gluon.jit
    def _ws_consumer_0_causal_alibi(EXP_POLY: gl.constexpr,
                                    desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                    b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                    slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, True, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_0_full_alibi(EXP_POLY: gl.constexpr,
                                  desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                  b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                  slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 0, False, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_causal_alibi(EXP_POLY: gl.constexpr,
                                    desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                    b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                    slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, True, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_1_full_alibi(EXP_POLY: gl.constexpr,
                                  desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                  b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                  slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 1, False, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_causal_alibi(EXP_POLY: gl.constexpr,
                                    desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                    b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                    slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, True, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _ws_consumer_2_full_alibi(EXP_POLY: gl.constexpr,
                                  desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                                  b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                                  slope2, alibi_off):
        _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                     b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, 2, False, True,
                     slope2, alibi_off, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _attn_fwd_gluon_ws(desc_q, desc_k, desc_v, desc_o, LSE, H, G, Nq, Nk, causal_off, win_off, qk_scale,
                           m_shift, chunk, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                           STAGES: gl.constexpr, CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                           SLOPES=None, stride_sb=None, stride_sh=None, alibi_off=None, ALIBI: gl.constexpr = False,
                           CU_Q=None, CU_K=None, O=None, stride_on=0, stride_oh=0, VARLEN: gl.constexpr = False,
                           EXP_POLY: gl.constexpr = 0):
        """Grid (query blocks · chunk, B·H / chunk); BLOCK_M / 64 consumer warp groups (2 or 3) of 4 warps, 64
        query rows each, and one loader warp. Descriptors as ``_attn_fwd_gluon``'s, Q and O with blocks of 64 rows.
        The consumers share the K/V ring but wait only on barriers, never on each other, so one's
        softmax falls under another's wgmmas (FlashAttention-3's producer / consumers). ALIBI and its
        four arguments as in ``_attn_fwd_gluon``: the slope is loaded once here and handed to the consumers.
        Causal: the programs of each group of ``chunk`` heads (of B·H) start the longest walks first, and query
        block m > 0 starts ``m_shift`` rows early (``query_block_start``); without a mask chunk = 1, m_shift = 0.
        VARLEN: a packed batch, grid (sequences · H, query blocks of the longest sequence), the blocks dealt last
        first (the longest causal walks first, the short sequences' blocks fill the tail); Nq, Nk are total_q,
        total_k, descriptors over (1, H|Hkv, total, D) views, ``LSE`` (H, total_q), ``O`` the output's pointer
        (row stride ``stride_on``, head stride ``stride_oh``) for the masked stores of a sequence's last rows.
        Each program reads its sequence's bounds from CU_Q, CU_K (clamped into the packed tensors: bad lengths
        give wrong numbers, never an access outside them), returns at once past the sequence's last row, and
        adds the sequence's Nk − Nq to causal_off and win_off. No ALiBi, chunk = 1, m_shift = 0."""
        HALF_M: gl.constexpr = 64
        NC: gl.constexpr = BLOCK_M // HALF_M
        dtype: gl.constexpr = desc_q.dtype
        if VARLEN:
            bh = gl.program_id(0)
            pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
            b = bh // H
            q_base = gl.minimum(gl.maximum(gl.load(CU_Q + b), 0), Nq).to(gl.int32)  # (int64 lengths: clamped first)
            q_end = gl.minimum(gl.maximum(gl.load(CU_Q + b + 1), q_base), Nq).to(gl.int32)
            k_base = gl.minimum(gl.maximum(gl.load(CU_K + b), 0), Nk).to(gl.int32)
            k_end = gl.minimum(gl.maximum(gl.load(CU_K + b + 1), k_base), Nk).to(gl.int32)
            lse_row = (bh % H).to(gl.int64) * Nq + q_base  # LSE (H, total_q): the sequence's first row
            Nq = q_end - q_base
            Nk = k_end - k_base
            start_m = pid_m * BLOCK_M
            if start_m >= Nq:  # the grid covers the longest sequence; this one is shorter
                return
            causal_off = causal_off + Nk - Nq
            win_off = win_off + Nk - Nq
        else:
            pid_m = gl.program_id(0)
            bh = gl.program_id(1)
            if CAUSAL:  # the longest walks first, over `chunk` heads at a time
                bh = bh * chunk + pid_m % chunk
                pid_m = gl.num_programs(0) // chunk - 1 - pid_m // chunk
                start_m = gl.maximum(pid_m * BLOCK_M - m_shift, 0)
            else:
                start_m = pid_m * BLOCK_M
            b = bh // H
            q_base = 0
            k_base = 0
        h = bh % H
        hk = h // G
        if CAUSAL:
            hi = gl.maximum(gl.minimum(Nk, start_m + BLOCK_M + causal_off), 0)
        else:
            hi = Nk
        lo_blk = gl.maximum(start_m + win_off, 0) // BLOCK_N  # blocks left of the window are skipped
        n_blocks = gl.maximum(gl.cdiv(hi, BLOCK_N) - lo_blk, 0)

        q_smem = gl.allocate_shared_memory(dtype, [NC, 1, 1, HALF_M, HEAD_D], desc_q.layout)
        if BLOCK_N == _WIDE_KEYS:  # eight 64-key boxes (``_ring_load``)
            k_smem = gl.allocate_shared_memory(dtype, [_WIDE_BOXES, 1, 1, 64, HEAD_D], desc_k.layout)
            v_smem = gl.allocate_shared_memory(dtype, [_WIDE_BOXES, 1, 1, 64, HEAD_D], desc_v.layout)
        else:
            k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_k.layout)
            v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_v.layout)
        RING: gl.constexpr = _WIDE_BOXES if BLOCK_N == _WIDE_KEYS else STAGES  # the ring's barriers
        q_bars = gl.allocate_shared_memory(gl.int64, [NC, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NC):
            mbarrier.init(q_bars.index(i), count=1)
        for i in gl.static_range(RING):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=NC)  # one arrival per consumer warp group
            mbarrier.init(v_empty.index(i), count=NC)

        consumer_args = (desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                         b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale)
        if VARLEN:  # the descriptors' batch 0, the sequence's rows from q_base and k_base
            loader_args = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                           v_empty, 0, h, hk, q_base + start_m, lo_blk, n_blocks, k_base)
            packed_args = (desc_o, LSE + lse_row, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                           v_empty, 0, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                           q_base, O + q_base.to(gl.int64) * stride_on + h.to(gl.int64) * stride_oh, stride_on)
        else:
            loader_args = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                           v_empty, b, h, hk, start_m, lo_blk, n_blocks, k_base)
        # a partition's arguments lose their constexpr-ness: the slices, the mask and ALiBi are baked into wrappers;
        # EXP_POLY goes first, in a tuple added on the left (an assigned tuple makes a constexpr a run-time value, and
        # one added on the right unwraps it into a bare int)
        if VARLEN:
            if NC == 3:
                if CAUSAL:
                    gl.warp_specialize([(_ws_consumer_0_causal_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_1_causal_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_2_causal_packed, (EXP_POLY,) + packed_args),
                                        (_ws_loader, loader_args)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_ws_consumer_0_full_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_1_full_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_2_full_packed, (EXP_POLY,) + packed_args),
                                        (_ws_loader, loader_args)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
            else:
                if CAUSAL:
                    gl.warp_specialize([(_ws_consumer_0_causal_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_1_causal_packed, (EXP_POLY,) + packed_args),
                                        (_ws_loader, loader_args)],
                                       [4, 1], [CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_ws_consumer_0_full_packed, (EXP_POLY,) + packed_args),
                                        (_ws_consumer_1_full_packed, (EXP_POLY,) + packed_args),
                                        (_ws_loader, loader_args)],
                                       [4, 1], [CONSUMER_REGS, 24])
        elif ALIBI:
            slope2 = gl.load(SLOPES + b * stride_sb + h * stride_sh).to(gl.float32) * _LOG2E
            alibi_args = (desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                          b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale,
                          slope2, alibi_off)
            if NC == 3:
                if CAUSAL:
                    gl.warp_specialize([(_ws_consumer_0_causal_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_1_causal_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_2_causal_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_loader, loader_args)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_ws_consumer_0_full_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_1_full_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_2_full_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_loader, loader_args)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
            else:
                if CAUSAL:
                    gl.warp_specialize([(_ws_consumer_0_causal_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_1_causal_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_loader, loader_args)],
                                       [4, 1], [CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_ws_consumer_0_full_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_consumer_1_full_alibi, (EXP_POLY,) + alibi_args),
                                        (_ws_loader, loader_args)],
                                       [4, 1], [CONSUMER_REGS, 24])
        elif NC == 3:
            if CAUSAL:
                gl.warp_specialize([(_ws_consumer_0_causal, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_1_causal, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_2_causal, (EXP_POLY,) + consumer_args), (_ws_loader, loader_args)],
                                   [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
            else:
                gl.warp_specialize([(_ws_consumer_0_full, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_1_full, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_2_full, (EXP_POLY,) + consumer_args), (_ws_loader, loader_args)],
                                   [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
        else:
            if CAUSAL:
                gl.warp_specialize([(_ws_consumer_0_causal, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_1_causal, (EXP_POLY,) + consumer_args),
                                    (_ws_loader, loader_args)], [4, 1], [CONSUMER_REGS, 24])
            else:
                gl.warp_specialize([(_ws_consumer_0_full, (EXP_POLY,) + consumer_args),
                                    (_ws_consumer_1_full, (EXP_POLY,) + consumer_args),
                                    (_ws_loader, loader_args)], [4, 1], [CONSUMER_REGS, 24])

    # -- persistent: one program per SM takes tiles in turn, the next tile's loads under this one's epilogue ----

    @gluon.jit
    def _wsp_tile(tile, n_m, H, G, Nk, causal_off, win_off, m_shift, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  CAUSAL: gl.constexpr):
        """Tile ``tile`` = (b·H + h)·n_m + query block of a persistent program: (b, h, b·H + h, K/V head, first
        row, first key block, key blocks). Causal: query block m > 0 starts ``m_shift`` rows early, as in the grid
        kernel."""
        bh = tile // n_m
        pid_m = tile % n_m
        b = bh // H
        h = bh % H
        start_m = gl.maximum(pid_m * BLOCK_M - m_shift, 0)
        if CAUSAL:
            hi = gl.maximum(gl.minimum(Nk, start_m + BLOCK_M + causal_off), 0)
        else:
            hi = Nk
        lo_blk = gl.maximum(start_m + win_off, 0) // BLOCK_N
        n_blocks = gl.maximum(gl.cdiv(hi, BLOCK_N) - lo_blk, 0)
        return b, h, bh, h // G, start_m, lo_blk, n_blocks

    @gluon.jit
    def _wsp_load_tile(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, b, h, hk, q_row, k_row, n_blocks, it, ti):
        """A persistent loader's loads of its ti-th tile: the Q slices from row ``q_row`` of (b, h) once the
        consumers released the previous tile's (``q_empty``), then ``n_blocks`` key blocks from row ``k_row`` of
        (b, hk) into the K/V ring as its uses it, it + 1, ... (each slot refilled once both consumers released it)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        for i in gl.static_range(NC):
            if ti > 0:
                mbarrier.wait(q_empty.index(i), (ti - 1) & 1)
            mbarrier.expect(q_bars.index(i), desc_q.block_type.nbytes)
            _tma_load(desc_q, [b, h, q_row + i * HALF_M, 0], q_bars.index(i), q_smem.index(i))
        for t in range(n_blocks):
            _ring_load(desc_k, k_ready, k_empty, k_smem, it + t, b, hk, k_row + t * BLOCK_N)
            _ring_load(desc_v, v_ready, v_empty, v_smem, it + t, b, hk, k_row + t * BLOCK_N)

    @gluon.jit
    def _wsp_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                    v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift, CAUSAL: gl.constexpr):
        """``_ws_loader`` for every tile of a persistent program: a tile's Q slices once their consumers have
        released the previous tile's (``q_empty``), its key blocks into the ring where the last tile's left off.
        The program's tiles: row ``program_id`` of the schedule SCHED (``n_turns`` int32 tile ids, −1 past its
        last; ``persistent_schedule``)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        it = 0
        ti = 0
        row = SCHED + gl.program_id(0) * n_turns
        for r in range(n_turns):
            tile = gl.load(row + r)
            if tile >= 0:  # (a program may hold fewer tiles than the longest row)
                b, h, bh, hk, start_m, lo_blk, n_blocks = _wsp_tile(tile, n_m, H, G, Nk, causal_off, win_off,
                                                                    m_shift, NC * HALF_M, BLOCK_N, CAUSAL)
                _wsp_load_tile(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, b, h, hk, start_m, lo_blk * BLOCK_N, n_blocks, it, ti)
                it += n_blocks
                ti += 1

    @gluon.jit
    def _wsp_loader_causal(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                           k_empty, v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift):
        _wsp_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                    v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift, True)

    @gluon.jit
    def _wsp_loader_full(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                         k_empty, v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift):
        _wsp_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                    v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift, False)

    @gluon.jit
    def _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                      v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift,
                      HALF: gl.constexpr, CAUSAL: gl.constexpr, EXP_POLY: gl.constexpr = 0):
        """``_ws_consumer`` for every tile of a persistent program (the loader's), counting the ring's uses
        across tiles."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        if _PINGPONG and NC > 1 and BLOCK_N != _WIDE_KEYS:  # the first group's first turn, once a program
            if HALF == 0:
                _turn(_PINGPONG_BAR0, True)
        it = 0
        ti = 0
        row = SCHED + gl.program_id(0) * n_turns
        for r in range(n_turns):
            tile = gl.load(row + r)
            if tile >= 0:
                b, h, bh, hk, start_m, lo_blk, n_blocks = _wsp_tile(tile, n_m, H, G, Nk, causal_off, win_off,
                                                                    m_shift, NC * HALF_M, BLOCK_N, CAUSAL)
                _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                             b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, HALF, CAUSAL,
                             False, 0.0, 0, it, ti & 1, q_empty, o_smem, EXP_POLY=EXP_POLY)
                it += n_blocks
                ti += 1
        tma.store_wait(0)

    @gluon.jit
    def _wsp_consumer_0_causal(EXP_POLY: gl.constexpr,
                               desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 0, True,
                      EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wsp_consumer_0_full(EXP_POLY: gl.constexpr,
                             desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                             k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 0, False,
                      EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wsp_consumer_1_causal(EXP_POLY: gl.constexpr,
                               desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 1, True,
                      EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wsp_consumer_1_full(EXP_POLY: gl.constexpr,
                             desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                             k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 1, False,
                      EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wsp_consumer_2_causal(EXP_POLY: gl.constexpr,
                               desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 2, True,
                      EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wsp_consumer_2_full(EXP_POLY: gl.constexpr,
                             desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                             k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED,
                             n_turns, m_shift):
        _wsp_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                      H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift, 2, False,
                      EXP_POLY=EXP_POLY)

    # -- the persistent kernel for a packed batch: tiles dealt in turns, each program's found in the kernel -------

    @gluon.jit
    def _wspv_tile(p, r, programs, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """Turn r of persistent program p over a packed batch's tiles, numbered query block last first and (sequence,
        head) within a block: tile r·programs + p on even turns, r·programs + programs − 1 − p on odd ones (causal
        walks grow with the query block, so every turn deals tiles of one size, the largest first, back and forth).
        Returns (whether the tile holds rows of its sequence, head, K/V head, first row and key block and key blocks
        in the sequence's own numbering, the sequence's first row of q and of k, its lengths, its causal_off and
        win_off). ``Nq``, ``Nk``: the packed totals, which clamp the lengths as the grid kernel does."""
        odd = r % 2
        t = r * programs + p + odd * (programs - 1 - 2 * p)
        return _wspv_tile_t(t, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, BLOCK_M, BLOCK_N, CAUSAL)

    @gluon.jit
    def _wspv_tile_t(t, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, BLOCK_M: gl.constexpr,
                     BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """``_wspv_tile`` of tile number t (query block n_m − 1 − t // n_bh, (sequence, head) t % n_bh)."""
        m = n_m - 1 - t // n_bh
        bh = t % n_bh
        b = bh // H
        h = bh % H
        q_base = gl.minimum(gl.maximum(gl.load(CU_Q + b), 0), Nq).to(gl.int32)
        q_end = gl.minimum(gl.maximum(gl.load(CU_Q + b + 1), q_base), Nq).to(gl.int32)
        k_base = gl.minimum(gl.maximum(gl.load(CU_K + b), 0), Nk).to(gl.int32)
        k_end = gl.minimum(gl.maximum(gl.load(CU_K + b + 1), k_base), Nk).to(gl.int32)
        n_q = q_end - q_base
        n_k = k_end - k_base
        start_m = m * BLOCK_M
        valid = (m >= 0) & (start_m < n_q)
        c_off = causal_off + n_k - n_q
        w_off = win_off + n_k - n_q
        if CAUSAL:
            hi = gl.maximum(gl.minimum(n_k, start_m + BLOCK_M + c_off), 0)
        else:
            hi = n_k
        lo_blk = gl.maximum(start_m + w_off, 0) // BLOCK_N
        n_blocks = gl.maximum(gl.cdiv(hi, BLOCK_N) - lo_blk, 0)
        return valid, h, h // G, start_m, lo_blk, n_blocks, q_base, k_base, n_q, n_k, c_off, w_off

    @gluon.jit
    def _wspv_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K, CAUSAL: gl.constexpr):
        """``_wsp_loader`` over a packed batch's tiles (``_wspv_tile``): rows and keys from the sequence's first."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        it = 0
        ti = 0
        p = gl.program_id(0)
        programs = gl.num_programs(0)
        for r in range(n_turns):
            valid, h, hk, start_m, lo_blk, n_blocks, q_base, k_base, n_q, n_k, c_off, w_off = _wspv_tile(
                p, r, programs, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, NC * HALF_M, BLOCK_N,
                CAUSAL)
            if valid:
                _wsp_load_tile(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, 0, h, hk, q_base + start_m, k_base + lo_blk * BLOCK_N, n_blocks, it,
                               ti)
                it += n_blocks
                ti += 1

    @gluon.jit
    def _wspv_loader_causal(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                            k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K):
        _wspv_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K, True)

    @gluon.jit
    def _wspv_loader_full(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                          k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K):
        _wspv_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K, False)

    @gluon.jit
    def _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, HALF: gl.constexpr, CAUSAL: gl.constexpr,
                       EXP_POLY: gl.constexpr = 0):
        """``_wsp_consumer`` over a packed batch's tiles (the loader's): each tile's LSE and O from its sequence's
        first row (``LSE`` (H, total_q), ``O`` the output, row stride ``stride_on``, head stride ``stride_oh``)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        if _PINGPONG and NC > 1 and BLOCK_N != _WIDE_KEYS:  # the first group's first turn, once a program
            if HALF == 0:
                _turn(_PINGPONG_BAR0, True)
        it = 0
        ti = 0
        p = gl.program_id(0)
        programs = gl.num_programs(0)
        for r in range(n_turns):
            valid, h, hk, start_m, lo_blk, n_blocks, q_base, k_base, n_q, n_k, c_off, w_off = _wspv_tile(
                p, r, programs, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, NC * HALF_M, BLOCK_N,
                CAUSAL)
            if valid:
                _ws_consumer(desc_o, LSE + (h.to(gl.int64) * Nq + q_base), q_smem, k_smem, v_smem, q_bars, k_ready,
                             v_ready, k_empty, v_empty, 0, h, 0, start_m, lo_blk, n_blocks, n_q, n_k, c_off, w_off,
                             qk_scale, HALF, CAUSAL, False, 0.0, 0, it, ti & 1, q_empty, o_smem, q_base,
                             O + q_base.to(gl.int64) * stride_on + h.to(gl.int64) * stride_oh, stride_on,
                             EXP_POLY=EXP_POLY)
                it += n_blocks
                ti += 1
        tma.store_wait(0)

    @gluon.jit
    def _wspv_consumer_0_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 0, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspv_consumer_0_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 0, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspv_consumer_1_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 1, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspv_consumer_1_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 1, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspv_consumer_2_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 2, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspv_consumer_2_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns,
                                 CU_Q, CU_K, O, stride_on, stride_oh):
        _wspv_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                       stride_on, stride_oh, 2, False, EXP_POLY=EXP_POLY)

    # -- the persistent kernel with tiles taken from a counter (dynamic): the GPU's own balance, the persistent overlap

    @gluon.jit
    def _wspd_publish(ids, id_ready, ti, ticket):
        """The loader hands tile number ``ticket`` (−1: no more) to the consumers: slot ti % 2 of ``ids``."""
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        slot = ti % 2
        ids.index(slot).store(gl.full([1], ticket, gl.int32, layout=lay))
        mbarrier.arrive(id_ready.index(slot), count=1)

    @gluon.jit
    def _wspd_take(ids, id_ready, ti):
        """A consumer warp group's ti-th tile number from the loader (−1: no more)."""
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        slot = ti % 2
        mbarrier.wait(id_ready.index(slot), (ti // 2) & 1)
        return gl.max(ids.index(slot).load(lay), 0)

    @gluon.jit
    def _wspd_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER, CAUSAL: gl.constexpr, VARLEN: gl.constexpr):
        """``_wsp_loader`` with the tiles taken from a counter: program p starts with tile number p, and after
        each tile's loads are issued takes the next number, programs + atomic_add(COUNTER, 1), until the numbers
        run out; the program that takes the last number sets COUNTER back to 0 for the next call (every other
        program has taken its last by then). Each tile number goes to the consumers through ``ids`` (two slots;
        a slot is written again only after the consumers released the Q of the tile two back, so they have read
        it). Dense calls: tile number i is tile ``SCHED[i]`` (``tile_order``); packed batches: ``_wspv_tile_t``'s
        numbering, tiles past their sequence's end skipped here and never handed on."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        it = 0
        ti = 0
        programs = gl.num_programs(0)
        ticket = gl.program_id(0)
        while ticket < n_tiles:
            if VARLEN:
                valid, h, hk, start_m, lo_blk, n_blocks, q_base, k_base, n_q, n_k, c_off, w_off = _wspv_tile_t(
                    ticket, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, NC * HALF_M, BLOCK_N, CAUSAL)
                b = 0
            else:
                b, h, bh, hk, start_m, lo_blk, n_blocks = _wsp_tile(gl.load(SCHED + ticket), n_m, H, G, Nk,
                                                                    causal_off, win_off, m_shift, NC * HALF_M,
                                                                    BLOCK_N, CAUSAL)
                valid = True
                q_base = 0
                k_base = 0
            if valid:
                _wspd_publish(ids, id_ready, ti, ticket)
                _wsp_load_tile(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                               k_empty, v_empty, b, h, hk, q_base + start_m, k_base + lo_blk * BLOCK_N, n_blocks, it,
                               ti)
                it += n_blocks
                ti += 1
            c = gl.atomic_add(COUNTER, 1)
            if c == n_tiles - 1:  # the last number of this call: every program has taken its last
                gl.atomic_xchg(COUNTER, 0)
            ticket = programs + c
        _wspd_publish(ids, id_ready, ti, -1)

    @gluon.jit
    def _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift,
                       CU_Q, CU_K, O, stride_on, stride_oh, HALF: gl.constexpr, CAUSAL: gl.constexpr,
                       VARLEN: gl.constexpr, EXP_POLY: gl.constexpr = 0):
        """``_wsp_consumer`` / ``_wspv_consumer`` over the tiles the loader hands on (``_wspd_loader``)."""
        HALF_M: gl.constexpr = q_smem.shape[3]
        NC: gl.constexpr = q_smem.shape[0]
        BLOCK_N: gl.constexpr = _WIDE_KEYS if k_smem.shape[0] == _WIDE_BOXES else k_smem.shape[3]  # (wide: 192)
        if _PINGPONG and NC > 1 and BLOCK_N != _WIDE_KEYS:  # the first group's first turn, once a program
            if HALF == 0:
                _turn(_PINGPONG_BAR0, True)
        it = 0
        ti = 0
        ticket = _wspd_take(ids, id_ready, 0)
        while ticket >= 0:
            if VARLEN:
                valid, h, hk, start_m, lo_blk, n_blocks, q_base, k_base, n_q, n_k, c_off, w_off = _wspv_tile_t(
                    ticket, n_m, n_bh, H, G, Nq, Nk, causal_off, win_off, CU_Q, CU_K, NC * HALF_M, BLOCK_N, CAUSAL)
                _ws_consumer(desc_o, LSE + (h.to(gl.int64) * Nq + q_base), q_smem, k_smem, v_smem, q_bars, k_ready,
                             v_ready, k_empty, v_empty, 0, h, 0, start_m, lo_blk, n_blocks, n_q, n_k, c_off, w_off,
                             qk_scale, HALF, CAUSAL, False, 0.0, 0, it, ti & 1, q_empty, o_smem, q_base,
                             O + q_base.to(gl.int64) * stride_on + h.to(gl.int64) * stride_oh, stride_on,
                             EXP_POLY=EXP_POLY)
            else:
                b, h, bh, hk, start_m, lo_blk, n_blocks = _wsp_tile(gl.load(SCHED + ticket), n_m, H, G, Nk,
                                                                    causal_off, win_off, m_shift, NC * HALF_M,
                                                                    BLOCK_N, CAUSAL)
                _ws_consumer(desc_o, LSE, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                             b, h, bh, start_m, lo_blk, n_blocks, Nq, Nk, causal_off, win_off, qk_scale, HALF, CAUSAL,
                             False, 0.0, 0, it, ti & 1, q_empty, o_smem, EXP_POLY=EXP_POLY)
            it += n_blocks
            ti += 1
            ticket = _wspd_take(ids, id_ready, ti)
        tma.store_wait(0)

    @gluon.jit
    def _wspd_consumer_0_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                                v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                                m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 0, True, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_1_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                                v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                                m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 1, True, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_2_causal(EXP_POLY: gl.constexpr,
                                desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                                v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                                m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 2, True, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_loader_causal(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                            v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED,
                            m_shift, CU_Q, CU_K, COUNTER):
        _wspd_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER, True, False)

    @gluon.jit
    def _wspd_consumer_0_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                              v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                              m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 0, False, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_1_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                              v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                              m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 1, False, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_2_full(EXP_POLY: gl.constexpr,
                              desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                              v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED,
                              m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 2, False, False, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_loader_full(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                          v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                          CU_Q, CU_K, COUNTER):
        _wspd_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER, False, False)

    @gluon.jit
    def _wspd_consumer_0_causal_packed(EXP_POLY: gl.constexpr,
                                       desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                       k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale,
                                       n_m, n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 0, True, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_1_causal_packed(EXP_POLY: gl.constexpr,
                                       desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                       k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale,
                                       n_m, n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 1, True, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_2_causal_packed(EXP_POLY: gl.constexpr,
                                       desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                       k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale,
                                       n_m, n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 2, True, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_loader_causal_packed(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                   k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh,
                                   n_tiles, SCHED, m_shift, CU_Q, CU_K, COUNTER):
        _wspd_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER, True, True)

    @gluon.jit
    def _wspd_consumer_0_full_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                     k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m,
                                     n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 0, False, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_1_full_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                     k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m,
                                     n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 1, False, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_consumer_2_full_packed(EXP_POLY: gl.constexpr,
                                     desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                     k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m,
                                     n_bh, SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh):
        _wspd_consumer(desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty, v_empty,
                       ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, SCHED, m_shift, CU_Q,
                       CU_K, O, stride_on, stride_oh, 2, False, True, EXP_POLY=EXP_POLY)

    @gluon.jit
    def _wspd_loader_full_packed(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                                 k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles,
                                 SCHED, m_shift, CU_Q, CU_K, COUNTER):
        _wspd_loader(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER, False, True)

    @gluon.jit
    def _wspd_specialize(dyn_c, dyn_l, NC: gl.constexpr, CAUSAL: gl.constexpr, VARLEN: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr):
        """``gl.warp_specialize`` of the dynamic persistent kernel's partitions for NC consumer warp groups
        (``dyn_c`` begins with the consumers' EXP_POLY)."""
        if VARLEN:
            if CAUSAL:
                if NC == 3:
                    gl.warp_specialize([(_wspd_consumer_0_causal_packed, dyn_c),
                                        (_wspd_consumer_1_causal_packed, dyn_c),
                                        (_wspd_consumer_2_causal_packed, dyn_c),
                                        (_wspd_loader_causal_packed, dyn_l)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspd_consumer_0_causal_packed, dyn_c),
                                        (_wspd_consumer_1_causal_packed, dyn_c),
                                        (_wspd_loader_causal_packed, dyn_l)], [4, 1], [CONSUMER_REGS, 24])
            else:
                if NC == 3:
                    gl.warp_specialize([(_wspd_consumer_0_full_packed, dyn_c),
                                        (_wspd_consumer_1_full_packed, dyn_c),
                                        (_wspd_consumer_2_full_packed, dyn_c),
                                        (_wspd_loader_full_packed, dyn_l)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspd_consumer_0_full_packed, dyn_c),
                                        (_wspd_consumer_1_full_packed, dyn_c),
                                        (_wspd_loader_full_packed, dyn_l)], [4, 1], [CONSUMER_REGS, 24])
        else:
            if CAUSAL:
                if NC == 3:
                    gl.warp_specialize([(_wspd_consumer_0_causal, dyn_c),
                                        (_wspd_consumer_1_causal, dyn_c),
                                        (_wspd_consumer_2_causal, dyn_c), (_wspd_loader_causal, dyn_l)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspd_consumer_0_causal, dyn_c),
                                        (_wspd_consumer_1_causal, dyn_c),
                                        (_wspd_loader_causal, dyn_l)], [4, 1], [CONSUMER_REGS, 24])
            else:
                if NC == 3:
                    gl.warp_specialize([(_wspd_consumer_0_full, dyn_c),
                                        (_wspd_consumer_1_full, dyn_c),
                                        (_wspd_consumer_2_full, dyn_c), (_wspd_loader_full, dyn_l)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspd_consumer_0_full, dyn_c),
                                        (_wspd_consumer_1_full, dyn_c),
                                        (_wspd_loader_full, dyn_l)], [4, 1], [CONSUMER_REGS, 24])

    @gluon.jit
    def _attn_fwd_gluon_wsp(desc_q, desc_k, desc_v, desc_o, LSE, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m,
                            SCHED, n_turns, m_shift, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr,
                            BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                            CONSUMER_REGS: gl.constexpr, CU_Q=None, CU_K=None, O=None, stride_on=0, stride_oh=0,
                            n_bh=0, VARLEN: gl.constexpr = False, COUNTER=None, n_tiles=0,
                            DYNAMIC: gl.constexpr = False, EXP_POLY: gl.constexpr = 0):
        """``_attn_fwd_gluon_ws`` as a persistent kernel (no ALiBi): a grid of at most one program per SM, program
        p taking the tiles of row p of the schedule SCHED (int32, ``n_turns`` a row, −1 past a program's last
        tile; tile = (b·H + h)·``n_m`` + query block; ``persistent_schedule`` makes it). The K/V ring runs on
        across tiles, so the loader brings the next tile's Q (once its consumers' last Q·Kᵀ is done) and key
        blocks while the consumers finish this one; O leaves through buffers of its own, the TMA store waited for
        only before the buffer's next use. ``m_shift`` as in the grid kernel.
        VARLEN: a packed batch as the grid kernel takes one (its arguments), SCHED None and m_shift 0: the tiles of
        ``n_m`` query blocks of ``n_bh`` (sequence, head) pairs dealt to the programs in ``n_turns`` turns
        (``_wspv_tile``), a tile past its sequence's last row skipped.
        DYNAMIC: the tiles taken from the int32 counter COUNTER (0 between calls) in the order of their numbers,
        ``n_tiles`` of them, as each program's loader is ready for the next (``_wspd_loader``): dense calls' SCHED is
        then ``tile_order``'s list (int32, ``n_tiles``), n_turns unused; a packed batch's numbers are
        ``_wspv_tile_t``'s. The same products in the same order per tile: the same bits as the grid kernel."""
        HALF_M: gl.constexpr = 64
        NC: gl.constexpr = BLOCK_M // HALF_M
        dtype: gl.constexpr = desc_q.dtype
        q_smem = gl.allocate_shared_memory(dtype, [NC, 1, 1, HALF_M, HEAD_D], desc_q.layout)
        o_smem = gl.allocate_shared_memory(dtype, [NC, 1, 1, HALF_M, HEAD_D], desc_o.layout)
        gl.static_assert(BLOCK_N != _WIDE_KEYS, "192-key blocks: a grid build only (no room for the O buffers)")
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], desc_v.layout)
        q_bars = gl.allocate_shared_memory(gl.int64, [NC, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [NC, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NC):
            mbarrier.init(q_bars.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=NC)  # one arrival per consumer warp group
            mbarrier.init(v_empty.index(i), count=NC)
        if DYNAMIC:
            ids = gl.allocate_shared_memory(gl.int32, [2, 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            id_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(2):
                mbarrier.init(id_ready.index(i), count=1)
            dyn_l = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                     v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_tiles, SCHED, m_shift,
                     CU_Q, CU_K, COUNTER)
            # (the consumers' tuple written out here: an assigned tuple's constexprs become run-time values)
            _wspd_specialize((EXP_POLY, desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                              k_empty, v_empty, ids, id_ready, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh,
                              SCHED, m_shift, CU_Q, CU_K, O, stride_on, stride_oh), dyn_l, NC, CAUSAL, VARLEN,
                             CONSUMER_REGS)
            return
        consumer_args = (desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                         v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, SCHED, n_turns, m_shift)
        loader_args = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                       v_empty, H, G, Nk, causal_off, win_off, n_m, SCHED, n_turns, m_shift)
        if VARLEN:
            packed_args = (desc_o, LSE, q_smem, o_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready, k_empty,
                           v_empty, H, G, Nq, Nk, causal_off, win_off, qk_scale, n_m, n_bh, n_turns, CU_Q, CU_K, O,
                           stride_on, stride_oh)
            packed_loader = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, v_ready,
                             k_empty, v_empty, H, G, Nq, Nk, causal_off, win_off, n_m, n_bh, n_turns, CU_Q, CU_K)
            if NC == 3:
                if CAUSAL:
                    gl.warp_specialize([(_wspv_consumer_0_causal, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_1_causal, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_2_causal, (EXP_POLY,) + packed_args),
                                        (_wspv_loader_causal, packed_loader)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspv_consumer_0_full, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_1_full, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_2_full, (EXP_POLY,) + packed_args),
                                        (_wspv_loader_full, packed_loader)],
                                       [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
            else:
                if CAUSAL:
                    gl.warp_specialize([(_wspv_consumer_0_causal, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_1_causal, (EXP_POLY,) + packed_args),
                                        (_wspv_loader_causal, packed_loader)], [4, 1], [CONSUMER_REGS, 24])
                else:
                    gl.warp_specialize([(_wspv_consumer_0_full, (EXP_POLY,) + packed_args),
                                        (_wspv_consumer_1_full, (EXP_POLY,) + packed_args),
                                        (_wspv_loader_full, packed_loader)], [4, 1], [CONSUMER_REGS, 24])
        elif NC == 3:
            if CAUSAL:
                gl.warp_specialize([(_wsp_consumer_0_causal, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_1_causal, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_2_causal, (EXP_POLY,) + consumer_args),
                                    (_wsp_loader_causal, loader_args)],
                                   [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
            else:
                gl.warp_specialize([(_wsp_consumer_0_full, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_1_full, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_2_full, (EXP_POLY,) + consumer_args),
                                    (_wsp_loader_full, loader_args)],
                                   [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
        else:
            if CAUSAL:
                gl.warp_specialize([(_wsp_consumer_0_causal, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_1_causal, (EXP_POLY,) + consumer_args),
                                    (_wsp_loader_causal, loader_args)], [4, 1], [CONSUMER_REGS, 24])
            else:
                gl.warp_specialize([(_wsp_consumer_0_full, (EXP_POLY,) + consumer_args),
                                    (_wsp_consumer_1_full, (EXP_POLY,) + consumer_args),
                                    (_wsp_loader_full, loader_args)], [4, 1], [CONSUMER_REGS, 24])


def gluon_supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True when the Gluon kernel can take this call: Hopper (sm_90), float16/bfloat16, D = 64 or 128,
    last dims contiguous and 16-byte aligned for tensor descriptors. Variants are the caller's check."""
    if not HAVE_GLUON or not q.is_cuda or torch.version.hip is not None:
        return False
    from .config import device_capability, tma_ok

    if device_capability(q.device) != (9, 0):
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or q.shape[-1] not in GLUON_HEAD_DIMS:
        return False

    return tma_ok(q, k, v)


def _check_tiles(block_m: int, block_n: int, stages: int, num_warps: int, warp_spec: bool, head_dim: int | None = None,
                 alibi: bool = False, persistent: bool = False) -> None:
    """Refuse tiles the Gluon forward has no build for. ``block_n`` 256 (``LONG_KEYS``) is the warp-specialised
    kernel's at D = 64 with two consumer warp groups (block_m 128), a ring of two stages and no ALiBi; ``block_n`` 192
    (``WIDE_KEYS``) the warp-specialised grid kernel's at D = 64 with two stages and no ALiBi."""
    if warp_spec:  # (at most 4 stages: a ring of 8 slots is the 192-key blocks' boxes)
        ok = block_m in (128, 192) and num_warps == 4 and stages <= 4
        need = ("block_m = 128 or 192, num_warps = 4 and at most 4 stages with warp_spec (two or three 64-row consumer "
                "warp groups)")
    else:
        ok = block_m == 16 * num_warps
        need = "block_m = 16·num_warps (one 16-row wgmma slice per warp)"
    if block_n == 256:
        if not (warp_spec and block_m == 128 and head_dim == 64 and stages == 2 and not alibi):
            raise ValueError("the Gluon forward takes block_n 256 only at head dim 64, warp-specialised with block_m "
                             f"128, two stages and no ALiBi; got head_dim={head_dim}, block_m={block_m}, "
                             f"warp_spec={warp_spec}, stages={stages}, alibi={alibi}")
    elif block_n == WIDE_KEYS:
        if not (warp_spec and head_dim == 64 and stages == 2 and not alibi and not persistent):
            raise ValueError("the Gluon forward takes block_n 192 only at head dim 64, warp-specialised as a grid (the "
                             "persistent kernel's O buffers leave no room), stages 2 (its ring: eight 64-key boxes) "
                             f"and no ALiBi; got head_dim={head_dim}, warp_spec={warp_spec}, persistent={persistent}, "
                             f"stages={stages}, alibi={alibi}")
    elif block_n not in (64, 128):
        ok = False
    if not ok or stages < 1:
        raise ValueError(f"the Gluon forward takes {need}, block_n 64 or 128 (256: see LONG_KEYS) and stages >= 1; "
                         f"got block_m={block_m}, num_warps={num_warps}, block_n={block_n}, stages={stages}")


# 256-key blocks at D = 64 (``block_n`` 256; two consumer warp groups of 240 registers): half the key-block steps of a
# walk, each wgmma twice as long (Q·Kᵀ m64n256, P·V k256), so half the per-block softmax bookkeeping, waits and
# rescales; at the price of registers (the scores of one block and P̃ of the previous are 192 per thread) and so a
# few spills. What the FlashAttention-3 D = 64 tiles (192 × 192, P̃ through shared memory) aim at, within Triton's
# power-of-two tensors. Measured (H200, benchmarks/fwd_switches.py run 3): 0.68-0.75x the shipped tiles on the D = 64
# window, causal and dense rows, so no table entry takes it; it runs where a caller's configuration names it.
LONG_KEYS = 256


def kv_box(block_n: int) -> int:
    """Rows of the K and V tensor descriptors' box for key blocks of ``block_n``: a 192-key block is three boxes of 64."""
    return 64 if block_n == WIDE_KEYS else block_n

def consumer_regs(block_m: int, block_n: int = 128) -> int:
    """Registers per thread of a consumer warp group in the warp-specialised kernel (setmaxnreg): the
    register file (64K) less the loader's warp group at 24, shared by the consumers (two: 232, or 240 with
    256-key blocks, which need them; three: 160)."""
    if block_n == LONG_KEYS:
        return 240
    return 232 if block_m == 128 else 160


TILE_COST = 2  # a persistent tile's start and end in key blocks' worth: the causal schedule's cost model
CHUNK_KV_BYTES = 8 << 20  # head_chunk 0: as many heads at a time as share this many bytes of K and V


def auto_head_chunk(Nk: int, D: int, group: int, itemsize: int) -> int:
    """``head_chunk`` 0's group of heads: as many query heads as read ``CHUNK_KV_BYTES`` of K and V between them
    (a group of ``group`` query heads reads one K/V head), at least 1. On an H200 (fwd-persistent run 4, causal,
    D 64 and 128, 4K-16K keys) the group of 8 MB was the fastest of groups of 1, 2, 4 and 8 heads or within 1 % of
    it on each of 6 rows; one of eight times that (8 heads at D = 128, 16K) ran 8 % slower."""
    per_head = 2 * Nk * D * itemsize / max(1, group)
    return max(1, int(CHUNK_KV_BYTES // per_head))


_SCHEDULES: dict = {}  # kept schedules and tile orders (device tensors), at most _SCHEDULES_KEPT
_COUNTERS: dict = {}  # the dynamic persistent kernel's tile counters, by (device, stream)
_SCHEDULES_KEPT = 64


def part_first_shift(Nq: int, block_m: int) -> int:
    """Rows by which query blocks m > 0 of a causal call start early (``part_first``): the padding of the last
    block, in whole 64-row warp-group slices, so that the last block ends at Nq (or less than 64 rows after it)
    and the part block is the first, whose walk is the shortest. Its rows past the second block's start are the
    second block's first rows, made again with the same bits (a row's walk differs only by key blocks wholly
    right of its diagonal, which change nothing, and its 64-row slice starts at the same row in both blocks)."""
    n_m = -(-Nq // block_m)
    return 0 if n_m < 2 else ((n_m * block_m - Nq) // 64) * 64


def tile_walks(Nq: int, Nk: int, block_m: int, block_n: int, causal_off: int | None, win_off: int | None,
               m_shift: int = 0) -> list[int]:
    """Key blocks each query block walks in the warp-specialised kernels (``_wsp_tile``'s count, the grid
    kernel's too): a causal call's blocks up to the diagonal, a window's from its left edge."""
    out = []
    for m in range(-(-Nq // block_m)):
        start = max(m * block_m - m_shift, 0)
        hi = Nk if causal_off is None else max(min(Nk, start + block_m + causal_off), 0)
        lo = max(start + (NO_WINDOW if win_off is None else win_off), 0) // block_n
        out.append(max(-(-hi // block_n) - lo, 0))
    return out


def group_blocks(start_m: int, group: int, lo_blk: int, n_blocks: int, Nq: int, Nk: int, causal_off: int | None,
                 win_off: int | None, block_n: int, group_m: int = 64) -> tuple[int, int]:
    """The blocks [first, end) of a tile's walk (``n_blocks`` key blocks from ``lo_blk``) that consumer warp group
    ``group`` computes (``OWN_BLOCKS``): those holding a key one of its ``group_m`` rows (from start_m +
    group·group_m) sees, none if all its rows are past Nq. It passes the others on unread. The kernel's arithmetic:
    causal_off None means no causal mask, win_off None no left edge."""
    row0 = start_m + group * group_m
    hi = Nk if causal_off is None else max(min(Nk, row0 + group_m + causal_off), 0)
    left = NO_WINDOW if win_off is None else win_off
    first = min(max(max(row0 + left, 0) // block_n - lo_blk, 0), n_blocks)
    end = max(min(-(-hi // block_n) - lo_blk, n_blocks), first)
    if row0 >= Nq:
        end = first
    return first, end


def persistent_schedule(n_m: int, bh: int, programs: int, walks: list[int] | None = None,
                        chunk: int = 1) -> list[list[int]]:
    """The tiles (tile = head·n_m + query block, head of the B·H) each of ``programs`` persistent programs takes,
    in order. ``walks`` None (calls without a causal mask, every walk alike): rounds of ``programs`` tiles head
    by head, run forward and back in turn (program p takes tile p of even rounds, ``programs`` − 1 − p of odd
    ones). ``walks`` (key blocks of each query block): the tiles of each group of ``chunk`` heads longest first,
    each to the program with the least work so far (a walk plus ``TILE_COST``), as the GPU's own scheduler
    hands a grid's next program to the first SM free; a group's heads share the L2 while it runs."""
    import heapq

    if n_m < 1 or bh < 1 or programs < 1 or chunk < 1:
        raise ValueError(f"persistent_schedule takes positive sizes, got n_m={n_m}, bh={bh}, programs={programs}, "
                         f"chunk={chunk}")
    rows: list[list[int]] = [[] for _ in range(programs)]
    n_tiles = n_m * bh
    if walks is not None and len(walks) != n_m:
        raise ValueError(f"persistent_schedule: {len(walks)} walks for {n_m} query blocks")
    if walks is None:
        for r in range(-(-n_tiles // programs)):
            for p in range(programs):
                t = r * programs + (p if r % 2 == 0 else programs - 1 - p)
                if t < n_tiles:
                    rows[p].append(t)
        return rows
    free = [(0, p) for p in range(programs)]  # (work so far, program): a heap
    for t in tile_order(n_m, bh, walks, chunk):
        load, p = free[0]
        rows[p].append(t)
        heapq.heapreplace(free, (load + walks[t % n_m] + TILE_COST, p))
    return rows


def tile_order(n_m: int, bh: int, walks: list[int] | None = None, chunk: int = 1) -> list[int]:
    """Every tile (head·n_m + query block) once, in the order the persistent programs take them: head by head
    without ``walks``; with them (key blocks of each query block), each group of ``chunk`` heads' tiles longest
    walk first (the later query block first among equals). ``persistent_schedule`` deals them out in this order;
    the dynamic persistent kernel takes them from a counter in this order (``_attn_fwd_gluon_wsp``, DYNAMIC)."""
    if n_m < 1 or bh < 1 or chunk < 1:
        raise ValueError(f"tile_order takes positive sizes, got n_m={n_m}, bh={bh}, chunk={chunk}")
    if walks is None:
        return list(range(n_m * bh))
    if len(walks) != n_m:
        raise ValueError(f"tile_order: {len(walks)} walks for {n_m} query blocks")
    order = sorted(range(n_m), key=lambda m: (-walks[m], -m))
    return [t for h0 in range(0, bh, chunk) for m in order for t in range(h0 * n_m + m, min(bh, h0 + chunk) * n_m, n_m)]


def tile_counter(device: torch.device) -> torch.Tensor | None:
    """The int32 counter the dynamic persistent kernel takes its tiles from on ``device``'s current stream (one per
    stream, so calls on two streams at once never share one; zero between calls: the kernel's last taker sets it
    back), kept; None when it is not made yet and the stream is capturing a CUDA graph (the dynamic kernel then
    waits for an eager call, as the schedules do). A captured graph keeps the counter of the stream it was captured
    on: replayed on another stream, it must not run at the same time as dynamic calls on the capturing stream."""
    from .launch import current_stream

    key = (device, current_stream(device) if device.type == "cuda" else 0)
    c = _COUNTERS.get(key)
    if c is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        c = torch.zeros(1, dtype=torch.int32, device=device)
        if len(_COUNTERS) >= _SCHEDULES_KEPT:  # (a dropped counter stays alive in the plans that hold it)
            _COUNTERS.pop(next(iter(_COUNTERS)))
        _COUNTERS[key] = c
    return c


def _schedule_tensor(device: torch.device, bh: int, programs: int, chunk: int, shape: tuple,
                     order: bool = False) -> torch.Tensor | None:
    """``persistent_schedule`` as an int32 (programs, turns) tensor on ``device``, −1 past a program's last tile;
    kept per arguments. ``shape``: (Nq, Nk, block_m, block_n, causal_off, win_off, m_shift), ``tile_walks``'s
    (causal_off None: no walks). None when it is not kept yet and the stream is capturing a CUDA graph (the
    schedule's copy to the device cannot be captured). ``order``: ``tile_order``'s list instead, int32 (tiles,)."""
    key = (device, bh, None if order else programs, chunk, shape, order)
    t = _SCHEDULES.get(key)
    if t is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        Nq, Nk, block_m, block_n, causal_off, win_off, m_shift = shape
        walks = None if causal_off is None else tile_walks(Nq, Nk, block_m, block_n, causal_off, win_off, m_shift)
        if order:
            t = torch.tensor(tile_order(-(-Nq // block_m), bh, walks, chunk), dtype=torch.int32)
        else:
            rows = persistent_schedule(-(-Nq // block_m), bh, programs, walks, chunk)
            turns = max(len(r) for r in rows)
            t = torch.full((programs, turns), -1, dtype=torch.int32)
            for p, r in enumerate(rows):
                t[p, :len(r)] = torch.tensor(r, dtype=torch.int32)
        t = t.to(device)
        if len(_SCHEDULES) >= _SCHEDULES_KEPT:
            _SCHEDULES.pop(next(iter(_SCHEDULES)))
        _SCHEDULES[key] = t
    return t


def gluon_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, *,
                  causal_off: int | None, scale: float, block_m: int, block_n: int, stages: int,
                  num_warps: int = 8, warp_spec: bool = False, win_off: int | None = None,
                  slopes: torch.Tensor | None = None, persistent: bool = False, head_chunk: int = 1,
                  part_first: bool = False, cu_seqlens: tuple[torch.Tensor, torch.Tensor] | None = None,
                  max_seqlen_q: int = 0, dynamic: bool = False, exp_poly: int | None = None) -> None:
    """Run the Gluon forward: q (B, H, Nq, D), k/v (B, Hkv, Nk, D), out like q, lse (B, H, Nq) float32,
    written in place. ``causal_off`` None: no right edge; else row i sees keys j <= i + causal_off.
    ``win_off`` None: no left edge; else row i sees keys j >= i + win_off (a sliding window; the
    warp-specialised kernel only, which skips the key blocks left of it).
    ``slopes``: ALiBi, (H,) or (B, H) float32 on q's device (any strides): every score less
    slope·|i + Nk − Nq − j| (bottom-right aligned, as the Triton kernel's), before the mask.
    ``warp_spec``: the kernel with a loader warp and two or three consumer warp groups (block_m 128 or
    192, num_warps 4 per group); else one program of num_warps warps. ``persistent`` (with ``warp_spec``, no
    ALiBi): one program per SM at most, taking the tiles of ``persistent_schedule`` (``_attn_fwd_gluon_wsp``);
    with ``dynamic``, taking them from a counter in ``tile_order``'s order as each program is ready for the next.
    With a causal mask and ``warp_spec``: ``head_chunk``, the longest walks first over that many heads at a time
    (the grid kernel's programs, or the persistent schedule's groups; 0: ``auto_head_chunk``); ``part_first``,
    the part query block first (``part_first_shift``).
    ``cu_seqlens`` = (cu_q, cu_k), int32 (B + 1,) on q's device: a packed batch (the warp-specialised kernel, grid
    or persistent, no ALiBi), q (total_q, H, D), k/v (total_k, Hkv, D), out like q, lse (H, total_q); ``causal_off`` and
    ``win_off`` as for a sequence with as many keys as rows (each sequence adds its own Nk − Nq) and
    ``max_seqlen_q`` at least its longest query sequence. ``exp_poly``: of every 8 exponentials of an unmasked key
    block, so many (0–4) by a polynomial (the warp-specialised kernels; None: ``EXP_POLY`` for the head dim). No
    input checks (the public entry points and ``gluon_supported`` do them)."""
    _check_tiles(block_m, block_n, stages, num_warps, warp_spec, q.shape[-1], slopes is not None, persistent)
    causal_off, win_off = clamp_edges(causal_off, win_off)
    if not scale > 0:
        raise ValueError(f"the Gluon forward takes a positive scale (a masked block's scores are masked before "
                         f"they are scaled), got {scale!r}")
    if cu_seqlens is not None and (not warp_spec or slopes is not None):
        raise ValueError("a packed batch takes the warp-specialised Gluon forward, without ALiBi")
    if win_off is not None and not warp_spec:
        raise ValueError("a window's left edge needs the warp-specialised Gluon forward (warp_spec=True)")
    if persistent and (not warp_spec or slopes is not None):
        raise ValueError("the persistent Gluon forward is the warp-specialised kernel without ALiBi")
    if dynamic and not persistent:
        raise ValueError("dynamic tiles are the persistent Gluon forward's (persistent=True)")
    if not (isinstance(head_chunk, int) and head_chunk >= 0):
        raise ValueError(f"head_chunk must be an int >= 0 (0: auto_head_chunk), got {head_chunk!r}")
    exp_poly = exp_poly_for(q.shape[-1]) if exp_poly is None else exp_poly
    if not isinstance(exp_poly, int) or isinstance(exp_poly, bool) or not 0 <= exp_poly <= 4:
        raise ValueError(f"exp_poly must be 0 to 4 (of every 8 exponentials), got {exp_poly!r}")
    if cu_seqlens is not None:
        return _packed_forward(q, k, v, out, lse, causal_off, win_off, scale, block_m, block_n, stages, num_warps,
                               cu_seqlens, max_seqlen_q, persistent, dynamic, exp_poly)
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if head_chunk == 0:
        head_chunk = auto_head_chunk(Nk, D, H // Hkv, q.element_size())
    el = gl.float16 if q.dtype == torch.float16 else gl.bfloat16

    def desc(x, rows):
        return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, D], nvmma_layout((1, 1, rows, D), el))

    q_rows = 64 if warp_spec else block_m
    n_m = -(-Nq // block_m)
    grid = (n_m, B * H)
    causal = causal_off is not None
    args = (desc(q, q_rows), desc(k, kv_box(block_n)), desc(v, kv_box(block_n)), desc(out, q_rows), lse,
            H, H // Hkv, Nq, Nk, causal_off if causal else 0, scale * LOG2E)
    const = dict(HEAD_D=D, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, CAUSAL=causal)
    if warp_spec:
        const |= dict(EXP_POLY=exp_poly)
    if slopes is not None:  # (H,) is (B, H) with a batch stride of 0; without slopes the ALiBi arguments are None
        stride_sb, stride_sh = (0, slopes.stride(0)) if slopes.dim() == 1 else slopes.stride()
        const |= dict(ALIBI=True)
        args_alibi = dict(SLOPES=slopes, stride_sb=stride_sb, stride_sh=stride_sh, alibi_off=Nk - Nq)
    else:
        args_alibi = {}
    m_shift = part_first_shift(Nq, block_m) if causal and part_first and warp_spec else 0
    sched = None
    if persistent:  # (a schedule not kept yet while a CUDA graph is captured: the grid kernel, the same bits)
        from .decode_config import _device_sms

        programs = max(1, min(n_m * B * H, _device_sms(q.device)))
        shape = (Nq, Nk, block_m, block_n, causal_off, win_off, m_shift)
        if dynamic:
            counter = tile_counter(q.device)
            order = _schedule_tensor(q.device, B * H, programs, head_chunk if causal else 1, shape, order=True)
            if counter is not None and order is not None:
                args = args[:-1] + (NO_WINDOW if win_off is None else win_off, args[-1], n_m, order, 0, m_shift)
                launch_kept(_attn_fwd_gluon_wsp, (programs,), dict(zip(_attn_fwd_gluon_wsp.arg_names, args)) | const
                            | dict(CONSUMER_REGS=consumer_regs(block_m, block_n), COUNTER=counter, n_tiles=n_m * B * H,
                                   DYNAMIC=True), num_warps=num_warps)
                return
        else:
            sched = _schedule_tensor(q.device, B * H, programs, head_chunk if causal else 1, shape)
    if sched is not None:
        args = args[:-1] + (NO_WINDOW if win_off is None else win_off, args[-1], n_m, sched, sched.shape[1], m_shift)
        launch_kept(_attn_fwd_gluon_wsp, (programs,), dict(zip(_attn_fwd_gluon_wsp.arg_names, args)) | const
                    | dict(CONSUMER_REGS=consumer_regs(block_m, block_n)), num_warps=num_warps)
    elif warp_spec:  # (the kept compiled kernel after a specialisation's first call: launch.launch_kept)
        chunk = math.gcd(head_chunk, B * H) if causal else 1
        args = args[:-1] + (NO_WINDOW if win_off is None else win_off, args[-1], m_shift, chunk)
        launch_kept(_attn_fwd_gluon_ws, (n_m * chunk, B * H // chunk),
                    dict(zip(_attn_fwd_gluon_ws.arg_names, args)) | args_alibi | const
                    | dict(CONSUMER_REGS=consumer_regs(block_m, block_n)), num_warps=num_warps)
    else:
        _attn_fwd_gluon[grid](*args, **args_alibi, **const, num_warps=num_warps)

def exp_poly_for(head_dim: int) -> int:
    """``EXP_POLY``'s entry for this head dim (0 where it has none)."""
    return EXP_POLY.get(head_dim, 0)


def _packed_forward(q, k, v, out, lse, causal_off, win_off, scale, block_m, block_n, stages, num_warps, cu_seqlens,
                    max_seqlen_q, persistent, dynamic=False, exp_poly=0) -> None:
    """``gluon_forward`` of a packed batch (its arguments): the grid kernel, or the persistent one (at most a
    program per SM, the tiles dealt in turns by ``_wspv_tile``, or with ``dynamic`` taken from a counter in
    ``_wspv_tile_t``'s numbering; the grid kernel while a CUDA graph is captured before the counter is made)."""
    from .config import varlen_grid
    from .layout import packed_as_bhnd

    (Nq, H, D), (Nk, Hkv, _) = q.shape, k.shape
    cu_q, cu_k = cu_seqlens
    grid = varlen_grid(cu_q.numel() - 1, H, max_seqlen_q, block_m)
    if grid[0] == 0 or grid[1] == 0:
        return
    el = gl.float16 if q.dtype == torch.float16 else gl.bfloat16

    def desc(x, rows):
        x = packed_as_bhnd(x)  # (1, H|Hkv, total, D)
        return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, D], nvmma_layout((1, 1, rows, D), el))

    causal = causal_off is not None
    args = (desc(q, 64), desc(k, kv_box(block_n)), desc(v, kv_box(block_n)), desc(out, 64), lse, H, H // Hkv, Nq, Nk,
            causal_off if causal else 0, NO_WINDOW if win_off is None else win_off, scale * LOG2E)
    const = dict(CU_Q=cu_q, CU_K=cu_k, O=out, stride_on=out.stride(0), stride_oh=out.stride(1), VARLEN=True, HEAD_D=D,
                 BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, CAUSAL=causal, CONSUMER_REGS=consumer_regs(block_m, block_n),
                 EXP_POLY=exp_poly)
    counter = tile_counter(q.device) if persistent and dynamic else None
    if persistent and (counter is not None or not dynamic):
        from .decode_config import _device_sms

        n_bh, n_m = grid
        programs = max(1, min(n_m * n_bh, _device_sms(q.device)))
        args += (n_m, None, -(-(n_m * n_bh) // programs), 0)
        dyn = dict(COUNTER=counter, n_tiles=n_m * n_bh, DYNAMIC=True) if dynamic else {}
        launch_kept(_attn_fwd_gluon_wsp, (programs,), dict(zip(_attn_fwd_gluon_wsp.arg_names, args)) | const
                    | dict(n_bh=n_bh) | dyn, num_warps=num_warps)
    else:
        args += (0, 1)
        launch_kept(_attn_fwd_gluon_ws, grid, dict(zip(_attn_fwd_gluon_ws.arg_names, args)) | const,
                    num_warps=num_warps)


def compile_sm90(head_dim: int, *, causal: bool, block_m: int = 128, block_n: int = 128, stages: int = 2,
                 num_warps: int = 8, dtype: torch.dtype = torch.bfloat16, warp_spec: bool = False,
                 alibi: bool = False, persistent: bool = False, packed: bool = False, dynamic: bool = False,
                 exp_poly: int = 0):
    """Build the Gluon forward for Hopper (sm_90) on any machine, GPU or not (Triton's own ptxas): the
    compiled kernel, whose ``asm`` holds the PTX and cubin and ``metadata`` the shared memory. What the
    CPU tests and ``benchmarks/prefill.py aot`` read: registers, spills, and the wgmma waits. ``alibi``:
    the ALiBi build (float32 slopes, run-time strides); without it the ALiBi arguments are None.
    ``persistent``: the persistent warp-specialised kernel (``_attn_fwd_gluon_wsp``; no ALiBi). ``packed``: the
    packed-batch build of either warp-specialised kernel (no ALiBi). ``dynamic``: the persistent kernel taking its
    tiles from a counter (``DYNAMIC``). ``exp_poly``: of every 8 exponentials of an unmasked key block, so many
    by a polynomial (``EXP_POLY``; the warp-specialised kernels)."""
    if not HAVE_GLUON:
        raise RuntimeError("this triton has no Gluon (triton >= 3.5 needed)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    el = gl.float16 if dtype == torch.float16 else gl.bfloat16
    name = "fp16" if dtype == torch.float16 else "bf16"

    def desc(rows):
        layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, head_dim], el)
        return f"tensordesc<{name}[1,1,{rows},{head_dim}],{layout!r}>"

    _check_tiles(block_m, block_n, stages, num_warps, warp_spec, head_dim, alibi, persistent)
    const = dict(HEAD_D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, CAUSAL=causal)
    if persistent and (not warp_spec or alibi):
        raise ValueError("the persistent Gluon forward is the warp-specialised kernel without ALiBi")
    fn = _attn_fwd_gluon_wsp if persistent else _attn_fwd_gluon_ws if warp_spec else _attn_fwd_gluon
    const |= dict(CONSUMER_REGS=consumer_regs(block_m, block_n), EXP_POLY=exp_poly) if warp_spec else dict(num_warps=num_warps)
    if packed and (not warp_spec or alibi):
        raise ValueError("the packed Gluon forward is the warp-specialised kernel without ALiBi")
    if not persistent:
        const |= dict(ALIBI=True) if alibi else dict(SLOPES=None, stride_sb=None, stride_sh=None, alibi_off=None,
                                                     ALIBI=False)
    if warp_spec:
        const |= dict(VARLEN=True) if packed else dict(CU_Q=None, CU_K=None, O=None, VARLEN=False)
        if persistent and packed:
            const |= dict(SCHED=None, m_shift=0)
        if persistent:
            const |= dict(DYNAMIC=True) if dynamic else dict(COUNTER=None, n_tiles=0, DYNAMIC=False)
        elif dynamic:
            raise ValueError("dynamic tiles are the persistent kernel's (persistent=True)")
    q_rows = 64 if warp_spec else block_m
    sig = {}
    for n in fn.arg_names:
        sig[n] = ("constexpr" if n in const else desc(q_rows) if n in ("desc_q", "desc_o")
                  else desc(kv_box(block_n)) if n in ("desc_k", "desc_v") else "*fp32" if n in ("LSE", "SLOPES")
                  else "*i32" if n in ("SCHED", "CU_Q", "CU_K", "COUNTER") else f"*{name}" if n == "O"
                  else "fp32" if n == "qk_scale" else "i32")
    src = GluonASTSource(fn, sig, const, {(fn.arg_names.index("LSE"),): [["tt.divisibility", 16]]})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))


def sm90_report(head_dim: int, *, causal: bool, block_m: int = 128, block_n: int = 128, stages: int = 2,
                num_warps: int = 8, dtype: torch.dtype = torch.bfloat16, warp_spec: bool = False,
                alibi: bool = False, persistent: bool = False, packed: bool = False, dynamic: bool = False,
                exp_poly: int = 0) -> dict:
    """What the compiler made of one sm_90 build (``compile_sm90``): shared memory (KB), registers and
    spill stack per thread (from the cubin, where Triton ships cuobjdump), and the PTX's wgmma waits
    (``wait_groups``: the distinct N of ``wgmma.wait_group N``; 1 is the wait that leaves P·V in flight).
    Needs a process without TRITON_INTERPRET (the interpreter replaces the jit functions Gluon calls)."""
    kernel = compile_sm90(head_dim, causal=causal, block_m=block_m, block_n=block_n, stages=stages,
                          num_warps=num_warps, dtype=dtype, warp_spec=warp_spec, alibi=alibi, persistent=persistent,
                          packed=packed, dynamic=dynamic, exp_poly=exp_poly)
    return kernel_report(kernel)


def max_chain(ptx: str) -> int:
    """The longest chain of dependent ``max.f32`` instructions in a PTX listing, read in its textual order (a register
    holds its last definition above; loop-carried values count once): a row maximum taken one score after another
    makes a chain as long as the scores a thread holds in the row, a tree (``_row_max``) one of about their log2."""
    import re

    depth: dict[str, int] = {}
    best = 0
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)\s+(.*);", line)
        if not m or m.group(1).startswith(("st.", "bra", "bar.", "ret")):
            continue
        op, rest = m.groups()
        if rest.startswith("{"):  # several results (wgmma, vector loads): none continues a chain
            for r in re.findall(r"%[a-z]+\d+", rest[:rest.index("}")]):
                depth[r] = 0
            continue
        regs = re.findall(r"%[a-z]+\d+", rest)
        if not regs:
            continue
        d = max((depth.get(r, 0) for r in regs[1:]), default=0) + (op.startswith("max.") and op.endswith(".f32"))
        depth[regs[0]] = d
        best = max(best, d)
    return best


def sass_loop_ops(sass: str, product: str = "HGMMA") -> list[tuple]:
    """The loops of an SASS listing (``cuobjdump -sass``) that hold tensor-core products ``product`` (``HGMMA``:
    wgmma; ``HMMA``: mma.sync): one per conditional backward branch whose body (its target up to the branch, in
    address order) has one, in address order, each as (start address, end address, a Counter of its opcodes without
    their modifiers). Static counts: a branch inside a body (a masked step's path, a wait's retry) is counted whole,
    and the unconditional jumps back from code placed out of line are not loops."""
    import re
    from collections import Counter

    line = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")
    branch = re.compile(r"@!?U?P\w+\s+BRA(?:\.\w+)*\s+(?:!?U?P\w+\s*,\s*)?(0x[0-9a-f]+)\s*$")
    code = [(int(m.group(1), 16), m.group(2)) for m in map(line.search, sass.splitlines()) if m]
    where = {a: i for i, (a, _) in enumerate(code)}
    loops = []
    for i, (addr, text) in enumerate(code):
        m = branch.match(text)
        if not m or int(m.group(1), 16) > addr or int(m.group(1), 16) not in where:
            continue
        start = int(m.group(1), 16)
        ops = Counter((t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0]
                      for _, t in code[where[start]:i + 1])
        if ops[product]:
            loops.append((start, addr, ops))
    return loops


def sass_loops(sass: str) -> list[dict]:
    """The loops of an SASS listing that hold wgmma products (``sass_loop_ops``), each: ``start`` and ``end``
    addresses, its ``instructions``, ``wgmma`` (HGMMA), ``local_loads`` (LDL: spill reloads), ``uniform_moves`` (R2UR:
    values moved to the uniform datapath) and ``mufu`` (the special-function unit's exponentials and reciprocals)."""
    return [dict(start=start, end=end, instructions=sum(ops.values()), wgmma=ops["HGMMA"], local_loads=ops["LDL"],
                 uniform_moves=ops["R2UR"], mufu=ops["MUFU"]) for start, end, ops in sass_loop_ops(sass)]


def kernel_report(kernel) -> dict:
    """Shared memory (KB), setmaxnreg values, wgmma waits and counts, TMA loads, float32 global atomics
    (``atomics``), the integer atomics of a tile counter (``tile_atomics``: add and exchange), TMA bulk reductions
    (``tma_reduces``), shared-memory store instructions by width (``shared_stores``, e.g. ``{"v4.b32": 32}``), global
    loads (``global_loads``), ``ex2.approx`` instructions (``exponentials``) and ``exp2_poly_asm``'s polynomial
    exponentials (``poly_exponentials``), the longest chain of dependent float32 maxima (``max_chain``)
    of a compiled sm_90 kernel, with registers and spill stack per thread from its cubin and the SASS loops that
    hold its products (``sass_loops``: ``loops``) where Triton ships cuobjdump."""
    import re
    from collections import Counter

    ptx = kernel.asm["ptx"]
    out = dict(smem_kb=round(kernel.metadata.shared / 1024, 1),
               setmaxnreg=sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}),
               wait_groups=sorted({int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}),
               tma_loads=len(re.findall(r"cp\.async\.bulk\.tensor", ptx)),
               wgmma=len(re.findall(r"wgmma\.mma_async", ptx)),
               atomics=len(re.findall(r"(?:atom|red)\.global\.\S*add\S*f32", ptx)),
               tile_atomics=len(re.findall(r"atom\.global\S*\.(?:add\.u32|exch\.b32)", ptx)),
               tma_reduces=len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)),
               shared_stores=dict(sorted(Counter(re.findall(r"st\.shared\.([\w.]+)", ptx)).items())),
               global_loads=len(re.findall(r"ld\.global", ptx)),
               exponentials=len(re.findall(r"ex2\.approx", ptx)),
               poly_exponentials=len(re.findall(r"mad\.lo\.u32\s+\S+,\s*\S+,\s*8388608,", ptx)),
               max_chain=max_chain(ptx))
    res, sass = cuobjdump(kernel, "--dump-resource-usage"), cuobjdump(kernel, "-sass")
    if res is not None:
        for key, pat in (("regs", r"REG:(\d+)"), ("stack", r"STACK:(\d+)")):
            m = re.search(pat, res)
            out[key] = int(m.group(1)) if m else None
        out["loops"] = sass_loops(sass)
    return out


def cuobjdump(kernel, option: str) -> str | None:
    """What Triton's own cuobjdump prints with ``option`` ("-sass", "--dump-resource-usage") for a compiled kernel's
    cubin, or None where Triton ships no cuobjdump."""
    import subprocess
    import tempfile
    from pathlib import Path

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([str(tool), option, f.name], capture_output=True, text=True).stdout
