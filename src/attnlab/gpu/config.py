"""Launch configurations of the Triton prefill kernels (lecture §6.1: block sizes are a tuned trade-off).

What the kernels cover (dtypes, head dims), the block-size tables — one deterministic choice per
(head dim, masked or not, length class), the winners of measured H200 sweeps, so that tests and benchmarks
run the same compiled kernel — ``tma_ok``, and the grids of packed variable-length batches (one
program per (sequence, head, block of the longest sequence)). Nothing here imports triton.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
FWD_HEAD_DIMS = (32, 64, 96, 128, 256)  # 96 runs padded to 128 with masks
BWD_HEAD_DIMS = (32, 64, 96, 128)


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, (int(x) - 1).bit_length())


@dataclass(frozen=True)
class FwdConfig:
    """Forward launch: Br = block_m query rows per program, Bc = block_n keys per step."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False  # load Q/K/V and store O through Hopper tensor-memory descriptors
    warp_spec: bool = False  # warp-specialise the unmasked key loop (needs tma; Hopper and newer)
    maxnreg: int | None = None  # cap registers per thread (e.g. 128: two 8-warp programs per SM)
    gluon: bool = False  # the Gluon kernel (softmax under the P·V wgmma; sm_90, D 64/128, dense, causal, windows, ALiBi);
    # with warp_spec: a loader warp and two 64-row consumer warp groups (block_m 128, num_warps 4 per group)
    persistent: bool = False  # Gluon, warp_spec: one program per SM taking the tiles in turn (not with ALiBi, which
    # takes the non-persistent kernel)
    head_chunk: int = 1  # Gluon, warp_spec, causal: the longest walks first over this many heads at a time (0: as
    # many as share 8 MB of K and V, prefill_gluon.auto_head_chunk)
    part_first: bool = False  # Gluon, warp_spec, causal: the part query block first (the shortest walk), not last
    dynamic: bool = False  # Gluon, persistent: the tiles taken from a counter as each program is ready for the next
    # (in the schedule's order), not dealt out beforehand


@dataclass(frozen=True)
class BwdConfig:
    """Backward launch: dK/dV kernel (key block block_n1 outer, query block block_m1 inner) and
    dQ kernel (query block block_m2 outer, key block block_n2 inner), or dQ by atomics."""

    block_m1: int
    block_n1: int
    warps1: int
    stages1: int
    block_m2: int
    block_n2: int
    warps2: int
    stages2: int
    dq_atomic: bool = False  # accumulate dQ with float32 atomics inside the dK/dV kernel
    gluon: bool = False  # the Gluon kernel (prefill_gluon_bwd: one pass, dQ by TMA reductions; sm_90, D 64/128,
    # dense, causal or windowed, ALiBi too; never for softcap, packed or deterministic calls): a loader warp and
    # two consumer warp groups of 64 keys each (block_n1 128; block_m1 the query rows per step, 64, or 128 at
    # D = 64 without dq_lag, deterministic order or ALiBi; stages1 the Q/dO ring); the other fields are unused
    dq_split: int = 1  # Gluon: the dQ product in dq_split column slices of D (fewer live registers)
    dq_shared: bool = False  # Gluon: both warp groups make every step's dQ product, half of D's columns each
    dq_lag: int = 0  # Gluon: a step's dQ product made dq_lag steps after its dSᵀ (a four-tile dSᵀ ring; D = 64)
    persistent: int = 0  # Gluon: one program per SM walking key block after key block, with this many K/V buffer
    # pairs (2: the next block's K and V load under the current one's steps; D = 64 only), 0: a program per key block
    # (measured at 0.78-1.05x the per-block build on an H200: no table entry takes it)
    # (Gluon with dq_atomic: per-thread float32 atomics instead of TMA bulk reductions)


def _head_bucket(D: int) -> int:
    return 64 if D <= 64 else (128 if D <= 128 else 256)


SHORT_KEYS = 2048  # calls with fewer keys than this use the "short" table entries


def length_class(n_keys: int | None) -> str:
    """The table's length class of a call with ``n_keys`` keys: "short" below SHORT_KEYS, else "long"."""
    return "short" if n_keys is not None and n_keys < SHORT_KEYS else "long"


# Deterministic choices (no autotuning at run time), keyed by (head-dim bucket, causal, length class):
# the winners of the H200 block-size sweeps of runs 2 and 3 (2026-11-29, triton 3.6; highest TFLOP/s
# summed over N = 4K and 16K for "long", at N = 1K for "short"; benchmarks/data/prefill-best-h200-run2.json
# overridden by -run3.json, benchmarks/NOTES-prefill.md). ``tma`` (and ``warp_spec`` with it) falls back to pointer loads
# where descriptors can't be used.
_F = FwdConfig
_B = BwdConfig
_FWD_TABLE = {
    (64, False, "long"): _F(128, 64, 8, 3), (64, True, "long"): _F(128, 64, 8, 3),
    (64, False, "short"): _F(128, 64, 8, 3), (64, True, "short"): _F(64, 64, 4, 3),
    # run 3's forward-only sweep at D = 128 replaced these two (prefill-best-h200-run3.json)
    (128, False, "long"): _F(128, 64, 8, 2, tma=True, warp_spec=True, maxnreg=128),
    (128, True, "long"): _F(128, 128, 8, 3, tma=True),
    (128, False, "short"): _F(128, 128, 8, 3, tma=True), (128, True, "short"): _F(64, 64, 4, 3),
    # not in the sweep: chosen to fit (D = 256 needs small tiles), checked by the GPU tests
    (256, False, "long"): _F(64, 32, 4, 2), (256, True, "long"): _F(64, 32, 4, 2),
    (256, False, "short"): _F(64, 32, 4, 2), (256, True, "short"): _F(64, 32, 4, 2),
}
# The Gluon forward (prefill_gluon: a TMA loader warp, two consumer warp groups, softmax under the P·V
# wgmma) won every long-sequence forward of run 5's sweep at D = 64 and 128 (2026-12-01, triton 3.6,
# benchmarks/data/prefill-best-h200-run5.json). It runs where Gluon can (sm_90, tensor descriptors; dense,
# causal, windowed and ALiBi calls, not softcap or packed batches); everywhere else the Triton entry above
# for the same key runs.
# At D = 64, runs 8 and 9 (three consumer warp groups, 192-row blocks) replaced run 5's entries
# (prefill-best-h200-run9.json). Long entries run the persistent build (one program per SM taking the tiles in
# turn, the next tile's loads under this one's epilogue; the same bits as the grid kernel): without a causal mask
# 1.3-4.0 % faster than the grid kernel on every row in two runs (benchmarks/fwd_persistent.py,
# fwd-persistent-h200-run{1,2}.json). Causal entries take the part query block first, not last, and the longest
# walks first over groups of heads sharing 8 MB of K/V (``head_chunk`` 0): in the persistent build a schedule
# made on the host (each tile to the least loaded program); fwd-persistent runs 3-5. At D = 128 the persistent
# build: 5.8 % and 6.7 % faster than the grid kernel at 4K keys (runs 4 and 5), 5.7 % at 8K, 1.5 % and 0.7 % at
# 16K. At D = 64 causal calls take the persistent build on 192-row tiles at every long length (the same bits as
# the 192-row grid kernel on awkward shapes, tests/gpu/test_prefill_gluon.py): against the 192-row grid kernel
# 1.036x and 1.026x on the 16K window and 1.014x on causal 16K (benchmarks/fwd_switches.py, fwd-switches runs 17
# and 18); against the 128-row persistent build that ran calls below 8K keys until then, 1.048x at 8 x 2K, 1.087x
# and 1.093x at 4 x 4K and 1.088x at 2 x 6K (runs 19 and 20). ALiBi calls take the grid kernel with the same
# groups and part block first.
_GLUON_LONG = _F(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)
_GLUON_192 = _F(192, 128, 4, 2, tma=True, warp_spec=True, gluon=True)
_CAUSAL_ORDER = dict(part_first=True, head_chunk=0)
_GLUON_FWD_TABLE = {(64, False, "long"): dataclasses.replace(_GLUON_192, persistent=True),
                    (64, True, "long"): dataclasses.replace(_GLUON_192, persistent=True, **_CAUSAL_ORDER),
                    (128, False, "long"): dataclasses.replace(_GLUON_LONG, persistent=True),
                    (128, True, "long"): dataclasses.replace(_GLUON_LONG, persistent=True, **_CAUSAL_ORDER)}
# Long calls with fewer keys than MID_KEYS take the _GLUON_FWD_MID entry for their (head dim, causal) where there
# is one. None now: the D = 64 causal one (the 128-row persistent build) lost to the long entry at 2K-6K keys in
# fwd-switches runs 19 and 20; set_config drops an entry here with the long one it replaces.
MID_KEYS = 8192
_GLUON_FWD_MID: dict = {}
_BWD_64_SMALL = _B(64, 64, 4, 3, 64, 64, 4, 3)
_BWD_RUN1 = _B(64, 128, 8, 3, 128, 64, 8, 3)  # run 1's winner for every shape
_BWD_TABLE = {
    (64, False, "long"): _BWD_64_SMALL, (64, True, "long"): _BWD_64_SMALL,
    (64, False, "short"): _BWD_RUN1, (64, True, "short"): _BWD_64_SMALL,
    (128, False, "long"): _B(64, 128, 8, 4, 128, 64, 8, 4), (128, True, "long"): _B(64, 128, 8, 4, 128, 64, 8, 4),
    (128, False, "short"): _BWD_RUN1, (128, True, "short"): _BWD_RUN1,
}
# The Gluon backward (prefill_gluon_bwd: one pass, dQ by TMA bulk reductions from shared memory, the wait for
# the read deferred to the next turn) beat the Triton backward at every long key of sweeps 14 and 15: by 4-9 %
# at D = 64 and 9-19 % at D = 128, summed over N = 4K and 16K (2026-12-01, triton 3.6). At D = 128 both warp
# groups making every dQ product, half of D's columns each (dq_shared), won all four rows of sweep 15 (+2 to
# +8 %) and the ablation's 16K pair (+3 %, +7 %); at D = 64 it lost by 15 %. Sweep 16 (same day) added the
# short class (N = 1K) and the dQ product one or two steps behind its dSᵀ (dq_lag, D = 64 only: the ring
# does not fit beside D = 128's tiles): at D = 64 non-causal one step behind won at 16K, 4K and 1K (+2 %,
# +8 %, +4 % over lag 0); causal, lag 2, 1 and 0 were within 0.3 % (the sweep's rule keeps the highest, lag 2).
# At N = 1K the Gluon kernel beat the Triton candidates by 6 % (D = 64 non-causal), 16 % and 27 % (D = 128);
# D = 64 causal short calls kept the Triton backward (248 against 231 TFLOP/s; since moved, below).
# Data: benchmarks/data/prefill-sweep-h200-run14.json, -run15.json, -run16.json; decision in
# prefill-best-h200-run16.json (equal to this table but for that entry; a test holds it there).
_GLUON_BWD_64 = _B(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_lag=1)
_GLUON_BWD_64_CAUSAL = _B(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_lag=2)
_GLUON_BWD_128 = _B(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_shared=True)
# D = 64 causal short calls (under 2048 keys; packed batches of such documents too) moved to the Gluon backward
# without the lag (2026-12-03, benchmarks/bwd_block_m.py, the backward alone from CUDA graphs, bwd-block-m runs 1 and
# 2): 16 × 1K causal 0.655 ms against 0.721 on the Triton kernels (and 0.678 with the lag of 2), 16K tokens of
# documents of 256-1792 0.840-0.841 against 1.123 (0.890-0.893 with the lag); the long causal entry's lag 2 and 0
# within -0.9 to +2.7 % of each other (kept). Data: benchmarks/data/bwd-block-m-h200-run{1,2}.json
_GLUON_BWD_64_SHORT_CAUSAL = _B(64, 128, 4, 2, 64, 128, 4, 2, gluon=True)
_GLUON_BWD_TABLE = {(64, False, "long"): _GLUON_BWD_64, (64, True, "long"): _GLUON_BWD_64_CAUSAL,
                    (64, False, "short"): _GLUON_BWD_64, (64, True, "short"): _GLUON_BWD_64_SHORT_CAUSAL,
                    (128, False, "long"): _GLUON_BWD_128, (128, True, "long"): _GLUON_BWD_128,
                    (128, False, "short"): _GLUON_BWD_128, (128, True, "short"): _GLUON_BWD_128}
# the interpreter runs one program at a time in numpy: small blocks keep the CPU tests quick and
# still give several blocks (and ragged ones) at small N
_INTERP_FWD = FwdConfig(block_m=16, block_n=16, num_warps=1, num_stages=1)
_INTERP_BWD = BwdConfig(block_m1=16, block_n1=16, warps1=1, stages1=1, block_m2=16, block_n2=16, warps2=1, stages2=1)


_CAPABILITY: dict = {}


def device_capability(device: torch.device) -> tuple[int, int]:
    """``torch.cuda.get_device_capability(device)``, kept per device: the torch call builds the device's
    properties object every time (~5-10 µs of host time on an H200's host), and every launch of a prefill
    call asks several times."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = tuple(torch.cuda.get_device_capability(index))
    return cap


_HAVE_DESCRIPTORS: list = []


def tma_ok(*tensors: torch.Tensor) -> bool:
    """Tensor descriptors need sm90+ (or the interpreter), 16-byte aligned bases and strides."""
    if not _HAVE_DESCRIPTORS:
        try:
            from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
            _HAVE_DESCRIPTORS.append(True)
        except ImportError:
            _HAVE_DESCRIPTORS.append(False)
    if not _HAVE_DESCRIPTORS[0]:
        return False
    for t in tensors:
        if t.is_cuda and device_capability(t.device)[0] < 9:
            return False
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * t.element_size()) % 16 or (s == 0 and n > 1) for s, n in zip(t.stride()[:-1], t.shape)):
            return False  # unaligned, or a broadcast (stride-0) dimension
    return True


def default_fwd_config(D: int, causal: bool, device: torch.device, n_keys: int | None = None, *,
                       gluon: bool = True) -> FwdConfig:
    """The table's forward launch for head dim D with ``n_keys`` keys (None: a long sequence): the Gluon
    kernel's entry where there is one (``gluon``), else the Triton kernel's."""
    if device.type == "cpu":
        return _INTERP_FWD
    key = (_head_bucket(D), bool(causal), length_class(n_keys))
    if gluon and key in _GLUON_FWD_TABLE:
        if key[2] == "long" and n_keys is not None and n_keys < MID_KEYS and key[:2] in _GLUON_FWD_MID:
            return _GLUON_FWD_MID[key[:2]]
        return _GLUON_FWD_TABLE[key]
    return _FWD_TABLE[key]


_WINDOW_FWD_64 = _F(64, 64, 4, 3)


def variant_fwd_config(cfg: FwdConfig, D: int, *, packed: bool, score_mod: bool, window: bool = False) -> FwdConfig:
    """A table entry adapted to a call with variants: a packed batch cannot use tensor descriptors (a
    tile would cross into the next sequence), and pointer loads of 128×128 tiles at D = 128 spill, so
    it takes Bc = 64; softcap/ALiBi scores need more registers than a ``maxnreg`` cap of 128 leaves
    (ALiBi at D = 128 spilled under it) — both from sm_90 compiler reports. A window's left edge at
    D <= 64 takes 64×64 tiles on 4 warps: on the H200 (16K tokens, W = 4096, causal; block sweep of
    ``benchmarks/variants_sweep.py``, RESULTS.md) 384 TFLOP/s against 315 for the causal table's
    128×64 on 8 warps; at D = 128 the table's entry stayed best."""
    if window and not packed and _head_bucket(D) == 64 and cfg != _INTERP_FWD:
        cfg = _WINDOW_FWD_64
    if packed:
        cfg = dataclasses.replace(cfg, tma=False, warp_spec=False, maxnreg=None,
                                  block_n=min(cfg.block_n, 64) if D > 64 else cfg.block_n)
    if score_mod and cfg.maxnreg:
        cfg = dataclasses.replace(cfg, maxnreg=None)
    return cfg


# Plain packed batches (causal or not, no window, softcap or ALiBi) where a sweep of the packed batch itself
# found another forward than the dense table's entry adapted by ``variant_fwd_config``: at D = 128, 16K tokens
# of documents of 256–1792 (the "short" class), causal, 128×32 tiles on 8 warps ran at 301 TFLOP/s against
# 274 for the adapted 64×64 entry (benchmarks/variants_sweep.py, 2026-12-01, H200, triton 3.6;
# data/variants-sweep-h200-varlen-run3.json). At D = 64 the best candidate was 5 % ahead, within what a
# single sweep can tell apart: the adapted entry stays.
_PACKED_FWD_TABLE = {(128, True, "short"): _F(128, 32, 8, 3)}


# The Gluon forward of a packed batch (while ``prefill_gluon.PACKED`` is on), by head dim: where the best of the
# packed sweep's Gluon builds beat the Triton kernel's entry (benchmarks/variants_sweep.py --packed-gluon,
# data/variants-sweep-h200-varlen-run6.json): at D = 128 the persistent build with two consumer warp groups taking
# its tiles from a counter, 338 TFLOP/s against 312 for the grid kernel, 264 with its tiles dealt out in turns and
# 309 for the Triton kernel (192×64 tiles: 341, within a sweep's noise, on three warp groups). At D = 64 the best
# Gluon build (235) stayed behind the Triton kernel (251): no entry.
_GLUON_PACKED_FWD = {128: dataclasses.replace(_GLUON_LONG, persistent=True, dynamic=True)}


def packed_gluon_fwd_config(D: int) -> FwdConfig | None:
    """The Gluon forward's entry for a packed batch without softcap or ALiBi at head dim D, or None where it has
    none (the Triton kernel runs)."""
    return _GLUON_PACKED_FWD.get(D)


def packed_fwd_config(D: int, causal: bool, device: torch.device, n_keys: int | None) -> FwdConfig | None:
    """The forward of a plain packed batch (no window, softcap or ALiBi) with ``n_keys`` keys in its longest
    sequence where a packed batch's own sweep chose one, else None (then ``variant_fwd_config`` adapts the
    dense table's entry)."""
    if device.type == "cpu":
        return None
    return _PACKED_FWD_TABLE.get((_head_bucket(D), bool(causal), length_class(n_keys)))


def gluon_alibi_config(cfg: FwdConfig) -> FwdConfig:
    """A Gluon forward entry adapted to an ALiBi call: three consumer warp groups (block_m 192, 160 registers
    each) become two (block_m 128, 232 registers). The bias's column term takes BLOCK_N / 4 registers per
    thread, and the 192-row sm_90 builds then spill (600-1400 local loads and stores against none at 128
    rows; ``prefill_gluon.sm90_report(..., alibi=True)``, triton 3.6 and 3.9); 256-key blocks become 128. On an
    H200 the 128-row ALiBi forward ran at 427 TFLOP/s at D = 64, 16K causal (benchmarks/RESULTS.md, variants run
    6); the spilling 192-row build was not timed."""
    if cfg.gluon and cfg.warp_spec and cfg.block_m == 192:
        cfg = dataclasses.replace(cfg, block_m=128)
    if cfg.gluon and cfg.block_n > 128:  # (256-key blocks: no ALiBi build, their registers are spent already)
        cfg = dataclasses.replace(cfg, block_n=128)
    return cfg


def default_bwd_config(D: int, causal: bool, device: torch.device, n_keys: int | None = None, *,
                       gluon: bool = True) -> BwdConfig:
    """The table's backward launch for head dim D with ``n_keys`` keys (None: a long sequence): the Gluon
    kernel's entry where there is one (``gluon``), else the Triton kernels'."""
    if device.type == "cpu":
        return _INTERP_BWD
    key = (_head_bucket(D), bool(causal), length_class(n_keys))
    if gluon and key in _GLUON_BWD_TABLE:
        return _GLUON_BWD_TABLE[key]
    return _BWD_TABLE[key]


def set_config(D: int, causal: bool, *, fwd: FwdConfig | None = None, bwd: BwdConfig | None = None,
               length: str | None = None) -> None:
    """Replace the table entries that head dim ``D`` uses, for one length class ("short", "long")
    or both (a tuning hook for benchmarks/prefill.py). A Gluon configuration goes to the Gluon table; a
    Triton one replaces the Triton entry and drops the key's Gluon entry, so that it is what runs. A new
    forward for the long class also drops the Gluon entry of calls below ``MID_KEYS``."""
    if length not in (None, "short", "long"):
        raise ValueError(f"length must be 'short', 'long' or None, got {length!r}")
    for n in (length,) if length else ("short", "long"):
        key = (_head_bucket(D), bool(causal), n)
        if fwd is not None and n == "long":
            _GLUON_FWD_MID.pop(key[:2], None)
        if fwd is not None and fwd.gluon:
            _GLUON_FWD_TABLE[key] = fwd
        elif fwd is not None:
            _FWD_TABLE[key] = fwd
            _GLUON_FWD_TABLE.pop(key, None)
        if bwd is not None and bwd.gluon:
            _GLUON_BWD_TABLE[key] = bwd
        elif bwd is not None:
            _BWD_TABLE[key] = bwd
            _GLUON_BWD_TABLE.pop(key, None)


# -- packed variable-length batches: grids sized for the longest sequence ---------------------------

_MAX_GRID_Y = 65535  # CUDA's limit on a grid's second axis


def varlen_bounds(cu_seqlens, max_seqlen) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """A packed batch's (cu_q, cu_k, max_q, max_k) for the kernels: the (B + 1,) cumulative lengths as
    contiguous tensors on their device, and the longest sequences, as given in ``max_seqlen`` or,
    when it is None, read from the lengths on the host (one device synchronisation)."""
    cu_q, cu_k = (c.contiguous() for c in cu_seqlens)
    if max_seqlen is None:
        max_seqlen = tuple(int((c[1:] - c[:-1]).max()) if c.numel() > 1 else 0 for c in (cu_q, cu_k))
    return cu_q, cu_k, int(max_seqlen[0]), int(max_seqlen[1])


def varlen_grid(B: int, heads: int, max_seqlen: int, block: int) -> tuple[int, int]:
    """The grid of a packed batch's kernel: (B·heads, blocks of ``block`` rows in the longest sequence);
    the programs of a shorter sequence's missing blocks return at once."""
    n_blocks = -(-max(max_seqlen, 0) // block)
    if n_blocks > _MAX_GRID_Y:
        raise ValueError(f"max_seqlen {max_seqlen} needs {n_blocks} blocks of {block} rows; "
                         f"a grid's second axis holds at most {_MAX_GRID_Y}")
    return B * heads, n_blocks
