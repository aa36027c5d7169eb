"""HBM traffic of attention, in elements per (batch, head): closed forms and their breakdowns.

§3.2 standard forward (3 kernels): 4Nd + 4N² with an ideal cache.
§5.4 FlashAttention forward (FA2 order, Q blocks outer): 2Nd + 2Nd·N/Br + N; 4Nd + N with K/V in L2.
§6.2 causal block skipping: T(T+1)/2 of T² (Q block, K/V block) pairs are computed.
§6.3 FlashAttention-1 order (K/V blocks outer): Q, O, m, ℓ re-read and O, m, ℓ re-written per K/V block.
§7.4–7.5 backward: the standard one's 7N² term against the FlashAttention backward (K/V blocks outer,
dQ by atomic adds).
§6.1 shared memory needed by a (Br, Bc) block pair.

Every count is built from a list of kernels (``KernelIO``: name, FLOPs, elements per array and
direction), so the breakdowns, the totals and the roofline estimates (``roofline.py``) agree by
construction. Every function with more than one argument takes keywords: ``seq`` = N, the sequence
length (Nq = Nk = N), ``head_dim`` = d, ``block_q`` = Br rows of Q per block, ``block_k`` = Bc rows of
K/V per block; T = number of blocks. N need not be a multiple of a block: the last block is partial
(T = ceil(N/B)) and only its real rows are counted.

"ideal cache" means: every byte of an N×d (or N) array moves between HBM and the chip once per pass;
the N×N arrays S, P, dP, dS fit in no cache and move at every kernel that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._args import flag, pos_int

Key = tuple[str, str]  # (array, "read" | "write")

# arrays stored per K/V head (GQA shares them between H/Hkv query heads); all others are per query head
KV_ARRAYS = frozenset({"K", "V", "dK", "dV"})
# per-row statistics, stored in FP32 whatever the data type
STAT_ARRAYS = frozenset({"L", "m", "l", "D"})
SOFTMAX_FLOPS = 5  # non-matmul FLOPs per score element: scale, max, subtract, exp, sum (divide at the end)


@dataclass(frozen=True)
class KernelIO:
    """One kernel of an algorithm, per (batch, head): FLOPs and elements moved per array."""

    name: str
    flops: float  # matmul FLOPs (tensor cores)
    other_flops: float  # element-wise / reduction FLOPs (FP32 units)
    io: dict[Key, int] = field(default_factory=dict)

    @property
    def elements(self) -> int:
        return sum(self.io.values())


def _merge(kernels: list[KernelIO]) -> dict[Key, int]:
    out: dict[Key, int] = {}
    for k in kernels:
        for key, n in k.io.items():
            if n:
                out[key] = out.get(key, 0) + n
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _gemm_reads(M: int, K: int, Nc: int, tile: int | None) -> tuple[int, int]:
    """Elements of A (M×K) and B (K×Nc) a GEMM C = AB reads.

    ``tile=None``: each operand once (ideal cache). A tile size T: the T×T-tiled kernel of §5.2 reads
    all of A once per column of output tiles and all of B once per row of output tiles.
    """
    if tile is None:
        return M * K, K * Nc
    return _cdiv(Nc, tile) * M * K, _cdiv(M, tile) * K * Nc


# ---------------------------------------------------------------- §6.2 causal block pairs


def causal_block_pairs(T: int) -> int:
    """(Q block, K/V block) pairs a causal mask leaves to compute with T×T square blocks: T(T+1)/2."""
    T = pos_int(T, "T")
    return T * (T + 1) // 2  # lower triangle + the diagonal


def causal_fraction(T: int) -> float:
    """Share of the T² block pairs computed under a causal mask: (T+1)/(2T) → 1/2 as T grows."""
    return causal_block_pairs(T) / (pos_int(T, "T") ** 2)


@dataclass(frozen=True)
class BlockPairs:
    """Which (Q block, K/V block) pairs a blockwise kernel computes, per head."""

    pairs: int  # computed pairs
    total_pairs: int  # Tr · Tc
    kv_rows_read: int  # Σ over Q blocks of the K/V rows they visit (FA2 forward reads of K, of V)
    q_rows_read: int  # Σ over K/V blocks of the Q rows they visit (backward reads of Q, O, dO, L)
    scores: int  # Σ over computed pairs of rows × cols: score elements actually computed


def block_pairs(*, seq: int, block_q: int, block_k: int, causal: bool = False) -> BlockPairs:
    """Count the block pairs of an N×N score matrix cut into Br×Bc blocks (ceil at the edge).

    Causal (square, so top-left = bottom-right alignment): a pair is skipped when its first key
    comes after its Q block's last query; pairs that straddle the diagonal are computed whole.
    """
    N, Br, Bc = pos_int(seq, "seq"), pos_int(block_q, "block_q"), pos_int(block_k, "block_k")
    flag(causal, "causal")
    Tr, Tc = _cdiv(N, Br), _cdiv(N, Bc)
    if not causal:
        return BlockPairs(Tr * Tc, Tr * Tc, Tr * N, Tc * N, N * N)
    pairs = kv_rows = scores = 0
    for i in range(Tr):  # Q block i: rows i·Br .. last
        rows = min(Br, N - i * Br)
        last = i * Br + rows - 1
        tj = last // Bc + 1  # K/V blocks whose first key is <= last
        keys = min(N, tj * Bc)
        pairs += tj
        kv_rows += keys
        scores += rows * keys
    q_rows = 0
    for j in range(Tc):  # K/V block j: Q blocks whose last row is >= j·Bc
        first_i = (j * Bc) // Br  # the Q block holding row j·Bc; all later ones qualify
        q_rows += N - first_i * Br
    return BlockPairs(pairs, Tr * Tc, kv_rows, q_rows, scores)


# ---------------------------------------------------------------- §3.2 standard forward


def standard_forward_kernels(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> list[KernelIO]:
    """The standard forward's 3 kernels (§3.2), per head.

    ① S = QKᵀ/√d: reads Q, K, writes S. ② P = softmax(S): reads S, writes P (one read per row,
    kept on chip for the two reductions). ③ O = PV: reads P, V, writes O.
    ``ideal_cache=False``: what the T×T-tiled GEMMs of §5.2 request (``tile`` = T, 16 there).
    """
    N, d = pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    flag(ideal_cache, "ideal_cache")
    t = None if ideal_cache else pos_int(tile, "tile")
    q, k = _gemm_reads(N, d, N, t)  # S (N×N) = Q (N×d) · Kᵀ (d×N)
    p, v = _gemm_reads(N, N, d, t)  # O (N×d) = P (N×N) · V (N×d)
    return [
        KernelIO("S = QKᵀ/√d", 2.0 * N * N * d, 1.0 * N * N, {("Q", "read"): q, ("K", "read"): k, ("S", "write"): N * N}),
        KernelIO("P = softmax(S)", 0.0, SOFTMAX_FLOPS * N * N, {("S", "read"): N * N, ("P", "write"): N * N}),
        KernelIO("O = PV", 2.0 * N * N * d, 0.0, {("P", "read"): p, ("V", "read"): v, ("O", "write"): N * d}),
    ]


def io_standard_forward_breakdown(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> dict[Key, int]:
    """Elements per (array, "read"/"write") of the standard forward; arrays Q, K, V, S, P, O."""
    return _merge(standard_forward_kernels(seq=seq, head_dim=head_dim, ideal_cache=ideal_cache, tile=tile))


def io_standard_forward(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> int:
    """HBM elements of the standard forward: 4Nd + 4N² with an ideal cache (§3.2)."""
    return sum(io_standard_forward_breakdown(seq=seq, head_dim=head_dim, ideal_cache=ideal_cache, tile=tile).values())


# ---------------------------------------------------------------- §5.4 FlashAttention forward (FA2 order)


def flash_forward_kernels(*, seq: int, head_dim: int, block_q: int, kv_in_l2: bool = False, causal: bool = False,
                          block_k: int | None = None) -> list[KernelIO]:
    """FlashAttention forward, FA2 loop order (Q blocks outer), one kernel, per head.

    Q read once, O and L written once; every Q block reads the K/V blocks it visits (all of them, or
    the non-skipped ones when causal). ``kv_in_l2``: K and V come from HBM once (ideal cache / L2).
    ``block_k`` (default ``block_q``) only matters for causal skipping.
    """
    N, d, Br = pos_int(seq, "seq"), pos_int(head_dim, "head_dim"), pos_int(block_q, "block_q")
    Bc = Br if block_k is None else pos_int(block_k, "block_k")
    flag(kv_in_l2, "kv_in_l2")
    bp = block_pairs(seq=N, block_q=Br, block_k=Bc, causal=causal)
    kv = N * d if kv_in_l2 else bp.kv_rows_read * d  # non-causal: Tr · N·d = N·d · N/Br
    io = {("Q", "read"): N * d, ("K", "read"): kv, ("V", "read"): kv, ("O", "write"): N * d, ("L", "write"): N}
    # QKᵀ and PV on the computed score elements; the online softmax's exp/max/sum on the same ones
    return [KernelIO("flash forward (FA2)", 4.0 * bp.scores * d, SOFTMAX_FLOPS * bp.scores, io)]


def io_flash_forward_breakdown(*, seq: int, head_dim: int, block_q: int, kv_in_l2: bool = False, causal: bool = False,
                               block_k: int | None = None) -> dict[Key, int]:
    """Elements per (array, "read"/"write") of the FlashAttention forward; arrays Q, K, V, O, L."""
    return _merge(flash_forward_kernels(seq=seq, head_dim=head_dim, block_q=block_q, kv_in_l2=kv_in_l2, causal=causal,
                                        block_k=block_k))


def io_flash_forward(*, seq: int, head_dim: int, block_q: int, kv_in_l2: bool = False, causal: bool = False,
                     block_k: int | None = None) -> int:
    """HBM elements of the FlashAttention forward (§5.4).

    2Nd + 2Nd·N/Br + N without a cache (exactly, when Br divides N; else the K/V term is
    2Nd·ceil(N/Br)); 4Nd + N with K/V held in L2. Causal: only the non-skipped block pairs read K/V.
    """
    return sum(io_flash_forward_breakdown(seq=seq, head_dim=head_dim, block_q=block_q, kv_in_l2=kv_in_l2, causal=causal,
                                          block_k=block_k).values())


def causal_kv_bytes_saved(*, seq: int, head_dim: int, block_q: int, block_k: int | None = None,
                          dtype_bytes: int = 2) -> int:
    """Bytes of K/V reads that causal block skipping saves in the FA2 forward (no cache) (§6.2)."""
    shape = dict(seq=seq, head_dim=head_dim, block_q=block_q, block_k=block_k)
    full = io_flash_forward_breakdown(**shape)
    skip = io_flash_forward_breakdown(**shape, causal=True)
    kv = [("K", "read"), ("V", "read")]
    return sum(full[k] - skip[k] for k in kv) * pos_int(dtype_bytes, "dtype_bytes")


# ---------------------------------------------------------------- §6.3 FlashAttention-1 order


def fa1_forward_kernels(*, seq: int, head_dim: int, block_q: int, block_k: int) -> list[KernelIO]:
    """FlashAttention-1 forward (K/V blocks outer, Q blocks inner), one kernel, per head.

    K and V are read once. For each of the Tc = ceil(N/Bc) K/V blocks, every Q block is read and its
    O_i, ℓ_i, m_i are read, updated and written back: Tc · (3Nd + 4N) on top of 2Nd (O, ℓ, m start
    in HBM as 0, 0, −∞). ``block_q`` does not change the count: all of Q is visited either way.
    """
    N, d = pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    pos_int(block_q, "block_q")
    Tc = _cdiv(N, pos_int(block_k, "block_k"))
    io = {
        ("Q", "read"): Tc * N * d,
        ("K", "read"): N * d,
        ("V", "read"): N * d,
        ("O", "read"): Tc * N * d,
        ("O", "write"): Tc * N * d,
        ("m", "read"): Tc * N,
        ("m", "write"): Tc * N,
        ("l", "read"): Tc * N,
        ("l", "write"): Tc * N,
    }
    return [KernelIO("flash forward (FA1)", 4.0 * N * N * d, SOFTMAX_FLOPS * N * N, io)]


def io_fa1_forward_breakdown(*, seq: int, head_dim: int, block_q: int, block_k: int) -> dict[Key, int]:
    """Elements per (array, "read"/"write") of the FA1-order forward; arrays Q, K, V, O, m, l."""
    return _merge(fa1_forward_kernels(seq=seq, head_dim=head_dim, block_q=block_q, block_k=block_k))


def io_fa1_forward(*, seq: int, head_dim: int, block_q: int, block_k: int) -> int:
    """HBM elements of the FA1-order forward: 2Nd + ceil(N/Bc)·(3Nd + 4N) (§6.3: ≈ 51.9 M at N=4096)."""
    return sum(io_fa1_forward_breakdown(seq=seq, head_dim=head_dim, block_q=block_q, block_k=block_k).values())


# ---------------------------------------------------------------- §7.5 backward


def standard_backward_kernels(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> list[KernelIO]:
    """The standard backward's 5 kernels (what autograd runs on matmul–softmax–matmul), per head.

    dV = Pᵀ·dO; dP = dO·Vᵀ; dS = P ∘ (dP − rowsum(P ∘ dP)); dQ = dS·K/√d; dK = dSᵀ·Q/√d.
    The N×N terms: P read twice, dP written and read, dS written and read twice — 7N².
    Ideal cache: Q, K, V, dO read once, dQ, dK, dV written once — 7Nd (dO, read by the first two
    kernels, comes from HBM once). ``ideal_cache=False``: T×T-tiled GEMM requests (``tile`` = T).
    """
    N, d = pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    flag(ideal_cache, "ideal_cache")
    t = None if ideal_cache else pos_int(tile, "tile")
    p1, do1 = _gemm_reads(N, N, d, t)  # dV (N×d) = Pᵀ (N×N) · dO (N×d)
    do2, v2 = _gemm_reads(N, d, N, t)  # dP (N×N) = dO (N×d) · Vᵀ (d×N)
    if ideal_cache:
        do2 = 0  # dO is still in cache from the dV kernel
    ds3, k3 = _gemm_reads(N, N, d, t)  # dQ (N×d) = dS (N×N) · K (N×d)
    ds4, q4 = _gemm_reads(N, N, d, t)  # dK (N×d) = dSᵀ (N×N) · Q (N×d)
    NN, Nd = N * N, N * d
    return [
        KernelIO("dV = Pᵀ·dO", 2.0 * NN * d, 0.0, {("P", "read"): p1, ("dO", "read"): do1, ("dV", "write"): Nd}),
        KernelIO("dP = dO·Vᵀ", 2.0 * NN * d, 0.0, {("dO", "read"): do2, ("V", "read"): v2, ("dP", "write"): NN}),
        KernelIO("dS = P∘(dP − D)", 0.0, 4.0 * NN,
                 {("P", "read"): NN, ("dP", "read"): NN, ("dS", "write"): NN}),
        KernelIO("dQ = dS·K/√d", 2.0 * NN * d, 0.0, {("dS", "read"): ds3, ("K", "read"): k3, ("dQ", "write"): Nd}),
        KernelIO("dK = dSᵀ·Q/√d", 2.0 * NN * d, 0.0, {("dS", "read"): ds4, ("Q", "read"): q4, ("dK", "write"): Nd}),
    ]


def io_standard_backward_breakdown(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> dict[Key, int]:
    """Elements per (array, "read"/"write") of the standard backward."""
    return _merge(standard_backward_kernels(seq=seq, head_dim=head_dim, ideal_cache=ideal_cache, tile=tile))


def io_standard_backward(*, seq: int, head_dim: int, ideal_cache: bool = True, tile: int = 16) -> int:
    """HBM elements of the standard backward: 7N² + 7Nd with an ideal cache (§7.5)."""
    return sum(io_standard_backward_breakdown(seq=seq, head_dim=head_dim, ideal_cache=ideal_cache, tile=tile).values())


def flash_backward_kernels(*, seq: int, head_dim: int, block_q: int, block_k: int, ideal_cache: bool = False,
                           causal: bool = False) -> list[KernelIO]:
    """FlashAttention backward, K/V blocks outer (§7.4), one kernel, per head.

    Each K/V block reads K_j, V_j once and writes dK_j, dV_j once; for every Q block it visits it
    reads Q_i, O_i, dO_i and L_i, computes D_i = rowsum(dO_i ∘ O_i) on chip (as FlashAttention's
    Algorithm 4 does; FA2 moves D into a small pre-pass, which adds 2N elements and a launch),
    recomputes P from L, and adds its share into dQ_i with atomics — a read and a write per element.
    ``ideal_cache``: every N×d array once — 8Nd + N (the lecture's lower bound, §7.5).
    FLOPs: recompute S, then dV, dP, dQ, dK — 5 GEMMs of 2·d per computed score (2.5× forward).
    """
    N, d = pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    flag(ideal_cache, "ideal_cache")
    bp = block_pairs(seq=N, block_q=block_q, block_k=block_k, causal=causal)
    Nd = N * d
    if ideal_cache:
        q_like, l_rows, dq_read = Nd, N, 0
    else:
        q_like, l_rows, dq_read = bp.q_rows_read * d, bp.q_rows_read, bp.q_rows_read * d
    io = {
        ("Q", "read"): q_like,
        ("K", "read"): Nd,
        ("V", "read"): Nd,
        ("O", "read"): q_like,
        ("dO", "read"): q_like,
        ("L", "read"): l_rows,
        ("dQ", "read"): dq_read,  # atomic add: read-modify-write in HBM without a cache
        ("dQ", "write"): q_like,
        ("dK", "write"): Nd,
        ("dV", "write"): Nd,
    }
    return [KernelIO("flash backward", 10.0 * bp.scores * d, 4.0 * bp.scores, io)]


def io_flash_backward_breakdown(*, seq: int, head_dim: int, block_q: int, block_k: int, ideal_cache: bool = False,
                                causal: bool = False) -> dict[Key, int]:
    """Elements per (array, "read"/"write") of the FlashAttention backward."""
    return _merge(flash_backward_kernels(seq=seq, head_dim=head_dim, block_q=block_q, block_k=block_k,
                                         ideal_cache=ideal_cache, causal=causal))


def io_flash_backward(*, seq: int, head_dim: int, block_q: int, block_k: int, ideal_cache: bool = False,
                      causal: bool = False) -> int:
    """HBM elements of the FlashAttention backward: 4Nd + Tc·(5Nd + N) without a cache (dQ's atomic
    adds read and write), 8Nd + N with an ideal cache (§7.5: 1/29 of the standard's 7N² + 7Nd)."""
    return sum(io_flash_backward_breakdown(seq=seq, head_dim=head_dim, block_q=block_q, block_k=block_k,
                                           ideal_cache=ideal_cache, causal=causal).values())


def dq_atomic_elements(*, seq: int, head_dim: int, block_k: int, block_q: int | None = None,
                       causal: bool = False) -> int:
    """Elements the FlashAttention backward atomically adds into dQ: ceil(N/Bc)·N·d (§7.4: 7 × 300 × 32)."""
    bp = block_pairs(seq=seq, block_q=block_k if block_q is None else block_q, block_k=block_k, causal=causal)
    return bp.q_rows_read * pos_int(head_dim, "head_dim")


# ---------------------------------------------------------------- §6.1 shared memory of a block pair


def sram_bytes(*, block_q: int, block_k: int, head_dim: int, dtype_bytes: int = 2, double_buffer: bool = True) -> int:
    """Shared memory a FlashAttention block needs: Q_i (Br×d) plus K_j, V_j (Bc×d each), the K/V
    tiles doubled when double-buffered (one being computed on, one being loaded) (§6.1).

    S_ij, P̃ and the accumulator live in registers and are not counted.
    """
    Br, Bc, d = pos_int(block_q, "block_q"), pos_int(block_k, "block_k"), pos_int(head_dim, "head_dim")
    flag(double_buffer, "double_buffer")
    kv_copies = 2 if double_buffer else 1
    return (Br * d + kv_copies * 2 * Bc * d) * pos_int(dtype_bytes, "dtype_bytes")
