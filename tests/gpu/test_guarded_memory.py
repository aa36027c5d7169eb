"""The Triton kernels read and write only inside the tensors they are given, checked on the CPU.

Under Triton's interpreter (CI has no GPU) a kernel's loads and stores go straight to the tensors' memory. Here every
tensor a kernel touches — inputs, outputs, cumulative lengths, slopes, caches, block tables — is copied into memory
that ends where an unreadable page begins (``end``), or begins where one ends (``start``), so an access a row or a
block past either edge stops the process (SIGSEGV) instead of reading a neighbour's bytes, as it might on a GPU
(where it is an illegal memory access only when the neighbour happens to be unmapped: an H200 met one so, in the
packed dQ store: the ``layout`` case below). Both placements run in a process of their own, one after the other,
and what the tensors hold after the two runs must be the same bits. On a GPU compute-sanitizer's memcheck does this
job (``test_prefill.py::test_gpu_packed_store_reads_no_tile_past_a_sequence``, ``benchmarks/device_packed_fault.sh``);
these tests run on the CPU only (Linux: ``mprotect``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

pytestmark = pytest.mark.skipif(torch.cuda.is_available() or not sys.platform.startswith("linux"),
                                reason="the interpreter's guard pages: CPU and Linux only")

_HARNESS = r'''
import ctypes, mmap, sys
import torch
from attnlab.gpu import BwdConfig, FwdConfig, prefill_backward, prefill_forward
from attnlab.gpu.decode import flash_decode_triton
from attnlab.variants import Mask

torch.set_num_threads(1)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_KEEP = []
PLACEMENTS = sys.argv[1].split(",")  # of "none" (plain tensors), "end", "start"
CASE = sys.argv[2]
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 7
AT = "none"


def guarded(t):
    """A copy of t (contiguous) whose bytes end at an unreadable page (AT, the placement being run: "end") or start
    right after one ("start"); "none": a plain copy."""
    t = t.contiguous()
    if AT == "none":
        return t.clone()
    page, nbytes = mmap.PAGESIZE, t.numel() * t.element_size()
    pages = max(1, -(-nbytes // page))
    buf = mmap.mmap(-1, (pages + 2) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    for p in (0, pages + 1):
        assert _libc.mprotect(base + p * page, page, 0) == 0, ctypes.get_errno()
    off = page if AT == "start" else (pages + 1) * page - nbytes
    x = torch.frombuffer(buf, dtype=t.dtype, count=t.numel(), offset=off).view(t.shape)
    x.copy_(t)
    _KEEP.append(buf)
    return x


def cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


def run_case():
    gen = torch.Generator().manual_seed(SEED)
    results = []
    F16 = torch.float16
    BLOCKS16 = (FwdConfig(16, 16, 1, 1), BwdConfig(16, 16, 1, 1, 16, 16, 1, 1))
    if CASE in ("varlen-causal", "varlen-full"):
        # empty sequences both ways, one-row ones, the last sequence shorter than the longest
        if CASE == "varlen-causal":
            lens_q, lens_k, H, Hkv, D, mask, softcap, alibi = [0, 17, 33, 1, 20], [5, 17, 20, 0, 40], 4, 2, 32, \
                Mask(6, 0), 2.5, True
        else:
            lens_q, lens_k, H, Hkv, D, mask, softcap, alibi = [40, 3, 0, 9], [12, 40, 9, 5], 2, 1, 48, Mask(-1, -1), \
                None, False
        q = guarded(torch.randn(sum(lens_q), H, D, dtype=F16, generator=gen))
        k, v = (guarded(torch.randn(sum(lens_k), Hkv, D, dtype=F16, generator=gen)) for _ in range(2))
        do = guarded(torch.randn(sum(lens_q), H, D, dtype=F16, generator=gen))
        cus = (guarded(cu(lens_q)), guarded(cu(lens_k)))
        slopes = guarded(torch.rand(H, generator=gen).expand(len(lens_q), H)) if alibi else None  # (B, H)
        mx = (max(lens_q), max(lens_k))
        out, dq = guarded(torch.zeros_like(q)), guarded(torch.zeros_like(q))
        lse = guarded(torch.zeros(H, q.shape[0]))
        dk, dv = guarded(torch.zeros_like(k)), guarded(torch.zeros_like(v))
        prefill_forward(q, k, v, mask=mask, scale=0.3, softcap=softcap, slopes=slopes, cu_seqlens=cus, max_seqlen=mx,
                        config=BLOCKS16[0], out=out, lse=lse)
        for det in (False, True):
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.3, softcap=softcap, slopes=slopes,
                             cu_seqlens=cus, max_seqlen=mx, deterministic=det, config=BLOCKS16[1], dq=dq, dk=dk,
                             dv=dv)
            results += [dq.clone(), dk.clone(), dv.clone()]
        results += [out, lse]
    elif CASE == "varlen-random":  # three packed batches of random lengths (0 to 70 rows and keys), heads, masks
        for _ in range(3):
            n = int(torch.randint(1, 6, (1,), generator=gen))
            lens_q, lens_k = (torch.randint(0, 71, (n,), generator=gen).tolist() for _ in range(2))
            Hkv = int(torch.randint(1, 3, (1,), generator=gen))
            H, D = Hkv * int(torch.randint(1, 3, (1,), generator=gen)), (16, 32, 64)[int(torch.randint(0, 3, (1,),
                                                                                                   generator=gen))]
            left, right = (int(x) for x in torch.randint(-1, 20, (2,), generator=gen))
            mask = Mask(left, 0) if right % 2 else Mask(left, right)
            q, do = (guarded(torch.randn(sum(lens_q), H, D, dtype=F16, generator=gen)) for _ in range(2))
            k, v = (guarded(torch.randn(sum(lens_k), Hkv, D, dtype=F16, generator=gen)) for _ in range(2))
            cus, mx = (guarded(cu(lens_q)), guarded(cu(lens_k))), (max(lens_q), max(lens_k))
            out, lse = guarded(torch.zeros_like(q)), guarded(torch.zeros(H, q.shape[0]))
            dq, dk, dv = (guarded(torch.zeros_like(t)) for t in (q, k, v))
            prefill_forward(q, k, v, mask=mask, scale=0.3, cu_seqlens=cus, max_seqlen=mx, config=BLOCKS16[0], out=out,
                            lse=lse)
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.3, cu_seqlens=cus, max_seqlen=mx,
                             config=BLOCKS16[1], dq=dq, dk=dk, dv=dv)
            results += [out, lse, dq, dk, dv, torch.tensor(lens_q + lens_k + [H, Hkv, D, left, right])]
    elif CASE == "dense":  # GQA, Nq != Nk, a head dim below its block, causal, a window
        B, H, Hkv, Nq, Nk, D = 2, 3, 1, 37, 45, 48
        q, do = (guarded(torch.randn(B, H, Nq, D, dtype=F16, generator=gen)) for _ in range(2))
        k, v = (guarded(torch.randn(B, Hkv, Nk, D, dtype=F16, generator=gen)) for _ in range(2))
        for mask in (Mask(-1, 0), Mask(9, 4)):
            out, lse = guarded(torch.zeros_like(q)), guarded(torch.zeros(B, H, Nq))
            dq, dk, dv = (guarded(torch.zeros_like(t)) for t in (q, k, v))
            prefill_forward(q, k, v, mask=mask, scale=0.25, config=BLOCKS16[0], out=out, lse=lse)
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.25, config=BLOCKS16[1], dq=dq, dk=dk, dv=dv)
            results += [out, lse, dq, dk, dv]
    elif CASE == "decode":  # a contiguous cache and a paged one; lengths of just the new tokens, some, a full cache
        B, H, Hkv, Nq, D, L, page = 3, 4, 2, 2, 32, 40, 8
        q = guarded(torch.randn(B, H, Nq, D, dtype=F16, generator=gen))
        kc, vc = (guarded(torch.randn(B, Hkv, L, D, dtype=F16, generator=gen)) for _ in range(2))
        seqlens = guarded(torch.tensor([Nq, 17, L], dtype=torch.int32))
        for splits in (1, 3):
            results += list(flash_decode_triton(q, kc, vc, cache_seqlens=seqlens, num_splits=splits))
        n_pages = B * (L // page)
        kp, vp = (guarded(torch.randn(n_pages, page, Hkv, D, dtype=F16, generator=gen)) for _ in range(2))
        table = guarded(torch.randperm(n_pages, generator=gen).to(torch.int32).view(B, L // page))
        results += list(flash_decode_triton(q, kp, vp, cache_seqlens=seqlens, block_table=table, num_splits=2,
                                            window=(5, 0), softcap=3.0))
    elif CASE == "layout":  # the Gluon backward's Triton helpers: dQ's stores, dK/dV's head sums, the packed prep
        from attnlab.gpu.layout import dq_to_tiles, packed_rows, store_dq, store_dq_tiles, sum_head_copies
        from attnlab.gpu.prefill_bwd import _attn_bwd_prep
        B, H, N, D = 2, 3, 37, 64
        acc = guarded(torch.randn(B, H, N, D, generator=gen))
        dq = guarded(torch.zeros(B, N, H, D, dtype=F16)).transpose(1, 2)  # a model's layout
        store_dq(acc, dq, scale=0.5)
        tiles, dq2 = guarded(dq_to_tiles(acc, 32)), guarded(torch.zeros(B, H, N, D, dtype=F16))
        store_dq_tiles(tiles, dq2, 32, scale=0.25)
        copies, heads = guarded(torch.randn(B, 2 * H, N, D, dtype=F16, generator=gen)), guarded(
            torch.zeros(B, H, N, D, dtype=F16))
        sum_head_copies(copies, heads, 2)
        results += [dq, dq2, heads]
        # packed, in exactly their padded rows; the last sequence two query blocks shorter than the first
        lens = [130, 3, 0, 9]
        total, n = sum(lens), len(lens)
        cu_q, cu_p = guarded(cu(lens)), guarded(packed_rows(cu(lens)))
        rows = int(cu_p[-1])
        o, do = (guarded(torch.randn(total, H, D, dtype=F16, generator=gen)) for _ in range(2))
        lse = guarded(torch.randn(1, H, total, generator=gen))
        delta, lse2 = guarded(torch.zeros(1, H, rows)), guarded(torch.zeros(1, H, rows))
        o4, do4 = (t.transpose(0, 1).unsqueeze(0) for t in (o, do))
        _attn_bwd_prep[(-(-max(lens) // 16), n * H)](o4, do4, lse, lse, delta, lse2, *o4.stride()[:3],
                                                     *do4.stride()[:3], H, total, rows, HEAD_D=D, BLOCK_D=D,
                                                     BLOCK_M=16, HAS_DLSE=False, CU_Q=cu_q, CU_P=cu_p)
        packed_tiles = guarded(dq_to_tiles(torch.randn(1, H, rows, D, generator=gen), 64))
        dq3 = guarded(torch.zeros(total, H, D, dtype=F16))
        store_dq_tiles(packed_tiles, dq3.transpose(0, 1).unsqueeze(0), 64, scale=0.5,
                       packed=(cu_q, cu_p, rows, max(lens)))
        results += [delta, lse2, dq3]
    else:
        raise SystemExit(f"unknown case {CASE}")
    return [r.clone() for r in results]


saved = {}
for AT in PLACEMENTS:  # (a fault stops the process: the placement it happened in is the last one printed)
    print("placement", AT, flush=True)
    saved[AT] = run_case()
torch.save(saved, sys.argv[3])
print("ok")
'''


@pytest.mark.parametrize("case", ["varlen-causal", "varlen-full", "varlen-random", "dense", "decode", "layout"])
def test_kernels_touch_nothing_past_their_tensors(case, tmp_path, request):
    """Forward and backward (default and deterministic) of packed batches — causal with a window, softcap and ALiBi,
    and not, and random ones (lengths from 0 to 70, heads, head dims, windows) — of dense GQA calls, Flash-Decoding over contiguous and paged caches, and the Gluon backward's Triton
    helpers (dQ's stores, the head sums, the packed preprocessing): with every tensor against an unreadable page at
    its end, then at its start, the kernels finish, and with the same bits both times."""
    path = tmp_path / "results.pt"
    from tests.conftest import seed_for

    seed = seed_for(request.node.nodeid) % 2**31  # (the random case's lengths: other ones under another ATTNLAB_SEED)
    res = subprocess.run([sys.executable, "-c", _HARNESS, "end,start", case, str(path), str(seed)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and "ok" in res.stdout.splitlines(), (case, res.returncode, res.stdout[-500:],
                                                                      res.stderr[-3000:])
    saved = torch.load(path)
    end, start = saved["end"], saved["start"]
    assert end and all(t.numel() for t in end) and len(start) == len(end)
    for i, (a, b) in enumerate(zip(end, start)):
        assert torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan()), (case, i)
