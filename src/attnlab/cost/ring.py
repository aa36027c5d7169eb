"""Ring attention's cost model: does the K/V transfer of each ring step hide under its compute, and
how well does attention scale over P devices? (The merge ⊕ of §4.4–§4.5 across devices, costed
with the roofline of §3.2/§5.5 and a link's bandwidth.)

A ring of P ranks splits N tokens into local chunks of n = N/P. At each of the P steps every rank
attends its queries to the K/V block it holds (roofline time of the step's blocks, plus the ⊕ merge
or gradient accumulation that follows them) while sending that block on to the next rank
(``B·Hkv·n·(D + Dv)`` elements at the link's per-direction bandwidth, plus a fixed latency per
transfer). The model is lock-step: a step takes the longer of the slowest rank's compute and the
transfer in flight. In the forward the last step sends nothing. In the backward K/V travel again and
each block's dK/dV accumulators (float32) follow one hop behind, sharing the link; the last hop
home comes after the last step, exposed.

The blocks of a step (as ``attnlab.distributed.ring_schedule`` deals them out):

    non-causal            every step: one full n × n block
    causal, contiguous    step 0: the causal diagonal n × n; later steps: rank P-1 computes a full
                          n × n block (the ranks with later chunks wait), so a step costs a full block
    causal, zigzag        step 0: the causal diagonal; later steps: n × n/2 or n/2 × n, full — the
                          same pairs on every rank

so every pass has the closed form ``Σ_kinds count · max(compute, transfer) + tail`` over three kinds
of step (the first, the P-2 middle ones, the last). Scaling efficiency = (one GPU's roofline time for
the whole N) / (P · ring time): at most 1, since the ring computes the same pairs and moves at
least the same bytes, plus the merges, the launches and whatever transfer is not hidden.

Link presets: NVLink 4 (H100/H200 SXM: 18 links, 900 GB/s total, 450 GB/s per direction), PCIe 5.0
x16 (32 GT/s × 16 lanes, 128b/130b coding: 63 GB/s per direction), InfiniBand NDR (400 Gb/s = 50 GB/s
per direction and port). The latency per transfer is an assumption (NCCL point-to-point messages
take some microseconds), like the roofline's launch overhead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, heads_pair, pos_int
from .flops import attention_flops, causal_visible_pairs
from .gpus import GB, GPU, get_gpu
from .io import SOFTMAX_FLOPS
from .roofline import STAT_BYTES, kernel_time

LATENCY = 10e-6  # seconds per point-to-point transfer (an assumption, not a datasheet number)
MAX_RANKS = 1024
LAYOUTS = ("zigzag", "contiguous")


@dataclass(frozen=True)
class Link:
    """One hop of the ring: bytes/s in each direction (a rank sends and receives at once), seconds of
    latency per transfer."""

    name: str
    bandwidth: float
    latency: float = LATENCY

    def __post_init__(self):
        for field in ("bandwidth", "latency"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (field == "bandwidth" and v == 0):
                raise ValueError(f"Link.{field} must be a {'positive' if field == 'bandwidth' else '>= 0'} number, "
                                 f"got {v!r}")


LINKS: dict[str, Link] = {
    "nvlink4": Link("NVLink 4 (H100/H200 SXM)", 450 * GB),
    "pcie5": Link("PCIe 5.0 x16", 32e9 * 16 * 128 / 130 / 8),
    "ib-ndr": Link("InfiniBand NDR 400 Gb/s", 400e9 / 8),
}


def get_link(name) -> Link:
    """The preset called ``name`` (case-insensitive); a ``Link`` is returned as is."""
    if isinstance(name, Link):
        return name
    if isinstance(name, str) and name.strip().lower() in LINKS:
        return LINKS[name.strip().lower()]
    raise ValueError(f"unknown link {name!r}; known links: {', '.join(LINKS)} (or build one with Link(...))")


# -- one block, one transfer --------------------------------------------------------------------------


def _shape(batch, heads, kv_heads, head_dim, dtype_bytes):
    H, Hkv = heads_pair(heads, kv_heads)
    return pos_int(batch, "batch"), H, Hkv, pos_int(head_dim, "head_dim"), _dtype_bytes(dtype_bytes)


def _acc_bytes(nb: int) -> int:
    return 8 if nb == 8 else 4  # the ring's float32 accumulators (float64 for float64 data)


def attention_time(*, seq_q: int, seq_k: int, causal: bool, pass_: str = "fwd", gpu="H100", batch: int = 1,
                   heads: int = 32, kv_heads: int | None = None, head_dim: int = 128, dtype_bytes=2) -> float:
    """Roofline seconds of one attention call on a block of ``seq_q`` queries and ``seq_k`` keys (one
    launch; every array moves once). ``causal``: the diagonal block (square), half the pairs.
    Forward reads Q, K, V and writes O, L; backward ("bwd", 2.5× the FLOPs) reads Q, K, V, O, dO, L and
    writes dQ, dK, dV."""
    B, H, Hkv, D, nb = _shape(batch, heads, kv_heads, head_dim, dtype_bytes)
    Nq, Nk = pos_int(seq_q, "seq_q"), pos_int(seq_k, "seq_k")
    flag(causal, "causal")
    if causal and Nq != Nk:
        raise ValueError(f"a causal block is the square diagonal block, got seq_q {Nq} and seq_k {Nk}")
    if pass_ not in ("fwd", "bwd"):
        raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")
    flops = attention_flops(batch=B, heads=H, seq_q=Nq, seq_k=Nk, head_dim=D, causal=causal, pass_=pass_)
    pairs = causal_visible_pairs(seq_q=Nq, seq_k=Nk) if causal else Nq * Nk
    q_side, kv_side = B * H * Nq * D, B * Hkv * Nk * 2 * D  # Q (or O, dO, dQ) and K + V (or dK + dV), Dv = D
    if pass_ == "fwd":
        nbytes = (2 * q_side + kv_side) * nb + B * H * Nq * STAT_BYTES
    else:
        nbytes = (4 * q_side + 2 * kv_side) * nb + B * H * Nq * STAT_BYTES
    fp32 = SOFTMAX_FLOPS * B * H * pairs * (1 if pass_ == "fwd" else 2)
    return kernel_time(flops, nbytes, gpu, fp32_flops=fp32)[0]


def merge_time(*, seq_q: int, seq_k: int, pass_: str = "fwd", gpu="H100", batch: int = 1, heads: int = 32,
               kv_heads: int | None = None, head_dim: int = 128, dtype_bytes=2) -> float:
    """Seconds of the ring's bookkeeping after one block (memory-bound, one launch): forward, the ⊕
    merge of the block's (out, lse) into the running (m, ℓ, o) of ``seq_q`` rows; backward, adding the
    block's dQ into the dQ accumulator and its dK, dV into the ``seq_k`` rows of the travelling ones."""
    B, H, Hkv, D, nb = _shape(batch, heads, kv_heads, head_dim, dtype_bytes)
    Nq, Nk = pos_int(seq_q, "seq_q"), pos_int(seq_k, "seq_k")
    acc = _acc_bytes(nb)
    if pass_ == "fwd":  # read out_b, lse_b; read and write o, m, ℓ
        nbytes = B * H * Nq * (D * nb + STAT_BYTES + 2 * (D + 2) * acc)
    elif pass_ == "bwd":  # read dq_b, dk_b, dv_b; read and write the accumulators
        nbytes = (B * H * Nq * D + B * Hkv * Nk * 2 * D) * (nb + 2 * acc)
    else:
        raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")
    return kernel_time(0.0, nbytes, gpu)[0]


def kv_block_bytes(*, local_seq: int, batch: int = 1, kv_heads: int = 32, head_dim: int = 128, dtype_bytes=2) -> int:
    """Bytes of the K and V a rank holds and sends at each step: B·Hkv·n·2D elements."""
    return (pos_int(batch, "batch") * pos_int(kv_heads, "kv_heads") * pos_int(local_seq, "local_seq")
            * 2 * pos_int(head_dim, "head_dim") * _dtype_bytes(dtype_bytes))


def transfer_time(nbytes, link, *, transfers: int = 1) -> float:
    """Seconds to send ``nbytes`` over ``link`` in ``transfers`` batches (each pays the latency);
    0 for nothing."""
    lk = get_link(link)
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or nbytes < 0:
        raise ValueError(f"nbytes must be a number >= 0, got {nbytes!r}")
    if nbytes == 0:
        return 0.0
    return transfers * lk.latency + nbytes / lk.bandwidth


# -- the ring -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepKind:
    """``count`` ring steps alike: the slowest rank's compute and the transfer in flight (seconds)."""

    count: int
    compute: float
    transfer: float

    @property
    def time(self) -> float:
        return self.count * max(self.compute, self.transfer)

    @property
    def hidden(self) -> bool:
        return self.transfer <= self.compute

    def to_dict(self) -> dict:
        return asdict(self) | {"time": self.time, "hidden": self.hidden}


@dataclass(frozen=True)
class RingPass:
    """One pass (forward or backward) of the ring: its kinds of step, and the exposed tail."""

    kinds: tuple[StepKind, ...]
    tail: float = 0.0  # the backward's last dK/dV hop home, after the last step

    @property
    def time(self) -> float:
        return sum(k.time for k in self.kinds) + self.tail

    @property
    def compute(self) -> float:
        return sum(k.count * k.compute for k in self.kinds)

    @property
    def exposed(self) -> float:
        """Seconds of transfer not hidden under compute (the tail included)."""
        return self.time - self.compute

    @property
    def hidden(self) -> bool:
        """Every step's transfer fits under its compute (the backward's final hop aside)."""
        return all(k.hidden for k in self.kinds)

    def to_dict(self) -> dict:
        return {"kinds": [k.to_dict() for k in self.kinds], "tail": self.tail, "time": self.time,
                "compute": self.compute, "exposed": self.exposed, "hidden": self.hidden}


@dataclass(frozen=True)
class RingEstimate:
    """Ring attention of ``seq`` tokens over ``ranks`` devices joined by ``link``."""

    gpu: GPU
    link: Link
    ranks: int
    seq: int
    layout: str
    causal: bool
    kv_bytes: int  # K/V block sent per step
    dkv_bytes: int  # dK/dV accumulators sent per backward step
    forward: RingPass
    backward: RingPass
    single_forward: float  # one GPU, the whole sequence, roofline
    single_backward: float

    @property
    def local_seq(self) -> int:
        return self.seq // self.ranks

    @property
    def time(self) -> float:
        return self.forward.time + self.backward.time

    @property
    def hidden(self) -> bool:
        return self.forward.hidden and self.backward.hidden

    @property
    def efficiency(self) -> float:
        """One GPU's time for the whole sequence / (P × the ring's time), forward + backward."""
        return (self.single_forward + self.single_backward) / (self.ranks * self.time)

    def to_dict(self) -> dict:
        return {"gpu": self.gpu.name, "link": asdict(self.link), "ranks": self.ranks, "seq": self.seq,
                "local_seq": self.local_seq, "layout": self.layout, "causal": self.causal,
                "kv_bytes": self.kv_bytes, "dkv_bytes": self.dkv_bytes, "forward": self.forward.to_dict(),
                "backward": self.backward.to_dict(), "single_forward": self.single_forward,
                "single_backward": self.single_backward, "time": self.time, "hidden": self.hidden,
                "efficiency": self.efficiency}


def _step_compute(kind: str, n: int, *, causal: bool, layout: str, pass_: str, shape: dict) -> float:
    """The slowest rank's compute at a step of ``kind`` ("first" or "later")."""

    def block(nq, nk, diag=False):
        return (attention_time(seq_q=nq, seq_k=nk, causal=diag, pass_=pass_, **shape)
                + merge_time(seq_q=nq, seq_k=nk, pass_=pass_, **shape))

    if not causal:
        return block(n, n)
    if kind == "first":
        return block(n, n, diag=True)
    if layout == "contiguous":
        return block(n, n)  # rank P-1 sees every earlier chunk whole
    return max(block(n, n // 2), block(n // 2, n))  # ranks after the source / before it


def ring_estimate(*, ranks: int, seq: int, link="nvlink4", gpu="H100", batch: int = 1, heads: int = 32,
                  kv_heads: int | None = None, head_dim: int = 128, dtype_bytes=2, causal: bool = True,
                  layout: str = "zigzag") -> RingEstimate:
    """The ring's forward and backward time, whether each step's transfer hides under its compute,
    and the scaling efficiency, for ``seq`` tokens (a multiple of 2·ranks for zigzag, of ranks for
    contiguous) over ``ranks`` ≤ 1024 devices."""
    P, N = pos_int(ranks, "ranks"), pos_int(seq, "seq")
    if P > MAX_RANKS:
        raise ValueError(f"ranks must be at most {MAX_RANKS} (the model has one kind of link per hop), got {P}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    flag(causal, "causal")
    parts = 2 * P if layout == "zigzag" else P
    if N % parts:
        raise ValueError(f"seq ({N}) must be a multiple of {'2·ranks' if layout == 'zigzag' else 'ranks'} = {parts} "
                         f"for the {layout} layout")
    g, lk = get_gpu(gpu), get_link(link)
    B, H, Hkv, D, nb = _shape(batch, heads, kv_heads, head_dim, dtype_bytes)
    shape = dict(gpu=g, batch=B, heads=H, kv_heads=Hkv, head_dim=D, dtype_bytes=nb)
    n = N // P
    kv = kv_block_bytes(local_seq=n, batch=B, kv_heads=Hkv, head_dim=D, dtype_bytes=nb)
    dkv = kv // nb * _acc_bytes(nb)
    t_kv, t_dkv, t_both = transfer_time(kv, lk), transfer_time(dkv, lk), transfer_time(kv + dkv, lk, transfers=2)
    c = {(kind, p): _step_compute(kind, n, causal=causal, layout=layout, pass_=p, shape=shape)
         for kind in ("first", "later") for p in ("fwd", "bwd")}
    if P == 1:
        fwd, bwd = RingPass((StepKind(1, c["first", "fwd"], 0.0),)), RingPass((StepKind(1, c["first", "bwd"], 0.0),))
    else:  # steps 0, 1..P-2, P-1: what is in flight during each
        fwd = RingPass((StepKind(1, c["first", "fwd"], t_kv), StepKind(P - 2, c["later", "fwd"], t_kv),
                        StepKind(1, c["later", "fwd"], 0.0)))
        bwd = RingPass((StepKind(1, c["first", "bwd"], t_kv), StepKind(P - 2, c["later", "bwd"], t_both),
                        StepKind(1, c["later", "bwd"], t_dkv)), tail=t_dkv)
        fwd = RingPass(tuple(k for k in fwd.kinds if k.count))
        bwd = RingPass(tuple(k for k in bwd.kinds if k.count), tail=bwd.tail)
    single = {p: attention_time(seq_q=N, seq_k=N, causal=causal, pass_=p, **shape) for p in ("fwd", "bwd")}
    sent = (kv, dkv) if P > 1 else (0, 0)
    return RingEstimate(g, lk, P, N, layout, causal, *sent, fwd, bwd, single["fwd"], single["bwd"])
