"""The lecture's cost tables as data (§3.1–3.2 / 01 demo 4, §6.1 / 03 demo 3, §6.3 / 03 demo 4, §7.1–7.2
/ 04 demo 2, §7.6 / 04 demo 4, §8.3 / 05 demo 2, §8.4 / 05 demo 4).

Each ``*_table`` returns a list of frozen row dataclasses computed by the closed forms; demos print
them with ``render_table`` (rich, imported there) and tests read the fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from . import io as _io
from ._args import dtype_bytes as _dtype_bytes
from ._args import pos_int
from .decode import layer_costs
from .flops import attention_flops, linear_flops, lse_bytes, scores_bytes
from .gpus import get_gpu
from .roofline import recompute_crossover_d, recompute_ratio
from .splits import best_num_splits, decode_split_cost

GiB, MiB = 2**30, 2**20


# ---------------------------------------------------------------- formatting (used by render_table)


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_time(s: float) -> str:
    if s >= 10e-3:
        return f"{s * 1e3:,.1f} ms"
    return f"{s * 1e6:,.1f} µs"


def fmt_flops(f: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if f >= size:
            return f"{f / size:,.2f} {unit}"
    return f"{f:,.0f} FLOP"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def fmt_count(n: float) -> str:
    return f"{n / 1e6:,.1f} M" if n >= 1e6 else f"{n:,.0f}"


class _Row:
    """Mixin: ``COLUMNS`` = ((field or property, header, formatter), ...) for ``render_table``."""

    COLUMNS: ClassVar[tuple] = ()

    def to_dict(self) -> dict:
        return asdict(self)


def render_table(rows, title: str | None = None):
    """A rich ``Table`` of rows from one of the ``*_table`` functions."""
    from rich.table import Table

    if not rows:
        raise ValueError("render_table needs at least one row")
    cols = type(rows[0]).COLUMNS or tuple((f.name, f.name, str) for f in fields(rows[0]))
    table = Table(title=title)
    for _, header, _ in cols:
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(*(fmt(getattr(r, attr)) for attr, _, fmt in cols))
    return table


# ---------------------------------------------------------------- §3.1–3.2 (01 demo 4)


@dataclass(frozen=True)
class LayerFlopsRow(_Row):
    seq: int
    attention_flops: float  # causal: half of 4·H·N²·D
    linear_flops: float  # 2 · weights · N
    attention_share: float
    scores_bytes: int  # S for all heads of the layer
    scores_share_of_memory: float  # of the GPU's HBM
    traffic_time: float  # standard forward's HBM traffic (4Nd + 4N² per head) at full bandwidth
    math_time: float  # all N² scores' QKᵀ and PV (masked half included) at tensor peak

    COLUMNS: ClassVar[tuple] = (
        ("seq", "N", lambda n: f"{n:,}"),
        ("attention_flops", "attention", fmt_flops),
        ("linear_flops", "linear", fmt_flops),
        ("attention_share", "attention share", fmt_pct),
        ("scores_bytes", "S, all heads", fmt_bytes),
        ("scores_share_of_memory", "of HBM", fmt_pct),
        ("traffic_time", "std traffic", fmt_time),
        ("math_time", "matmul time", fmt_time),
    )


def layer_flops_table(seqs=(1024, 4096, 16384, 32768, 131072), *, d_model: int = 4096, heads: int = 32,
                      head_dim: int | None = None, ffn_dim: int = 11008, swiglu: bool = True, causal: bool = True,
                      dtype_bytes=2, gpu="H100") -> list[LayerFlopsRow]:
    """FLOPs of one 7B-sized layer, attention vs the linear parts, and the size of S (§3.1–3.2).

    128K: attention 73% of the FLOPs; 32K: S of all heads 64 GiB = 86% of an 80 GB H100, and the
    standard attention forward moves ~82 ms of traffic for ~18 ms of matmul.
    """
    g = get_gpu(gpu)
    nb = _dtype_bytes(dtype_bytes)
    H = pos_int(heads, "heads")
    D = pos_int(d_model, "d_model") // H if head_dim is None else pos_int(head_dim, "head_dim")
    layer = dict(d_model=d_model, heads=H, head_dim=D, ffn_dim=ffn_dim, swiglu=swiglu)
    rows = []
    for N in seqs:
        N = pos_int(N, "seqs[i]")
        att = attention_flops(heads=H, seq_q=N, head_dim=D, causal=causal)
        lin = linear_flops(N, **layer)
        s = scores_bytes(heads=H, seq_q=N, dtype_bytes=nb)
        traffic = _io.io_standard_forward(seq=N, head_dim=D) * H * nb / g.hbm_bw
        math = attention_flops(heads=H, seq_q=N, head_dim=D) / g.tensor_flops
        rows.append(LayerFlopsRow(N, att, lin, att / (att + lin), s, s / g.memory if g.memory else float("nan"),
                                  traffic, math))
    return rows


# ---------------------------------------------------------------- §6.1 (03 demo 3)


@dataclass(frozen=True)
class BlockSizeRow(_Row):
    block_q: int
    block_k: int
    sram_bytes: int
    fits: bool
    kv_passes_per_4k: int  # how often K/V are re-read at N = 4096: ceil(N/Br)

    COLUMNS: ClassVar[tuple] = (
        ("block_q", "Br", str),
        ("block_k", "Bc", str),
        ("sram_bytes", "shared memory", fmt_bytes),
        ("fits", "fits", lambda b: "yes" if b else "no"),
        ("kv_passes_per_4k", "K/V passes (N=4096)", str),
    )


def block_size_table(*, head_dim: int = 128, dtype_bytes=2, gpu="H100", sizes=(32, 64, 128, 256),
                     double_buffer: bool = True) -> list[BlockSizeRow]:
    """Which (Br, Bc) fit the GPU's shared memory per SM with double-buffered K/V (§6.1)."""
    g = get_gpu(gpu)
    nb = _dtype_bytes(dtype_bytes)
    rows = []
    for Br in sizes:
        for Bc in sizes:
            b = _io.sram_bytes(block_q=Br, block_k=Bc, head_dim=head_dim, dtype_bytes=nb, double_buffer=double_buffer)
            rows.append(BlockSizeRow(Br, Bc, b, b <= g.smem_per_sm, -(-4096 // Br)))
    return rows


# ---------------------------------------------------------------- §6.3 (03 demo 4)


@dataclass(frozen=True)
class ForwardIORow(_Row):
    algorithm: str
    elements: int
    bytes: int

    COLUMNS: ClassVar[tuple] = (
        ("algorithm", "algorithm", str),
        ("elements", "HBM elements", fmt_count),
        ("bytes", "bytes", fmt_bytes),
    )


def forward_io_table(*, seq: int = 4096, head_dim: int = 128, block_q: int = 128, block_k: int = 128,
                     dtype_bytes=2) -> list[ForwardIORow]:
    """HBM elements of one head's forward: standard, FA1 order, FA2 order, FA2 with K/V in L2 (§6.3)."""
    nb = _dtype_bytes(dtype_bytes)
    shape = dict(seq=seq, head_dim=head_dim)
    blocks = dict(block_q=block_q, block_k=block_k)
    counts = [
        ("standard (ideal cache)", _io.io_standard_forward(**shape)),
        ("FlashAttention-1 order", _io.io_fa1_forward(**shape, **blocks)),
        ("FlashAttention-2 order", _io.io_flash_forward(**shape, **blocks)),
        ("FA2, K/V in L2", _io.io_flash_forward(**shape, **blocks, kv_in_l2=True)),
    ]
    return [ForwardIORow(name, n, n * nb) for name, n in counts]


# ---------------------------------------------------------------- §7.1–7.2 (04 demo 2)


@dataclass(frozen=True)
class PvsLRow(_Row):
    seq: int
    p_bytes: int  # P for all heads (what the standard backward keeps)
    l_bytes: int  # L for all heads, FP32 (what FlashAttention keeps)
    ratio: float

    COLUMNS: ClassVar[tuple] = (
        ("seq", "N", lambda n: f"{n:,}"),
        ("p_bytes", "store P", fmt_bytes),
        ("l_bytes", "store L", fmt_bytes),
        ("ratio", "P / L", lambda x: f"{x:,.0f}×"),
    )


def p_vs_l_table(seqs=(1024, 4096, 16384, 65536), *, heads: int = 32, dtype_bytes=2) -> list[PvsLRow]:
    """Storing P vs storing L for one layer (§7.1–7.2): 64K, 32 heads, FP16 → 256 GiB vs 8 MiB."""
    rows = []
    for N in seqs:
        p = scores_bytes(heads=heads, seq_q=N, dtype_bytes=dtype_bytes)
        l = lse_bytes(heads=heads, seq=N)
        rows.append(PvsLRow(N, p, l, p / l))
    return rows


# ---------------------------------------------------------------- §7.6 (04 demo 4)


@dataclass(frozen=True)
class RecomputeRow(_Row):
    gpu: str
    tensor_flops: float
    hbm_bw: float
    ridge: float
    ratio: float  # recompute time / read-back time = d / ridge (FP16)
    crossover_d: float  # reading P back wins above this head dim

    COLUMNS: ClassVar[tuple] = (
        ("gpu", "GPU", str),
        ("tensor_flops", "FP16 tensor", lambda f: f"{f / 1e12:,.0f} TFLOP/s"),
        ("hbm_bw", "HBM", lambda b: f"{b / 1e12:.2f} TB/s"),
        ("ridge", "ridge", lambda r: f"{r:.0f}"),
        ("ratio", "d / ridge", lambda r: f"{r:.2f}"),
        ("crossover_d", "read back wins for d >", lambda r: f"{r:.0f}"),
    )

    @property
    def recompute_cheaper(self) -> bool:
        return self.ratio < 1


def recompute_table(*, head_dim: int = 128, gpus=("V100", "A100", "H100", "B200"), dtype_bytes=2) -> list[RecomputeRow]:
    """Recompute S or read P back? d / ridge per GPU, independent of N (§7.6)."""
    rows = []
    for name in gpus:
        g = get_gpu(name)
        rows.append(RecomputeRow(g.name, g.tensor_flops, g.hbm_bw, g.ridge, recompute_ratio(head_dim=head_dim, gpu=g, dtype_bytes=dtype_bytes),
                                 recompute_crossover_d(g, dtype_bytes=dtype_bytes)))
    return rows


# ---------------------------------------------------------------- §8.3 (05 demo 2)


@dataclass(frozen=True)
class PrefillDecodeRow(_Row):
    phase: str
    batch: int
    tokens: int  # tokens through the layer
    context: int
    linear_intensity: float
    attention_intensity: float
    linear_time: float
    attention_time: float
    attention_share: float
    time_per_token: float

    COLUMNS: ClassVar[tuple] = (
        ("phase", "phase", str),
        ("batch", "batch", str),
        ("context", "context", lambda n: f"{n:,}"),
        ("linear_intensity", "linear FLOP/B", lambda x: f"{x:,.0f}"),
        ("attention_intensity", "attention FLOP/B", lambda x: f"{x:,.1f}"),
        ("linear_time", "linear", fmt_time),
        ("attention_time", "attention", fmt_time),
        ("attention_share", "attention share", fmt_pct),
        ("time_per_token", "per token", fmt_time),
    )


def prefill_decode_table(*, prefill_seq: int = 2048, context: int = 2048, batches=(1, 8, 32, 128), gpu="H100",
                         **layer) -> list[PrefillDecodeRow]:
    """One 7B layer on the roofline: prefill of ``prefill_seq`` tokens, then one decode step at each
    batch size with ``context`` tokens in every sequence's KV cache (§8.3).

    The lecture's decode rows follow its 2048-token prefill, so the context is 2048: then attention
    is 8% of a decode step at batch 1 and 91% at batch 128, and a batch-1 decode token costs ~300×
    a prefill token. ``layer``: ``layer_costs`` arguments (d_model, heads, kv_heads, ffn_dim, ...).
    """
    runs = [("prefill", 1, prefill_seq, prefill_seq)] + [("decode", b, 1, context) for b in batches]
    rows = []
    for phase, b, new, ctx in runs:
        c = layer_costs(batch=b, new_tokens=new, context=ctx, gpu=gpu, **layer)
        a = c.attention
        rows.append(PrefillDecodeRow(phase, b, b * new, ctx, c.linear_intensity, a.intensity, c.linear_time,
                                     c.attention_time, c.attention_share, c.time_per_token))
    return rows


# ---------------------------------------------------------------- §8.4 (05 demo 4)


@dataclass(frozen=True)
class DecodeSplitRow(_Row):
    seq: int
    splits: int
    blocks: int
    waves: int
    sm_use: float
    time: float
    best: bool  # splits == best_num_splits(...)

    COLUMNS: ClassVar[tuple] = (
        ("seq", "context", lambda n: f"{n:,}"),
        ("splits", "splits", str),
        ("blocks", "blocks", str),
        ("waves", "waves", str),
        ("sm_use", "SM use", fmt_pct),
        ("time", "time", fmt_time),
        ("best", "best", lambda b: "◀" if b else ""),
    )


def decode_split_table(*, batch: int = 1, heads: int = 32, head_dim: int = 128, seqs=(1024, 8192, 32768),
                       splits=(1, 2, 3, 4, 5, 8), gpu="H100", dtype_bytes=2,
                       merge_launch: bool = False) -> list[DecodeSplitRow]:
    """Flash-Decoding's wave model per context and split count (§8.4): at 32K, batch 1, 32 heads,
    D = 128, FP16 on H100, 4 splits take ≈ 169 µs and 5 splits ≈ 268 µs (two waves). The row of
    ``best_num_splits`` is added when ``splits`` lacks it."""
    rows = []
    for N in seqs:
        best = best_num_splits(batch=batch, heads=heads, seq=N, head_dim=head_dim, gpu=gpu, dtype_bytes=dtype_bytes,
                               merge_launch=merge_launch)
        for S in sorted(set(splits) | {best}):  # the best count always gets its row
            if S > N:
                continue
            c = decode_split_cost(batch=batch, heads=heads, seq=N, head_dim=head_dim, splits=S, gpu=gpu,
                                  dtype_bytes=dtype_bytes, merge_launch=merge_launch)
            rows.append(DecodeSplitRow(N, S, c.blocks, c.waves, c.sm_use, c.time, S == best))
    return rows
