"""Blockwise exact attention in PyTorch: FlashAttention forward, backward and Flash-Decoding.

* ``flash_forward``     — FlashAttention-2 order (§5.1): Q blocks outside, K/V blocks inside, the online
  softmax state ``(m, ℓ, acc)`` kept per Q block, causal pairs above the diagonal skipped whole (§6.2).
* ``flash_forward_fa1`` — FlashAttention-1 order (§6.3): K/V blocks outside; ``O``, ``ℓ``, ``m`` of every
  Q block read, updated and written back for each K/V block.
* ``flash_backward``    — recompute ``P`` from ``L`` (§7.2), ``D_i = rowsum(dO_i ∘ O_i)`` (§7.3), K/V blocks
  outside, ``dQ`` accumulated by atomic adds (§7.4).
* ``flash_attention``   — differentiable attention: an ``autograd.Function`` that saves only q, k, v, O, L
  (§7.7); on CUDA the Triton kernels of ``attnlab.gpu`` when they are installed.
* ``flash_decode``      — Flash-Decoding (§8.4): the K/V sequence cut into ``num_splits`` segments, a
  partial ``(out, lse)`` per segment, merged with ⊕ (§4.4); contiguous or paged KV cache.
* ``IOStats``           — optional counts of the elements each algorithm reads and writes per tensor.

Shapes: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D)`` with ``H % Hkv == 0`` (GQA/MQA); ``out (B, H, Nq, Dv)``,
``lse (B, H, Nq)`` (natural log). One program handles one Q block of ``Br`` positions for all ``G = H/Hkv``
query heads that share a K/V head (q viewed as ``(B, Hkv, G·Nq, D)``), so K/V are never repeated.
Causal masks are bottom-right aligned: query ``i`` sees keys ``j <= i + Nk - Nq``. Rows that see no key
give ``out = 0`` and ``lse = -inf``. Half-precision inputs accumulate in float32, float64 in float64.
"""

from __future__ import annotations

import math

import torch

from ._checks import causal_offset, check_positive_int, check_qkv, check_same, check_tensor, resolve_scale
from .softmax import AttnState, merge

__all__ = [
    "IOStats", "flash_forward", "flash_forward_fa1", "flash_backward", "flash_attention",
    "flash_attention_torch", "flash_decode", "flash_decode_torch", "cpu_block_sizes",
]

NEG_INF = float("-inf")
LOG2E = 1.4426950408889634  # log2(e): e^x = 2^(x·log2 e), and exp2 is the cheaper instruction
LN2 = 0.6931471805599453


# -- IOStats: what an algorithm reads and writes ---------------------------------------------------


_ORDER = ["Q", "K", "V", "O", "L", "m", "l", "dO", "D", "dQ", "dK", "dV", "O_split", "L_split"]


class IOStats:
    """Elements read / written / atomically added per tensor name, and block pairs computed or skipped.

    A block pair is one (Q block, K/V block) of one (batch, K/V head); ``pairs_masked`` counts the
    computed pairs that straddle the causal diagonal and need the element-wise mask. Counts are
    elements, not bytes (multiply by the element size for bytes), as in §5.4 and §6.3.
    """

    def __init__(self):
        self.reads: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.atomic_adds: dict[str, int] = {}
        self.pairs_computed = 0
        self.pairs_skipped = 0
        self.pairs_masked = 0

    def read(self, name: str, n: int) -> None:
        self.reads[name] = self.reads.get(name, 0) + int(n)

    def write(self, name: str, n: int) -> None:
        self.writes[name] = self.writes.get(name, 0) + int(n)

    def atomic_add(self, name: str, n: int) -> None:
        self.atomic_adds[name] = self.atomic_adds.get(name, 0) + int(n)

    def pairs(self, computed: int = 0, skipped: int = 0, masked: int = 0) -> None:
        self.pairs_computed += int(computed)
        self.pairs_skipped += int(skipped)
        self.pairs_masked += int(masked)

    @property
    def total_reads(self) -> int:
        return sum(self.reads.values())

    @property
    def total_writes(self) -> int:
        return sum(self.writes.values())

    @property
    def total_atomic_adds(self) -> int:
        return sum(self.atomic_adds.values())

    @property
    def total(self) -> int:
        """All element traffic: reads + writes + atomic adds (an atomic add is one read-modify-write)."""
        return self.total_reads + self.total_writes + self.total_atomic_adds

    def names(self) -> list[str]:
        seen = set(self.reads) | set(self.writes) | set(self.atomic_adds)
        return [n for n in _ORDER if n in seen] + sorted(seen - set(_ORDER))

    def as_dict(self) -> dict:
        return {"reads": dict(self.reads), "writes": dict(self.writes), "atomic_adds": dict(self.atomic_adds),
                "total_reads": self.total_reads, "total_writes": self.total_writes,
                "total_atomic_adds": self.total_atomic_adds, "total": self.total,
                "pairs_computed": self.pairs_computed, "pairs_skipped": self.pairs_skipped,
                "pairs_masked": self.pairs_masked}

    def _rows(self):
        for n in self.names():
            yield n, self.reads.get(n, 0), self.writes.get(n, 0), self.atomic_adds.get(n, 0)

    def table(self, title: str = "elements moved"):
        """A rich Table: one row per tensor, then the totals and the block pairs."""
        from rich.table import Table

        t = Table(title=title)
        for c in ("tensor", "read", "written", "atomic add"):
            t.add_column(c, justify="left" if c == "tensor" else "right")
        for n, r, w, a in self._rows():
            t.add_row(n, f"{r:,}", f"{w:,}", f"{a:,}")
        t.add_row("[bold]total[/bold]", f"{self.total_reads:,}", f"{self.total_writes:,}", f"{self.total_atomic_adds:,}")
        t.caption = (f"block pairs: {self.pairs_computed:,} computed ({self.pairs_masked:,} masked element-wise), "
                     f"{self.pairs_skipped:,} skipped")
        return t

    def __str__(self) -> str:
        lines = [f"{'tensor':<8} {'read':>14} {'written':>14} {'atomic add':>14}"]
        for n, r, w, a in self._rows():
            lines.append(f"{n:<8} {r:>14,} {w:>14,} {a:>14,}")
        lines.append(f"{'total':<8} {self.total_reads:>14,} {self.total_writes:>14,} {self.total_atomic_adds:>14,}")
        lines.append(f"block pairs: {self.pairs_computed:,} computed ({self.pairs_masked:,} masked), "
                     f"{self.pairs_skipped:,} skipped")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"IOStats(total={self.total:,}, pairs_computed={self.pairs_computed:,}, pairs_skipped={self.pairs_skipped:,})"


# -- shared helpers -----------------------------------------------------------------------------------


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float64 for float64, float32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_stats(stats) -> None:
    if stats is not None and not isinstance(stats, IOStats):
        raise TypeError(f"stats must be an IOStats or None, got {type(stats).__name__}")


def _check_causal(causal) -> bool:
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    return causal


def cpu_block_sizes(dims, *, budget: int = 1 << 20) -> tuple[int, int]:
    """Block sizes that make the blockwise loop efficient on a CPU; ``flash_attention_torch`` and
    ``block_q=None`` / ``block_k=None`` use them (the defaults 64/64 keep the lecture's counts).

    Each (Q block, K/V block) step costs ~15 tensor operations of fixed overhead, so blocks should be
    large; but every elementwise pass over the score tile ``S_ij`` of all ``B·H`` heads
    (``B·H·Br·Bc`` elements) should stay in cache. ``Bc = min(512, Nk)`` keys, and ``Br`` the rest of a
    ``budget`` of 2^20 elements (4 MiB of float32), a multiple of 16 between 16 and 256. At B·H = 8 this
    is Br = 256, Bc = 512, the fastest pair measured in benchmarks/cpu_forward.py; the tile, and so the
    extra memory, does not grow with N.
    """
    heads = max(1, dims.B * dims.H)
    bc = max(1, min(512, dims.Nk))
    br = budget // (heads * bc)
    br = max(16, min(256, br - br % 16))
    return min(br, max(1, dims.Nq)), bc


def _resolve_blocks(block_q, block_k, dims) -> tuple[int, int]:
    if block_q is None or block_k is None:
        auto_q, auto_k = cpu_block_sizes(dims)
        block_q = auto_q if block_q is None else block_q
        block_k = auto_k if block_k is None else block_k
    return check_positive_int(block_q, "block_q"), check_positive_int(block_k, "block_k")


def _pair_kind(causal: bool, i0: int, i1: int, j0: int, j1: int, off: int) -> str:
    """§6.2: 'skip' (block wholly above the diagonal), 'mask' (straddles it) or 'full'."""
    if not causal:
        return "full"
    if j0 > i1 - 1 + off:  # first key later than the last query can see
        return "skip"
    if j1 - 1 > i0 + off:  # last key later than the first query can see
        return "mask"
    return "full"


def _mask_block(s: torch.Tensor, i0: int, i1: int, j0: int, j1: int, off: int, G: int) -> None:
    """Set the masked scores of a (G·Br, Bc) tile to -inf in place (rows are G heads × Br positions)."""
    i = torch.arange(i0, i1, device=s.device).unsqueeze(1)
    j = torch.arange(j0, j1, device=s.device).unsqueeze(0)
    shape = s.shape
    s.view(*shape[:-2], G, i1 - i0, j1 - j0).masked_fill_(j > i + off, NEG_INF)


def _add_matmul_(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """c += a @ b in place (one accumulating gemm for plain matrices)."""
    return c.addmm_(a, b) if c.dim() == 2 else c.add_(torch.matmul(a, b))


def _q_block(q5: torch.Tensor, i0: int, i1: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows i0:i1 of all G heads of a group: (..., G, Nq, D) -> (..., G·Br, D)."""
    *lead, G, _, D = q5.shape
    return q5[..., i0:i1, :].reshape(*lead, G * (i1 - i0), D).to(dtype)


# -- §5.1 FlashAttention-2 forward: Q blocks outside ------------------------------------------------


def _programs_per_step(dims, Br: int, Bc: int, device: torch.device) -> int:
    """How many (batch, K/V head) programs one step of the CPU loop processes together.

    With one CPU thread: as many as keep the score tile ``S_ij`` within 2^17 elements (512 KiB of float32,
    an L2 cache), so every elementwise pass over it stays in cache — one head at a time at Br = 256,
    Bc = 512 (measured 1.2-1.3x faster than all heads at once, benchmarks/cpu_forward.py). With several
    threads, and on other devices: all of them, so each operation has enough work to split across threads.
    """
    programs = dims.B * dims.Hkv
    if device.type != "cpu" or (torch.get_num_threads() > 1 and programs == 1):
        return max(1, programs)
    return max(1, min(programs, (1 << 17) // (dims.group * Br * Bc)))


def _run_programs(step, chunks: list, device: torch.device, stats) -> None:
    """Run ``step(chunk)`` for every chunk of (batch, K/V head) programs.

    The programs are independent (one thread block each on a GPU). On a CPU with several intra-op
    threads they are dealt out to that many worker threads, each running its share on one intra-op
    thread (``torch.set_num_threads`` is per thread): every operation then runs whole on one core,
    instead of every one of the ~15 small operations of a block step being split across cores and
    waiting for the slowest. Counting (``stats``) runs in order on the calling thread.
    """
    workers = min(torch.get_num_threads(), len(chunks)) if device.type == "cpu" and stats is None else 1
    if workers <= 1:
        for chunk in chunks:
            step(chunk)
        return
    from concurrent.futures import ThreadPoolExecutor

    def work(share):
        torch.set_num_threads(1)  # this worker thread only
        for chunk in share:
            step(chunk)

    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(work, chunks[w::workers]) for w in range(workers)]:
            f.result()  # re-raise a worker's error here


def _program_chunks(B: int, Hkv: int, per_step: int):
    """Indices (into the batch and K/V-head dims) that cover B × Hkv, ``per_step`` programs at a time.

    A single program is indexed by integers, so its tensors lose those two dims and the loop runs on
    plain matrices (2-D gemms, the fastest path on a CPU); larger steps are slices. Views only."""
    if per_step == 1:
        for b0 in range(B):
            for h0 in range(Hkv):
                yield b0, h0
    elif per_step >= Hkv:
        nb = per_step // Hkv
        for b0 in range(0, B, nb):
            yield slice(b0, min(b0 + nb, B)), slice(0, Hkv)
    else:
        for b0 in range(B):
            for h0 in range(0, Hkv, per_step):
                yield slice(b0, b0 + 1), slice(h0, min(h0 + per_step, Hkv))


def flash_forward(q, k, v, *, causal: bool = False, scale: float | None = None, block_q: int | None = 64,
                  block_k: int | None = 64, stats: IOStats | None = None):
    """FlashAttention forward in the FlashAttention-2 loop order (§5.1).

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv); H % Hkv == 0.
        causal: bottom-right aligned (query i sees keys j <= i + Nk - Nq); K/V blocks wholly above the
            diagonal are skipped without being read (§6.2).
        scale: default 1/sqrt(D).
        block_q, block_k: Br and Bc (ragged last blocks are fine); ``None`` picks ``cpu_block_sizes``.
        stats: an ``IOStats`` to count into: Q read once, K/V once per computed pair, O and L written once.
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) in float32 (float64 for float64 inputs).

    Every (batch, K/V head, Q block) is an independent program (a thread block on a GPU); the loop
    runs several (batch, K/V head) programs side by side (``_programs_per_step``). As in FlashAttention's
    kernels the scores are kept in base-2 units (q pre-multiplied by scale·log2 e), so that ``exp2`` —
    cheaper than ``exp`` — does the exponentials: 2^(x·log2 e) = e^x.
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    causal = _check_causal(causal)
    Br, Bc = _resolve_blocks(block_q, block_k, dims)
    _check_stats(stats)
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = _acc_dtype(q.dtype)
    q5 = q.reshape(B, Hkv, G, Nq, D)  # a view: the G query heads of each K/V head side by side
    out = torch.empty(B, Hkv, G, Nq, Dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hkv, G, Nq, dtype=acc_dt, device=q.device)
    def step(chunk):
        bs, hs = chunk
        _fa2_programs(q5[bs, hs], k[bs, hs], v[bs, hs], out[bs, hs], lse[bs, hs], causal=causal,
                      scale=scale, Br=Br, Bc=Bc, Nk=Nk, stats=stats)

    _run_programs(step, list(_program_chunks(B, Hkv, _programs_per_step(dims, Br, Bc, q.device))), q.device, stats)
    return out.view(B, H, Nq, Dv), lse.view(B, H, Nq)


def _fa2_programs(q5, k, v, out, lse, *, causal, scale, Br, Bc, Nk, stats):
    """The FA2 loop for the programs of one step: q5 (..., G, Nq, D), k (..., Nk, D), v (..., Nk, Dv);
    writes out (..., G, Nq, Dv) and lse (..., G, Nq). The leading dims ``...`` index programs (batch,
    K/V head), and are absent for a single one."""
    *lead, G, Nq, D = q5.shape
    Dv = v.shape[-1]
    n_prog = math.prod(lead)
    acc_dt = lse.dtype
    off = causal_offset(Nq, Nk)
    floor = torch.finfo(acc_dt).min  # m starts here rather than at -inf: (-inf) - (-inf) never happens
    n_kv_blocks = -(-Nk // Bc)
    for i0 in range(0, Nq, Br):  # each Q block is independent: one thread block on a GPU
        i1 = min(i0 + Br, Nq)
        R = G * (i1 - i0)
        qi = _q_block(q5, i0, i1, acc_dt) * (scale * LOG2E)  # (..., G·Br, D), read once
        m = torch.full((*lead, R, 1), floor, dtype=acc_dt, device=q5.device)  # stays on chip
        l = torch.zeros(*lead, R, 1, dtype=acc_dt, device=q5.device)
        acc = torch.zeros(*lead, R, Dv, dtype=acc_dt, device=q5.device)
        n_done = n_masked = 0
        for j0 in range(0, Nk, Bc):
            j1 = min(j0 + Bc, Nk)
            kind = _pair_kind(causal, i0, i1, j0, j1, off)
            if kind == "skip":  # every later block is above the diagonal too: leave the loop
                break
            kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., Bc, D), (..., Bc, Dv)
            if kj.dtype != acc_dt:
                kj, vj = kj.to(acc_dt), vj.to(acc_dt)
            s = torch.matmul(qi, kj.transpose(-1, -2))  # S_ij·log2(e) (..., G·Br, Bc), only on chip
            if kind == "mask":
                _mask_block(s, i0, i1, j0, j1, off, G)
                n_masked += 1
            # -- update m and l
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            alpha = torch.exp2(m - m_new)  # the rescale factor e^(m - m_new) (in base 2)
            p = s.sub_(m_new).exp2_()  # P̃ = exp(S_ij - m_new), unnormalised, in place of S
            l.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
            # -- update the accumulator: acc = acc·alpha + P̃ V_j
            _add_matmul_(acc.mul_(alpha), p, vj)
            m = m_new
            n_done += 1
            if stats is not None:
                stats.read("K", n_prog * (j1 - j0) * D)
                stats.read("V", n_prog * (j1 - j0) * Dv)
        # -- epilogue: O_i = acc / l, L_i = m + log l (back from base 2 to natural log), written once
        out[..., i0:i1, :] = (acc / torch.where(l == 0, 1.0, l)).view(*lead, G, i1 - i0, Dv)
        lse[..., i0:i1] = torch.where(l == 0, NEG_INF, (m + torch.log2(l)) * LN2).view(*lead, G, i1 - i0)
        if stats is not None:
            stats.read("Q", n_prog * R * D)
            stats.write("O", n_prog * R * Dv)
            stats.write("L", n_prog * R)
            stats.pairs(computed=n_prog * n_done, skipped=n_prog * (n_kv_blocks - n_done), masked=n_prog * n_masked)


# -- §6.3 FlashAttention-1 forward: K/V blocks outside ----------------------------------------------


def flash_forward_fa1(q, k, v, *, causal: bool = False, scale: float | None = None, block_q: int | None = 64,
                      block_k: int | None = 64, stats: IOStats | None = None):
    """FlashAttention forward in the first version's loop order (§6.3, FlashAttention Algorithm 1).

    K/V blocks are outside and read once; for each of them every Q block that sees it reads Q_i and
    its running O_i (kept normalised, as FA1 does), ℓ_i, m_i from memory, updates them and writes them
    back. Same arguments and result as ``flash_forward``. ``stats`` counts, per (batch, K/V head):
    the initialisation of O, ℓ, m (writes), K and V once, Q/O/ℓ/m read and O/ℓ/m written per computed
    pair, and an epilogue that reads m, ℓ and writes L = m + log ℓ.
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    causal = _check_causal(causal)
    Br, Bc = _resolve_blocks(block_q, block_k, dims)
    _check_stats(stats)
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = _acc_dtype(q.dtype)
    off = causal_offset(Nq, Nk)
    q5 = q.reshape(B, Hkv, G, Nq, D)
    # "HBM" state, initialised: O = 0, ℓ = 0, m = -inf
    O = torch.zeros(B, Hkv, G, Nq, Dv, dtype=acc_dt, device=q.device)
    l_hbm = torch.zeros(B, Hkv, G, Nq, dtype=acc_dt, device=q.device)
    m_hbm = torch.full((B, Hkv, G, Nq), NEG_INF, dtype=acc_dt, device=q.device)
    if stats is not None:
        stats.write("O", B * H * Nq * Dv)
        stats.write("l", B * H * Nq)
        stats.write("m", B * H * Nq)
    n_q_blocks = -(-Nq // Br)
    for j0 in range(0, Nk, Bc):  # outer: K/V block, read once
        j1 = min(j0 + Bc, Nk)
        kj = k[:, :, j0:j1].to(acc_dt)
        vj = v[:, :, j0:j1].to(acc_dt)
        n_done = n_masked = 0
        for i0 in range(0, Nq, Br):  # inner: every Q block
            i1 = min(i0 + Br, Nq)
            kind = _pair_kind(causal, i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            R = G * (i1 - i0)
            qi = _q_block(q5, i0, i1, acc_dt) * scale
            o_i = O[:, :, :, i0:i1].reshape(B, Hkv, R, Dv)  # read O_i, ℓ_i, m_i back from memory
            l_i = l_hbm[:, :, :, i0:i1].reshape(B, Hkv, R)
            m_i = m_hbm[:, :, :, i0:i1].reshape(B, Hkv, R)
            s = torch.matmul(qi, kj.transpose(-1, -2))  # (B, Hkv, G·Br, Bc)
            if kind == "mask":
                _mask_block(s, i0, i1, j0, j1, off, G)
                n_masked += 1
            # -- statistics of this block: m̃, P̃ = exp(S - m̃), ℓ̃
            m_blk = s.amax(dim=-1)
            p = s.sub_(m_blk.masked_fill(m_blk == NEG_INF, 0.0).unsqueeze(-1)).exp_()
            l_blk = p.sum(dim=-1)
            # -- merge with the running state (§4.5), keep O normalised
            m_new = torch.maximum(m_i, m_blk)
            base = m_new.masked_fill(m_new == NEG_INF, 0.0)
            c_old, c_blk = torch.exp(m_i - base), torch.exp(m_blk - base)
            l_new = l_i * c_old + l_blk * c_blk
            o_new = (o_i * (l_i * c_old).unsqueeze(-1) + torch.matmul(p, vj) * c_blk.unsqueeze(-1)) / torch.where(
                l_new == 0, 1.0, l_new).unsqueeze(-1)
            # -- write O_i, ℓ_i, m_i back
            O[:, :, :, i0:i1] = o_new.view(B, Hkv, G, i1 - i0, Dv)
            l_hbm[:, :, :, i0:i1] = l_new.view(B, Hkv, G, i1 - i0)
            m_hbm[:, :, :, i0:i1] = m_new.view(B, Hkv, G, i1 - i0)
            n_done += 1
            if stats is not None:
                stats.read("Q", B * Hkv * R * D)
                for name, n in (("O", R * Dv), ("l", R), ("m", R)):
                    stats.read(name, B * Hkv * n)
                    stats.write(name, B * Hkv * n)
        if stats is not None:
            stats.read("K", B * Hkv * (j1 - j0) * D)
            stats.read("V", B * Hkv * (j1 - j0) * Dv)
            stats.pairs(computed=B * Hkv * n_done, skipped=B * Hkv * (n_q_blocks - n_done),
                        masked=B * Hkv * n_masked)
    lse = m_hbm + torch.log(l_hbm)  # epilogue: L = m + log ℓ
    if stats is not None:
        stats.read("m", B * H * Nq)
        stats.read("l", B * H * Nq)
        stats.write("L", B * H * Nq)
    return O.to(q.dtype).view(B, H, Nq, Dv), lse.view(B, H, Nq)


# -- §7 backward: recompute P from L, K/V blocks outside --------------------------------------------


def _check_backward(q, dims, out, lse, dout, dlse):
    shape_o = (dims.B, dims.H, dims.Nq, dims.Dv)
    for name, t in (("out", out), ("dout", dout)):
        check_tensor(t, name)
        if tuple(t.shape) != shape_o:
            raise ValueError(f"{name} must have shape (B, H, Nq, Dv) = {shape_o}, got {tuple(t.shape)}")
    check_same({"q": q, "out": out, "dout": dout})
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None and name == "dlse":
            continue
        check_tensor(t, name, ndim=3)
        if tuple(t.shape) != shape_o[:3]:
            raise ValueError(f"{name} must have shape (B, H, Nq) = {shape_o[:3]}, got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


def flash_backward(q, k, v, out, lse, dout, *, causal: bool = False, scale: float | None = None,
                   block_q: int | None = 64, block_k: int | None = 64, stats: IOStats | None = None, dlse=None):
    """FlashAttention-2 backward (§7.2–§7.4): gradients of ``out = attention(q, k, v)``.

    ``P`` is recomputed from the saved ``lse`` (already normalised, no online softmax);
    ``D_i = rowsum(dO_i ∘ O_i)`` is computed once up front, so ``dS = P ∘ (dP - D_i)`` needs one block
    at a time. K/V blocks are outside: ``dK_j``, ``dV_j`` accumulate on chip and are written once;
    ``dQ_i`` receives one atomic add per computed (Q block, K/V block) pair. For GQA the ``dK``, ``dV`` of
    a K/V head sum over its group of query heads. ``dlse`` (B, H, Nq), optional, is the gradient flowing
    into ``lse`` itself (``dS += P ∘ dlse``).

    Arguments: as ``flash_forward``, plus out (B, H, Nq, Dv), lse (B, H, Nq) from the forward and
    dout (B, H, Nq, Dv). Returns dq, dk, dv in the shapes and dtypes of q, k, v.
    ``stats`` counts: O and dO read and D written by the preprocessing; per (batch, K/V head) K_j, V_j
    read and dK_j, dV_j written once; per computed pair Q_i, dO_i, L_i, D_i read and dQ_i atomically
    added (the zero fill of the dQ accumulator is not counted).
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    causal = _check_causal(causal)
    Br, Bc = _resolve_blocks(block_q, block_k, dims)
    _check_stats(stats)
    _check_backward(q, dims, out, lse, dout, dlse)
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = _acc_dtype(q.dtype)
    off = causal_offset(Nq, Nk)
    q5 = q.reshape(B, Hkv, G, Nq, D)
    do5 = dout.reshape(B, Hkv, G, Nq, Dv)
    # -- preprocess: D_i = rowsum(dO_i ∘ O_i)  (B, Hkv, G, Nq)
    Dvec = (do5.to(acc_dt) * out.reshape(B, Hkv, G, Nq, Dv).to(acc_dt)).sum(dim=-1)
    if dlse is not None:
        Dvec = Dvec - dlse.reshape(B, Hkv, G, Nq).to(acc_dt)
    L5 = lse.reshape(B, Hkv, G, Nq).to(acc_dt) * LOG2E  # in log2 units, for exp2
    L5 = L5.masked_fill(L5 == NEG_INF, float("inf"))  # rows that saw no key: P = exp(S - inf) = 0
    if stats is not None:
        stats.read("O", B * H * Nq * Dv)
        stats.read("dO", B * H * Nq * Dv)
        stats.write("D", B * H * Nq)
    dq_acc = torch.zeros(B, Hkv, G, Nq, D, dtype=acc_dt, device=q.device)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    n_q_blocks = -(-Nq // Br)
    for j0 in range(0, Nk, Bc):  # outer: one K/V block per thread block
        j1 = min(j0 + Bc, Nk)
        kj = k[:, :, j0:j1].to(acc_dt)  # (B, Hkv, Bc, D)
        vj = v[:, :, j0:j1].to(acc_dt)  # (B, Hkv, Bc, Dv)
        dk_j = torch.zeros(B, Hkv, j1 - j0, D, dtype=acc_dt, device=q.device)  # on chip
        dv_j = torch.zeros(B, Hkv, j1 - j0, Dv, dtype=acc_dt, device=q.device)
        n_done = n_masked = 0
        for i0 in range(0, Nq, Br):  # inner: every Q block that sees K_j
            i1 = min(i0 + Br, Nq)
            kind = _pair_kind(causal, i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            R = G * (i1 - i0)
            qi = _q_block(q5, i0, i1, acc_dt)  # (B, Hkv, G·Br, D)
            doi = _q_block(do5, i0, i1, acc_dt)  # (B, Hkv, G·Br, Dv)
            Li = L5[:, :, :, i0:i1].reshape(B, Hkv, R, 1)
            Di = Dvec[:, :, :, i0:i1].reshape(B, Hkv, R, 1)
            # -- recompute P from L: P = exp(S - L) = 2^(S·log2 e - L·log2 e)
            s = torch.matmul(qi, kj.transpose(-1, -2)).mul_(scale * LOG2E)  # (B, Hkv, G·Br, Bc)
            if kind == "mask":
                _mask_block(s, i0, i1, j0, j1, off, G)
                n_masked += 1
            p = s.sub_(Li).exp2_()
            # -- dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP - D_i)
            dv_j += torch.matmul(p.transpose(-1, -2), doi)
            ds = p.mul_(torch.matmul(doi, vj.transpose(-1, -2)).sub_(Di))
            # -- dQ_i += scale · dS K_j  (an atomic add: other K/V blocks add to the same rows)
            dq_acc[:, :, :, i0:i1] += torch.matmul(ds, kj).mul_(scale).view(B, Hkv, G, i1 - i0, D)
            # -- dK_j += scale · dSᵀ Q_i
            dk_j += torch.matmul(ds.transpose(-1, -2), qi).mul_(scale)
            n_done += 1
            if stats is not None:
                stats.read("Q", B * Hkv * R * D)
                stats.read("dO", B * Hkv * R * Dv)
                stats.read("L", B * Hkv * R)
                stats.read("D", B * Hkv * R)
                stats.atomic_add("dQ", B * Hkv * R * D)
        dk[:, :, j0:j1] = dk_j  # written once
        dv[:, :, j0:j1] = dv_j
        if stats is not None:
            stats.read("K", B * Hkv * (j1 - j0) * D)
            stats.read("V", B * Hkv * (j1 - j0) * Dv)
            stats.write("dK", B * Hkv * (j1 - j0) * D)
            stats.write("dV", B * Hkv * (j1 - j0) * Dv)
            stats.pairs(computed=B * Hkv * n_done, skipped=B * Hkv * (n_q_blocks - n_done),
                        masked=B * Hkv * n_masked)
    return dq_acc.view(B, H, Nq, D).to(q.dtype), dk, dv


# -- §7.7 autograd: save q, k, v, O, L only ---------------------------------------------------------


class _FlashAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_q, block_k):
        out, lse = flash_forward(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, scale, block_q, block_k)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, block_q, block_k = ctx.args
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = flash_backward(q, k, v, out, lse, dout, causal=causal, scale=scale, block_q=block_q,
                                    block_k=block_k, dlse=dlse)
        return dq, dk, dv, None, None, None, None


def flash_attention_torch(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False):
    """Differentiable blockwise attention in PyTorch (§7.7): forward ``flash_forward``, backward
    ``flash_backward``; autograd keeps only q, k, v, out and lse. Block sizes: ``cpu_block_sizes``.

    Returns ``out`` (B, H, Nq, Dv), or ``(out, lse)`` with ``return_lse=True`` (lse is differentiable too).
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    _check_causal(causal)
    block_q, block_k = cpu_block_sizes(dims)
    out, lse = _FlashAttentionFn.apply(q, k, v, causal, scale, block_q, block_k)
    return (out, lse) if return_lse else out


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False):
    """Exact attention with FlashAttention's memory behaviour, differentiable.

    q (B, H, Nq, D), k, v (B, Hkv, Nk, D/Dv); causal bottom-right aligned; scale default 1/sqrt(D).
    On CUDA tensors it runs ``attnlab.gpu.flash_attention_cuda`` (Triton) when that is installed; else,
    and on the CPU, ``flash_attention_torch``. Returns out, or (out, lse) with ``return_lse``.
    """
    if isinstance(q, torch.Tensor) and q.is_cuda:
        try:
            from attnlab.gpu import flash_attention_cuda
        except ImportError:
            pass
        else:
            return flash_attention_cuda(q, k, v, causal=causal, scale=scale, return_lse=return_lse)
    return flash_attention_torch(q, k, v, causal=causal, scale=scale, return_lse=return_lse)


# -- §8.4 Flash-Decoding: split the K/V sequence, merge the partials with ⊕ ------------------------


def _check_decode(q, k_cache, v_cache, cache_seqlens, block_table, num_splits):
    """Validate a decode call with the check the Triton path shares (``attnlab.kvcache``); here the
    lengths may also be a list of ints. Return (dims, page_size or 0, seqlens as a list)."""
    from ._checks import check_decode_inputs

    if cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
        if not (isinstance(cache_seqlens, (list, tuple))
                and all(isinstance(n, int) and not isinstance(n, bool) for n in cache_seqlens)):
            raise TypeError(f"cache_seqlens must be an int tensor or a list of ints, got {cache_seqlens!r}")
        cache_seqlens = torch.tensor(list(cache_seqlens), dtype=torch.int64,
                                     device=q.device if isinstance(q, torch.Tensor) else None)
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    seqlens = [dims.capacity] * dims.B if cache_seqlens is None else cache_seqlens.tolist()
    return dims, dims.page_size or 0, seqlens


def _cache_slice(cache, block_table, page_size, a: int, b: int, seqlens_t) -> torch.Tensor:
    """Keys/values at positions a..b-1 of every sequence: (B, Hkv, b - a, D).

    Contiguous: a view. Paged: gathered page by page through block_table (positions past a sequence's
    length read page 0, and are masked)."""
    if block_table is None:
        return cache[:, :, a:b]
    pos = torch.arange(a, b, device=cache.device)
    pages = block_table[:, pos // page_size].long()  # (B, n)
    pages = torch.where(pos.unsqueeze(0) < seqlens_t.unsqueeze(1), pages, torch.zeros_like(pages))
    return cache[pages, (pos % page_size).unsqueeze(0)].permute(0, 2, 1, 3)  # (B, n, Hkv, D) -> (B, Hkv, n, D)


def flash_decode_torch(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                       causal: bool = True, scale: float | None = None, stats: IOStats | None = None):
    """Flash-Decoding in PyTorch (§8.4): attention of a few new queries against a KV cache.

    Arguments:
        q: (B, H, Nq, D), Nq small (1 for plain decoding, a few for speculative steps).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D/Dv), or paged (num_blocks, page_size, Hkv, D/Dv)
            when ``block_table`` (B, max_pages; int32/int64: page ids of each sequence) is given.
        cache_seqlens: (B,) ints, keys held per sequence (default: the whole capacity, Lmax or
            max_pages·page_size); 0 is allowed and gives out 0, lse -inf.
        num_splits: S segments of the K/V sequence (default 1 on the CPU: a CPU has no idle SMs to fill).
            The span ``[0, max(cache_seqlens))`` is cut into S segments of ``ceil(span/S)`` keys (the last
            shorter, trailing ones empty when S exceeds the keys); empty segments give (0, -inf) partials,
            which ⊕ ignores.
        causal: query i of sequence b sees keys j <= cache_seqlens[b] - Nq + i (bottom-right, per
            sequence); with False it sees every key j < cache_seqlens[b].
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) in float32 (float64 for float64 inputs).
    ``stats`` counts per (batch, K/V head, segment): q read, the keys and values it holds that lie within the
    sequence read, a partial O_split and L_split written; then the merge reads them all and writes O, L.
    """
    dims, page_size, seqlens = _check_decode(q, k_cache, v_cache, cache_seqlens, block_table, num_splits)
    scale = resolve_scale(scale, dims.D)
    causal = _check_causal(causal)
    _check_stats(stats)
    B, H, Hkv, Nq, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.D, dims.Dv, dims.group
    S = 1 if num_splits is None else num_splits
    acc_dt = _acc_dtype(q.dtype)
    dev = q.device
    span = max(seqlens, default=0)
    seg = -(-span // S)  # keys per segment
    seqlens_t = torch.tensor(seqlens, dtype=torch.long, device=dev)
    qg = q.reshape(B, Hkv, G * Nq, D).to(acc_dt) * scale  # rows: G heads × Nq queries
    row_i = torch.arange(Nq, device=dev).repeat(G)  # query index of each row
    # last key each row may see, (B, 1, G·Nq, 1)
    last = (seqlens_t.view(B, 1) - 1) if not causal else (seqlens_t.view(B, 1) - Nq + row_i.view(1, -1))
    last = last.expand(B, G * Nq).view(B, 1, G * Nq, 1)
    state = None
    for s_idx in range(S):  # every segment is an independent thread block on a GPU
        a, b = min(s_idx * seg, span), min((s_idx + 1) * seg, span)
        if b > a:
            kj = _cache_slice(k_cache, block_table, page_size, a, b, seqlens_t).to(acc_dt)  # (B, Hkv, n, D)
            vj = _cache_slice(v_cache, block_table, page_size, a, b, seqlens_t).to(acc_dt)
            scores = torch.matmul(qg, kj.transpose(-1, -2))  # (B, Hkv, G·Nq, n)
            pos = torch.arange(a, b, device=dev).view(1, 1, 1, -1)
            scores.masked_fill_(pos > last, NEG_INF)
            m = scores.amax(dim=-1)
            base = m.masked_fill(m == NEG_INF, 0.0)
            p = scores.sub_(base.unsqueeze(-1)).exp_()
            l = p.sum(dim=-1)
            o = torch.matmul(p, vj)
            # the partial a kernel writes: normalised out and its lse
            part_out = o / torch.where(l == 0, 1.0, l).unsqueeze(-1)
            part_lse = m + torch.log(l)
        else:
            part_out = torch.zeros(B, Hkv, G * Nq, Dv, dtype=acc_dt, device=dev)
            part_lse = torch.full((B, Hkv, G * Nq), NEG_INF, dtype=acc_dt, device=dev)
        # -- ⊕ the partial into the running result: (m, ℓ, o) = (lse, 1, out), or (-inf, 0, 0) if empty
        part = AttnState(part_lse, (part_lse > NEG_INF).to(acc_dt), part_out)
        state = part if state is None else merge(state, part)
        if stats is not None:
            held = [max(0, min(b, n) - a) for n in seqlens]  # keys of this segment within each sequence
            stats.read("Q", B * H * Nq * D)
            stats.read("K", Hkv * sum(held) * D)
            stats.read("V", Hkv * sum(held) * Dv)
            stats.write("O_split", B * H * Nq * Dv)
            stats.write("L_split", B * H * Nq)
            nonempty = sum(1 for h in held if h > 0)
            stats.pairs(computed=Hkv * nonempty, skipped=Hkv * (B - nonempty))
    if stats is not None:  # the merge kernel
        stats.read("O_split", S * B * H * Nq * Dv)
        stats.read("L_split", S * B * H * Nq)
        stats.write("O", B * H * Nq * Dv)
        stats.write("L", B * H * Nq)
    out = state.finish().to(q.dtype).view(B, H, Nq, Dv)
    lse = state.lse.view(B, H, Nq)
    return out, lse


def flash_decode(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                 causal: bool = True, scale: float | None = None, stats: IOStats | None = None):
    """Flash-Decoding (§8.4); see ``flash_decode_torch`` for the arguments.

    On CUDA tensors (and without ``stats``) it runs ``attnlab.gpu.flash_decode_cuda`` when that is
    installed, which picks ``num_splits`` itself when given None; otherwise ``flash_decode_torch``.
    """
    if isinstance(q, torch.Tensor) and q.is_cuda and stats is None:
        try:
            from attnlab.gpu import flash_decode_cuda
        except ImportError:
            pass
        else:
            return flash_decode_cuda(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                     num_splits=num_splits, causal=causal, scale=scale)
    return flash_decode_torch(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                              num_splits=num_splits, causal=causal, scale=scale, stats=stats)
