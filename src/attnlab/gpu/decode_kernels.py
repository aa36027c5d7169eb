"""Flash-Decoding kernels in Triton (lecture §8.4): one split of a KV cache per program, and the ⊕ merge.

    _decode_split_kernel   grid (S, Hkv, B): one program reads one split of one K/V head of one
                           sequence once, for all the G = H/Hkv query heads of its GQA group and
                           all Nq queries together — the G·Nq query rows (padded to 16) are the M
                           dimension of ``tl.dot``. A split is whole tiles of keys: every S-th tile
                           (STRIDED: contiguous caches) or one run of them (paged caches). It writes
                           the split's normalised partial output and its lse (float32); with S = 1 it
                           writes the final output directly;
                           with MERGE = 2 the group's last program to finish merges all splits,
                           MERGE_ROWS query rows per round trip. With WAIT (``decode_plan.SPLIT_PDL``: eager
                           calls launched as programmatic dependent launches) it first waits for the kernels
                           queued before it (``griddepcontrol.wait``).
    _decode_merge_kernel   grid (⌈B·H·Nq / ROWS⌉,): out = Σ_s e^(lse_s − lse)·o_s with lse = log Σ_s e^lse_s,
                           ROWS query rows per program, every split of each loaded at once (``_merge_rows``,
                           the in-kernel merge's arithmetic: the same bits).
                           With ``PDL`` (``decode_plan.MERGE_PDL``: eager calls that launch it, on Hopper,
                           faster there on an H200, slower under graphs) it is a programmatic dependent launch: its programs may
                           start as the split kernel ends and wait (``griddepcontrol.wait``) for its writes;
                           with the split kernel's TRIGGER (``decode_plan.MERGE_TRIGGER``) as soon as every
                           split program has started.

Query i of sequence b sits at position pos = cache_seqlens[b] − Nq + i (bottom-right). The variants
are flash-attn's (``attnlab.variants``): key j is visible iff pos − left <= j <= pos + right (−1: that
side unbounded; causal is right = 0); softcap turns a score s into softcap·tanh(s/softcap), then ALiBi
subtracts slope[b, h]·|pos − j|. With a left edge the splits cover only the keys
[cache_seqlens[b] − Nq − left, cache_seqlens[b]) — the tile holding the first of them onwards — and
keys before the window are never loaded: a 4K window over a 128K cache streams about 4K keys.

The cache is either contiguous, ``(B, Hkv, Lmax, D)``, or paged, ``(num_pages, page_size, Hkv, D)`` pages with a ``block_table (B, max_pages)``; one kernel serves
both (a constexpr chooses how a key's row address is found). Paged caches load each tile's page ids
one tile ahead (a loop-carried value): Triton's pipeliner otherwise stages the page-id load itself and
keeps one K/V buffer fewer in flight. The launcher is ``attnlab.gpu.decode``.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .._runtime import LN2, LOG2E

_LN2 = tl.constexpr(LN2)  # a jit function reads module globals only as constexprs
_LOG2E = tl.constexpr(LOG2E)
_TWO_LOG2E = tl.constexpr(2 * LOG2E)


# -- kernels ---------------------------------------------------------------------------------------------


@triton.jit
def _prefetch_l2(ptrs):
    """An L2 prefetch of each address in ``ptrs`` (``prefetch.global.L2``: a hint, no value, no fault)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _decode_split_kernel(
    Q, K, V, SEQLENS, BLOCK_TABLE, O_PART, LSE_PART, OUT, LSE, COUNTERS, SLOPES,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_k0, stride_k1, stride_k2, stride_kd,  # contiguous: (b, hkv, n, d); paged: (page, slot, hkv, d)
    stride_v0, stride_v1, stride_v2, stride_vd,
    stride_tb,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_sb, stride_sh,  # ALiBi slopes (B, H)
    qk_scale,  # softmax scale · log2(e) (the scores live in base 2); with softcap: scale / softcap
    cap_scale,  # softcap · log2(e) (read only with HAS_SOFTCAP)
    window_left, window_right,  # the window's sides (read only with HAS_LEFT / HAS_RIGHT)
    H, CAPACITY, NUM_PAGES, NUM_SPLITS,
    D: tl.constexpr, NQ: tl.constexpr, G: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PAGED: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr, MERGE: tl.constexpr, DOT_F32: tl.constexpr,
    EVICT: tl.constexpr,  # cache policy of the K/V loads ("" or "evict_first": each byte is read once)
    HAS_SEQLENS: tl.constexpr,  # False: every sequence holds CAPACITY keys (SEQLENS is not read)
    BLOCK_S: tl.constexpr = 1,  # NUM_SPLITS padded to a power of two (read only with MERGE = 2)
    STRIDED: tl.constexpr = False,  # split s takes tiles s, s + S, s + 2S, ... (else one run of whole tiles)
    PREFETCH: tl.constexpr = 0,  # STRIDED, no window, contiguous cache: the first tiles' L2 prefetches
    PF_LINES: tl.constexpr = 1,  # 128-byte lines per key row to prefetch (a power of two)
    TRIGGER: tl.constexpr = False,  # let a merge kernel launched as a PDL start now (it still waits for our writes)
    MERGE_ROWS: tl.constexpr = 1,  # MERGE = 2: the group's rows merged per round trip (the merge kernel's ROWS)
    WAIT: tl.constexpr = False,  # launched as a programmatic dependent launch: wait for the kernels before it first
):
    if WAIT:  # before any read or write: the query, the cache and the lengths may be the kernels before it's outputs
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    split = tl.program_id(0)
    hkv = tl.program_id(1)
    b = tl.program_id(2)
    # -- this split's keys: the keys some query may see, [first, seqlen), from the tile holding the
    # first of them, in whole BLOCK_N tiles (tiles start at multiples of BLOCK_N, so a paged tile lies in
    # one page whenever PAGE_SIZE is a multiple of BLOCK_N): one run of NUM_SPLITS-th of the tiles, or
    # with STRIDED every NUM_SPLITS-th tile
    if HAS_SEQLENS:
        seqlen = tl.load(SEQLENS + b)
    else:
        seqlen = CAPACITY
    if PREFETCH > 0:
        # -- before the length arrives: ask L2 for this split's first PREFETCH tiles, which a strided split
        # without a window finds at keys independent of the length ((split + t·S)·BLOCK_N). The loop's own
        # loads wait for the length (their bounds); they then find these tiles in L2, not in DRAM. A tile past
        # the length is a wasted read of at most PREFETCH tiles per program; the addresses stay in the cache.
        offs_p = tl.arange(0, PREFETCH * BLOCK_N)
        key = tl.minimum((split + (offs_p // BLOCK_N) * NUM_SPLITS) * BLOCK_N + offs_p % BLOCK_N, CAPACITY - 1)
        col = tl.minimum(tl.arange(0, PF_LINES) * (1024 // K.dtype.element_ty.primitive_bitwidth), D - 1)
        base = b.to(tl.int64) * stride_k0 + hkv * stride_k1 + key.to(tl.int64)[:, None] * stride_k2 + col[None, :]
        _prefetch_l2(K + base)
        _prefetch_l2(V + (b.to(tl.int64) * stride_v0 + hkv * stride_v1 + key.to(tl.int64)[:, None] * stride_v2
                          + col[None, :]))

    # -- the group's query rows: row r is query head hkv·G + r // NQ, query token r % NQ
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    head = hkv * G + offs_m // NQ
    qi = offs_m % NQ
    row_ok = offs_m < G * NQ
    d_ok = offs_d < D
    q_ptrs = Q + b.to(tl.int64) * stride_qb + head[:, None] * stride_qh + qi[:, None] * stride_qm \
        + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    if DOT_F32:
        q = q.to(tl.float32)
    if HAS_SEQLENS:
        seqlen = tl.minimum(tl.maximum(seqlen, 0), CAPACITY)  # never read outside the cache (the first use)
    if HAS_LEFT:
        first = tl.maximum(seqlen - NQ - window_left, 0)  # the first query's first key
    else:
        first = seqlen * 0
    tile0 = (first // BLOCK_N) * BLOCK_N  # the start of the tile holding the first key
    if STRIDED:  # tiles dealt out in turn: split s starts at tile s whatever the length
        lo = tile0 + split * BLOCK_N
        hi = seqlen
        step = NUM_SPLITS * BLOCK_N
    else:
        chunk = tl.cdiv(tl.cdiv(seqlen - tile0, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = tile0 + split * chunk
        hi = tl.minimum(lo + chunk, seqlen)
        step = BLOCK_N

    pos = seqlen - NQ + qi  # query row r's position: it sees keys pos[r] - left <= j <= pos[r] + right
    if HAS_ALIBI:
        slope = tl.load(SLOPES + b * stride_sb + head * stride_sh, mask=row_ok, other=0.0).to(tl.float32)
        slope = slope * _LOG2E  # -slope·|pos - j| in base 2

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n0 = tl.arange(0, BLOCK_N)
    if PAGED:
        # Page ids are loaded one tile ahead (software prefetch): the K/V addresses of a tile never
        # wait for a page-table load. A tile lies inside one page when PAGE_SIZE is a multiple of
        # BLOCK_N (tiles start at multiples of BLOCK_N): then one id per tile, else one per key.
        tb_row = BLOCK_TABLE + b.to(tl.int64) * stride_tb
        if PAGE_SIZE % BLOCK_N == 0:
            page_next = tl.load(tb_row + lo // PAGE_SIZE, mask=lo < hi, other=0)
        else:
            page_next = tl.load(tb_row + (lo + offs_n0) // PAGE_SIZE, mask=lo + offs_n0 < hi, other=0)
    for start_n in range(lo, hi, step):
        offs_n = start_n + offs_n0
        n_ok = (offs_n < hi) & (offs_n >= first)  # keys before the window are not loaded
        # -- where each key's row lives
        if PAGED:
            page = tl.minimum(tl.maximum(page_next, 0), NUM_PAGES - 1).to(tl.int64)  # never outside the pool
            nxt = start_n + step
            if PAGE_SIZE % BLOCK_N == 0:
                page_next = tl.load(tb_row + nxt // PAGE_SIZE, mask=nxt < hi, other=0)
            else:
                page_next = tl.load(tb_row + (nxt + offs_n0) // PAGE_SIZE, mask=nxt + offs_n0 < hi, other=0)
            slot = offs_n % PAGE_SIZE
            k_row = page * stride_k0 + slot * stride_k1 + hkv * stride_k2
            v_row = page * stride_v0 + slot * stride_v1 + hkv * stride_v2
        else:
            k_row = b.to(tl.int64) * stride_k0 + hkv * stride_k1 + offs_n.to(tl.int64) * stride_k2
            v_row = b.to(tl.int64) * stride_v0 + hkv * stride_v1 + offs_n.to(tl.int64) * stride_v2
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(K + k_row[:, None] + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0,
                    eviction_policy=EVICT)  # (BLOCK_N, BLOCK_D)
        v = tl.load(V + v_row[:, None] + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0,
                    eviction_policy=EVICT)
        # -- scores of the group's rows against this tile, base 2
        if DOT_F32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N) float32
        if HAS_SOFTCAP:  # softcap·tanh(s/softcap), tanh(x) = 1 − 2/(e^(2x) + 1): ±1 at ±inf, never NaN
            s = cap_scale * (1.0 - 2.0 / (tl.math.exp2(s * _TWO_LOG2E) + 1.0))
        if HAS_ALIBI:
            s = s - slope[:, None] * tl.abs(pos[:, None] - offs_n[None, :]).to(tl.float32)
        visible = n_ok[None, :]
        if HAS_RIGHT:
            visible = visible & (offs_n[None, :] <= pos[:, None] + window_right)
        if HAS_LEFT:
            visible = visible & (offs_n[None, :] >= pos[:, None] - window_left)
        s = tl.where(visible, s, float("-inf"))
        # -- update m_i and l_i (rows with no visible key yet keep m = -inf; exp2 base 0 for them)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_base[:, None])
        alpha = tl.math.exp2(m_i - m_base)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- update the output accumulator
        if DOT_F32:
            pv = tl.dot(p.to(V.dtype.element_ty).to(tl.float32), v.to(tl.float32))
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    # -- normalise; rows that saw no key get out = 0, lse = -inf
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * _LN2)
    out_mask = row_ok[:, None] & d_ok[None, :]
    o_ptrs = OUT + b.to(tl.int64) * stride_ob + head[:, None] * stride_oh + qi[:, None] * stride_om \
        + offs_d[None, :] * stride_od
    lse_ptrs = LSE + (b * H + head) * NQ + qi
    if MERGE == 0:  # one split: this is the answer
        tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=out_mask)
        tl.store(lse_ptrs, lse, mask=row_ok)
    else:  # partials: O_PART (B, H, NQ, NUM_SPLITS, D), LSE_PART (B, H, NQ, NUM_SPLITS), float32
        row = ((b * H + head) * NQ + qi).to(tl.int64) * NUM_SPLITS
        tl.store(O_PART + (row + split)[:, None] * D + offs_d[None, :], o, mask=out_mask)
        tl.store(LSE_PART + row + split, lse, mask=row_ok)
        if MERGE == 2:  # the group's last program to finish merges all its splits (no second launch)
            tl.debug_barrier()  # every thread's partial stores come before the release below
            cnt = COUNTERS + b * tl.num_programs(1) + hkv
            done = tl.atomic_add(cnt, 1, sem="acq_rel")
            if done == NUM_SPLITS - 1:
                # -- ⊕ over the splits, MERGE_ROWS of the group's rows at a time with all their splits loaded at
                # once (one round trip per MERGE_ROWS rows): the merge kernel's arithmetic, row for row
                row0 = ((b * H + hkv * G) * NQ).to(tl.int64)  # the group's rows are consecutive
                if (G * NQ + MERGE_ROWS - 1) // MERGE_ROWS <= 8:  # unrolled
                    for c in tl.static_range((G * NQ + MERGE_ROWS - 1) // MERGE_ROWS):
                        _merge_rows(O_PART, LSE_PART, OUT, LSE, row0 + c * MERGE_ROWS, G * NQ - c * MERGE_ROWS, H,
                                    stride_ob, stride_oh, stride_om, stride_od, D, NUM_SPLITS, NQ, MERGE_ROWS,
                                    BLOCK_S, BLOCK_D)
                else:
                    for c in range(0, (G * NQ + MERGE_ROWS - 1) // MERGE_ROWS):
                        _merge_rows(O_PART, LSE_PART, OUT, LSE, row0 + c * MERGE_ROWS, G * NQ - c * MERGE_ROWS, H,
                                    stride_ob, stride_oh, stride_om, stride_od, D, NUM_SPLITS, NQ, MERGE_ROWS,
                                    BLOCK_S, BLOCK_D)
                # ready for the next call on this stream (relaxed: the kernel's end orders it before the next launch)
                tl.atomic_xchg(cnt, 0, sem="relaxed")


@triton.jit
def _merge_rows(O_PART, LSE_PART, OUT, LSE, row0, nrows, H, stride_ob, stride_oh, stride_om, stride_od, D, NUM_SPLITS,
                NQ: tl.constexpr, ROWS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """⊕ of the splits of query rows row0, ..., row0 + min(ROWS, nrows) − 1 (row (b·H + head)·NQ + qi), every
    row's splits loaded at once — one round trip for all ROWS rows — stored to out[b, head, qi] and lse[row].
    Each row's numbers depend only on its own splits and on ROWS, BLOCK_S, BLOCK_D and the warps (the layout),
    not on which rows share the call: the merge kernel and the in-kernel merge give the same bits."""
    offs_r = tl.arange(0, ROWS)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    r_ok = offs_r < nrows
    s_ok = offs_s < NUM_SPLITS
    d_ok = offs_d < D
    rows = row0 + offs_r  # int64
    at = rows[:, None] * NUM_SPLITS + offs_s[None, :]  # (ROWS, BLOCK_S): the splits' partials of each row
    rs_ok = r_ok[:, None] & s_ok[None, :]
    lse_s = tl.load(LSE_PART + at, mask=rs_ok, other=float("-inf"), cache_modifier=".cg")
    o_s = tl.load(O_PART + at[:, :, None] * D + offs_d[None, None, :], mask=rs_ok[:, :, None] & d_ok[None, None, :],
                  other=0.0, cache_modifier=".cg")  # (ROWS, BLOCK_S, BLOCK_D)
    m = tl.max(lse_s, 1)
    m_base = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse_s - m_base[:, None])
    denom = tl.sum(w, 1)
    empty = denom == 0.0
    o = tl.sum(w[:, :, None] * o_s, 1) / tl.where(empty, 1.0, denom)[:, None]
    lse = tl.where(empty, float("-inf"), m_base + tl.log(tl.where(empty, 1.0, denom)))
    b = rows // (H * NQ)
    head = (rows // NQ) % H
    qi = rows % NQ
    o_ptrs = OUT + b[:, None] * stride_ob + head[:, None] * stride_oh + qi[:, None] * stride_om \
        + offs_d[None, :] * stride_od
    tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=r_ok[:, None] & d_ok[None, :])
    tl.store(LSE + rows, lse, mask=r_ok)


@triton.jit
def _decode_merge_kernel(
    O_PART, LSE_PART, OUT, LSE,
    stride_ob, stride_oh, stride_om, stride_od,
    H, D, NUM_SPLITS, NUM_ROWS,
    NQ: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
    PDL: tl.constexpr = False,  # launched as a programmatic dependent launch: wait for the split kernel's writes
    ROWS: tl.constexpr = 1,  # query rows per program (NUM_ROWS = B·H·NQ in all)
):
    row0 = tl.program_id(0).to(tl.int64) * ROWS  # rows (b·H + head)·NQ + qi, ROWS of them
    if PDL:  # this program may start while the split kernel's last programs run: its partials come after
        gdc_wait()
    _merge_rows(O_PART, LSE_PART, OUT, LSE, row0, NUM_ROWS - row0, H, stride_ob, stride_oh, stride_om, stride_od, D,
                NUM_SPLITS, NQ, ROWS, BLOCK_S, BLOCK_D)


def compile_sm90(head_dim: int, *, dtype=None, block_n: int = 128, num_warps: int = 4, num_stages: int = 3,
                 group_rows: int = 4, merge: int = 2, splits: int = 16, wait: bool = False, trigger: bool = False):
    """Build the split kernel for Hopper (sm_90) on any machine, GPU or not (Triton's own ptxas), as a decode plan
    launches it on a contiguous cache of ``dtype`` (torch.float16 or, the default, bfloat16) with lengths, causal, one query per sequence, ``group_rows`` query
    heads per K/V head: the compiled kernel, whose ``asm`` holds the PTX and ``metadata.shared`` the shared memory
    (what the CPU tests read). Needs a process without TRITON_INTERPRET."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _decode_split_kernel
    el = "fp16" if dtype == torch.float16 else "bf16"
    block_d = triton.next_power_of_2(head_dim)
    const = dict(D=head_dim, NQ=1, G=group_rows, PAGE_SIZE=1, BLOCK_M=max(16, triton.next_power_of_2(group_rows)),
                 BLOCK_N=block_n, BLOCK_D=block_d, PAGED=False, HAS_LEFT=False, HAS_RIGHT=True, HAS_SOFTCAP=False,
                 HAS_ALIBI=False, MERGE=merge, DOT_F32=False, EVICT="", HAS_SEQLENS=True,
                 BLOCK_S=triton.next_power_of_2(splits), STRIDED=True, PREFETCH=0, PF_LINES=1, TRIGGER=trigger,
                 MERGE_ROWS=4, WAIT=wait, stride_qd=1, stride_kd=1, stride_vd=1, stride_od=1)
    ptrs = dict(Q=f"*{el}", K=f"*{el}", V=f"*{el}", SEQLENS="*i32", BLOCK_TABLE="*i32", O_PART="*fp32",
                LSE_PART="*fp32", OUT=f"*{el}", LSE="*fp32", COUNTERS="*i32", SLOPES="*fp32")
    return triton.compile(ASTSource(fn, *sm90_signature(fn, const, ptrs)), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


def sm90_signature(fn, const: dict, ptrs: dict) -> tuple[dict, dict, dict]:
    """(signature, constants, attributes) of a decode kernel ``fn`` (Triton's or Gluon's) as a plan launches it, for
    an ahead-of-time build: the ``const`` arguments as constexprs, the ``ptrs`` pointers with their types, the scales
    float32 and every other argument int32; the pointers 16-byte aligned and the strides divisible by 16, as Triton's
    specialisation finds them for a contiguous cache."""
    sig = {n: "constexpr" if n in const else ptrs.get(n) or ("fp32" if n in ("qk_scale", "cap_scale") else "i32")
           for n in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if n in ptrs or n.startswith("stride_") and n not in const}
    return sig, const, attrs


def sass_kv_loop(sass: str | None) -> dict | None:
    """The static make-up of a decode split kernel's K/V loop (the first SASS loop holding ``mma.sync`` products,
    ``prefill_gluon.sass_loop_ops``): its ``instructions``, products (``hmma``), asynchronous global-to-shared copies
    (``ldgsts``), shared-memory matrix loads and stores (``ldsm``, ``stsm``), other shared loads and stores (``lds``, ``sts``),
    barriers (``bar``) and spill reloads (``ldl``), a conditional path inside it counted whole; None without a listing
    or such a loop."""
    from .prefill_gluon import sass_loop_ops

    loops = sass_loop_ops(sass, "HMMA") if sass else []
    if not loops:
        return None
    ops = loops[0][2]
    return dict(instructions=sum(ops.values()), hmma=ops["HMMA"], ldgsts=ops["LDGSTS"], ldsm=ops["LDSM"],
                stsm=ops["STSM"], lds=ops["LDS"], sts=ops["STS"], bar=ops["BAR"], ldl=ops["LDL"])


def sm90_report(head_dim: int, dtype=None, **kw) -> dict:
    """Shared memory (KB), the dependent-launch waits and triggers (``griddepcontrol``) and, where Triton ships
    cuobjdump, the K/V loop's make-up (``sass_kv_loop``: ``loop``) of ``compile_sm90``'s build."""
    import re

    from .prefill_gluon import cuobjdump

    kernel = compile_sm90(head_dim, dtype=dtype, **kw)
    ptx = kernel.asm["ptx"]
    return dict(smem_kb=round(kernel.metadata.shared / 1024, 1),
                gdc_waits=len(re.findall(r"griddepcontrol\.wait", ptx)),
                gdc_triggers=len(re.findall(r"griddepcontrol\.launch_dependents", ptx)),
                loop=sass_kv_loop(cuobjdump(kernel, "-sass")))
