"""``estimate(...)``: forward, backward and decode estimates for one attention shape on one GPU — the
typed function behind ``attnlab estimate`` (§5.5, §7.5, §8.4 applied to any shape) — and, given
``ranks``, ring attention of that shape over P GPUs joined by a link (``ring.ring_estimate``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ._args import DTYPE_BYTES, flag, heads_pair, pos_int
from .calibration import (
    CALIBRATIONS,
    SAME_PROCESSOR,
    calibrated_num_splits,
    calibrated_split_time,
    calibration_for,
    calibration_for_config,
)
from .decode import kv_cache_bytes
from .flops import attention_flops
from .gpus import GPU, get_gpu
from .grid import GridEstimate, grid_estimate
from .ring import MAX_RANKS, RingEstimate, get_link, ring_estimate
from .roofline import BackwardEstimate, ForwardEstimate, KernelCost, estimate_backward, estimate_forward
from .splits import DecodeSplit, best_num_splits, decode_split_cost


@dataclass(frozen=True)
class CalibratedDecode:
    """attnlab's split kernel in one configuration ``config`` (block_n, block_d, num_warps, num_stages) by the
    calibrated model: the split count it picks and that call's time; ``measured``: whether the calibration was
    measured on this GPU (else predicted: ``source`` says from what)."""

    config: tuple
    splits: int
    blocks: int
    waves: int
    time: float
    measured: bool
    source: str

    def to_dict(self) -> dict:
        return asdict(self) | {"config": list(self.config)}


def calibrated_decodes(*, batch: int, kv_heads: int, seq: int, head_dim: int, gpu: GPU,
                       dtype_bytes: int = 2) -> tuple[CalibratedDecode, ...]:
    """The calibrated model's picks for ``gpu`` at this head dim: one per tile length of the calibrations behind
    ``CALIBRATIONS`` for it (measured on it, or on the GPU whose processor it shares), at ``block_d`` the head dim's
    power of two (``calibration_for_config``: measured, or scaled from a wider one); none where no calibration
    applies (the wave model is all there is)."""
    name = gpu.name.upper()
    homes = {part for part, _ in CALIBRATIONS if part in name}
    homes |= {m for part, m in SAME_PROCESSOR.items() if part in name}
    block_d = 1 << (head_dim - 1).bit_length()
    out = []
    for cfg in sorted({(k[0], block_d, k[2], k[3]) for part, k in CALIBRATIONS if part in homes}):
        cal = calibration_for_config(gpu.name, cfg)
        if cal is None:
            continue
        kw = dict(batch=batch, kv_heads=kv_heads, seq=seq, head_dim=head_dim, sms=gpu.sms, cal=cal,
                  dtype_bytes=dtype_bytes)
        S = calibrated_num_splits(**kw, min_split_len=cfg[0])
        blocks = batch * kv_heads * S
        out.append(CalibratedDecode(cfg, S, blocks, -(-blocks // (gpu.sms * cal.programs_per_sm)),
                                    calibrated_split_time(**kw, splits=S), calibration_for(gpu.name, cfg) is not None,
                                    cal.source))
    return tuple(out)


@dataclass(frozen=True)
class DecodeEstimate:
    """One decode step (1 new token per sequence, ``context`` cached tokens), Flash-Decoding model."""

    context: int
    kv_cache_bytes: int  # this layer's K and V for the whole batch
    flops: float
    no_split: DecodeSplit  # plain FlashAttention: one block per (batch, K/V head)
    best: DecodeSplit  # best_num_splits
    calibrated: tuple[CalibratedDecode, ...] = ()  # attnlab's split kernel by the calibrated model, where one applies

    def to_dict(self) -> dict:
        return {"context": self.context, "kv_cache_bytes": self.kv_cache_bytes, "flops": self.flops,
                "no_split": self.no_split.to_dict(), "best": self.best.to_dict(),
                "calibrated": [c.to_dict() for c in self.calibrated]}


@dataclass(frozen=True)
class Estimate:
    """Everything ``attnlab estimate`` prints, for one shape on one GPU."""

    gpu: GPU
    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    dtype: str
    causal: bool
    block_q: int
    block_k: int
    flops_forward: float  # attention_flops convention (causal: half)
    flops_backward: float
    forward: ForwardEstimate
    backward: BackwardEstimate
    decode: DecodeEstimate
    ring: tuple[RingEstimate, ...] = ()  # with ranks: per P of ring_ranks(ranks, seq), zigzag then contiguous
    grids: tuple[GridEstimate, ...] = ()  # the flash forward's and backward's grids on the GPU's SMs (``grid``)

    def kernels(self) -> list[tuple[str, KernelCost]]:
        """(algorithm, kernel) for every kernel of the forward and backward estimates."""
        out = []
        for label, ks in (("fwd standard", self.forward.standard), ("fwd flash (K/V in L2)", self.forward.flash_l2),
                          ("fwd flash (K/V from HBM)", self.forward.flash_hbm), ("bwd standard", self.backward.standard),
                          ("bwd flash (ideal cache)", self.backward.flash_l2),
                          ("bwd flash (no cache)", self.backward.flash_hbm)):
            out += [(label, k) for k in ks]
        return out

    def to_dict(self) -> dict:
        return {
            "gpu": asdict(self.gpu) | {"ridge": self.gpu.ridge},
            "shape": {"batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads, "seq": self.seq,
                      "head_dim": self.head_dim, "dtype": self.dtype, "causal": self.causal,
                      "block_q": self.block_q, "block_k": self.block_k},
            "flops": {"forward": self.flops_forward, "backward": self.flops_backward},
            "forward": self.forward.to_dict(),
            "backward": self.backward.to_dict(),
            "decode": self.decode.to_dict(),
            "grids": [gr.to_dict() for gr in self.grids],
        } | ({"ring": [r.to_dict() for r in self.ring]} if self.ring else {})


def ring_ranks(ranks: int, seq: int) -> list[int]:
    """The rank counts ``attnlab estimate --ranks P`` shows: the powers of two below P that cut ``seq``
    into 2·P' equal chunks, then P itself (which must)."""
    P, N = pos_int(ranks, "ranks"), pos_int(seq, "seq")
    if P > MAX_RANKS:
        raise ValueError(f"ranks must be at most {MAX_RANKS}, got {P}")
    if N % (2 * P):
        raise ValueError(f"ring attention needs seq ({N}) to be a multiple of 2·ranks = {2 * P} (the zigzag layout)")
    return [p for p in (2**k for k in range(11)) if p < P and N % (2 * p) == 0] + [P]


def estimate(*, gpu="H100", seq: int = 4096, head_dim: int = 128, heads: int = 32, batch: int = 1,
             kv_heads: int | None = None, dtype: str = "fp16", causal: bool = False, block_q: int = 128,
             block_k: int | None = None, ranks: int | None = None, link="nvlink4") -> Estimate:
    """Roofline estimates for attention of ``batch`` × ``heads`` × ``seq`` × ``head_dim`` on ``gpu``.

    Forward: standard 3 kernels vs FlashAttention (K/V in L2, K/V from HBM). Backward: standard 5
    kernels vs FlashAttention (ideal cache, no cache). Grids: the flash forward's programs (``block_q`` query
    rows each) and backward's (``block_k`` keys each) on the GPU's SMs (``grid.grid_estimate``). Decode: one new token per sequence against a
    ``seq``-token KV cache, one thread block per (batch, K/V head, split), without and with the best
    split count. Ring (``ranks`` given): ``ring_estimate`` of the shape for each P of ``ring_ranks``,
    zigzag and contiguous layouts, over ``link`` (a preset name of ``ring.LINKS`` or a ``Link``).
    Raises ``ValueError`` on an unknown GPU, dtype or link, non-positive sizes, ``heads`` not a
    multiple of ``kv_heads``, or ``seq`` not a multiple of 2·ranks.
    """
    g = get_gpu(gpu)
    H, Hkv = heads_pair(heads, kv_heads)
    B, N, D = pos_int(batch, "batch"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    Br = pos_int(block_q, "block_q")
    Bc = Br if block_k is None else pos_int(block_k, "block_k")
    if not isinstance(dtype, str) or dtype.lower() not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of fp16, bf16, fp32, got {dtype!r}")
    nb = DTYPE_BYTES[dtype.lower()]
    flag(causal, "causal")
    lk = get_link(link)
    ring_ps = ring_ranks(ranks, N) if ranks is not None else []
    shape = dict(seq=N, head_dim=D, batch=B, heads=H, kv_heads=Hkv, causal=causal, dtype_bytes=nb, gpu=g,
                 block_q=Br, block_k=Bc)
    fwd, bwd = estimate_forward(**shape), estimate_backward(**shape)
    S = best_num_splits(batch=B, heads=Hkv, seq=N, head_dim=D, gpu=g, dtype_bytes=nb)
    split = dict(batch=B, heads=Hkv, seq=N, head_dim=D, gpu=g, dtype_bytes=nb)
    dec = DecodeEstimate(
        context=N,
        kv_cache_bytes=kv_cache_bytes(layers=1, seq=N, batch=B, kv_heads=Hkv, head_dim=D, dtype_bytes=nb),
        flops=attention_flops(batch=B, heads=H, seq_q=1, seq_k=N, head_dim=D),
        no_split=decode_split_cost(splits=1, **split),
        best=decode_split_cost(splits=S, **split),
        calibrated=calibrated_decodes(batch=B, kv_heads=Hkv, seq=N, head_dim=D, gpu=g, dtype_bytes=nb),
    )
    fl = dict(batch=B, heads=H, seq_q=N, head_dim=D, causal=causal)
    ring = tuple(ring_estimate(ranks=p, seq=N, link=lk, gpu=g, batch=B, heads=H, kv_heads=Hkv, head_dim=D,
                               dtype_bytes=nb, causal=causal, layout=layout)
                 for p in ring_ps for layout in ("zigzag", "contiguous"))
    grids = tuple(grid_estimate(pass_=p, batch=B, heads=H, kv_heads=Hkv, seq=N, block=blk, causal=causal, sms=g.sms)
                  for p, blk in (("forward", Br), ("backward", Bc)))
    return Estimate(g, B, H, Hkv, N, D, dtype.lower(), causal, Br, Bc, attention_flops(**fl),
                    attention_flops(pass_="bwd", **fl), fwd, bwd, dec, ring, grids)
