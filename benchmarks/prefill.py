"""Prefill benchmark (lecture §5–§7 on real hardware): attnlab's Triton FlashAttention-2 forward and
forward+backward against PyTorch's own attention backends, measured in the same run.

Grid: bfloat16, B·N = 16K tokens, H·D = 2048, D ∈ {64, 128}, causal or not, N ∈ {1K, 4K, 16K},
pass ∈ {fwd, fwd_bwd}. Providers:

* ``attnlab``: ``attnlab.gpu.flash_attention_triton`` (its deterministic block-size table);
* ``sdpa-flash`` / ``sdpa-cudnn`` / ``sdpa-efficient``: ``scaled_dot_product_attention`` inside
  ``sdpa_kernel(SDPBackend.X)`` (one backend at a time); ``sdpa``: with no backend pinned, PyTorch's own choice;
* ``flex``: ``torch.compile(flex_attention)``, causal through a block mask made beforehand.

TFLOP/s use the standard count (``attnlab.cost.attention_flops``: 4·B·H·N²·D, halved for causal,
×3.5 for fwd+bwd); time is ``triton.testing.do_bench``'s median on random data. fwd+bwd times
``torch.autograd.grad(f(q, k, v), (q, k, v), dout)`` (no gradient accumulation in the timing).
Beside each time: ``roofline_ms``, ``attnlab.cost.roofline.attention_roofline`` of the shape and pass on
the GPU preset of the device (``--gpu`` to pick another), and ``of_roofline`` = roofline_ms / ms.

Sub-commands (one script for one GPU call, see ``device_prefill.sh``):

    python benchmarks/prefill.py check   # correctness of every benchmarked shape (heads vs float64)
    python benchmarks/prefill.py sweep   # candidate block sizes / load paths / dQ strategies
    python benchmarks/prefill.py bench --json prefill.json --md prefill.md
    python benchmarks/prefill.py report prefill.json   # the markdown table again
    python benchmarks/prefill.py compare run1.json run2.json   # attnlab ÷ cuDNN of each row, a column a run
    python benchmarks/prefill.py aot     # build every kernel for sm_90 (no GPU needed): registers, spills

``--gqa G`` gives every row H / G K/V heads (GQA: the SDPA providers and FlexAttention get ``enable_gqa``); several
values (``--gqa 1 4``) time the rows of each in one process, one table: the multi-head rows and the GQA ones in the
same run.
``--quick`` shrinks everything to tiny shapes (on the CPU through Triton's interpreter: a smoke
test of the script, no timing worth reading).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # roofline_columns, also when loaded as a module

from roofline_columns import add_fraction, percent, prefill_roofline_ms, preset_for, preset_text  # noqa: E402

from attnlab.bench import Benchmark, environment, run  # noqa: E402
from attnlab.cost import GPUS, attention_flops  # noqa: E402

PROVIDERS = ("attnlab", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex")
TOKENS, WIDTH = 16384, 2048  # B·N and H·D


def grid(quick: bool, Ds=(64, 128), Ns=(16384, 4096, 1024), causals=(False, True), passes=("fwd", "fwd_bwd"),
         group: int = 1):
    """Benchmark configurations as dicts: D, causal, N, pass, B, H, Hkv (``group`` query heads share each
    K/V head: GQA, H / Hkv = group; 1 is multi-head attention)."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be a positive int (query heads per K/V head), got {group!r}")
    if quick:
        Ds, Ns = (32,), (64,)
    for D in Ds:
        H = (128 if quick else WIDTH) // D
        if H % group:
            raise ValueError(f"group {group} does not divide the {H} query heads at D = {D} (H·D = "
                             f"{128 if quick else WIDTH})")
        for causal in causals:
            for N in Ns:
                for p in passes:
                    B = max(1, (64 if quick else TOKENS) // N)
                    yield dict(D=D, causal=causal, N=N, pass_=p, B=B, H=H, Hkv=H // group)


def flops(cfg) -> float:
    return attention_flops(batch=cfg["B"], heads=cfg["H"], seq_q=cfg["N"], head_dim=cfg["D"],
                           causal=cfg["causal"], pass_=cfg["pass_"])


DTYPE = torch.bfloat16  # float16 on the CPU: Triton's interpreter multiplies bfloat16 tiles wrongly


def make_inputs(cfg, device, dtype=None, seed=0):
    dtype = dtype or (DTYPE if device == "cuda" else torch.float16)
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (cfg["B"], cfg["H"], cfg["N"], cfg["D"])
    kv_shape = (cfg["B"], kv_heads(cfg), cfg["N"], cfg["D"])
    grad = cfg["pass_"] == "fwd_bwd"
    q, k, v = (torch.randn(s, generator=g, device=device, dtype=dtype).requires_grad_(grad)
               for s in (shape, kv_shape, kv_shape))
    do = torch.randn(shape, generator=g, device=device, dtype=dtype)
    return q, k, v, do


def kv_heads(cfg) -> int:
    """The row's K/V heads (rows written before GQA rows existed have no ``Hkv``: H)."""
    return cfg.get("Hkv") or cfg["H"]


def _timed(f, q, k, v, do, pass_):
    if pass_ == "fwd":
        return lambda: f(q, k, v)
    return lambda: torch.autograd.grad(f(q, k, v), (q, k, v), do)


# -- providers ----------------------------------------------------------------------------------


def provider_attnlab(device, fwd_cfg=None, bwd_cfg=None):
    from attnlab.gpu import flash_attention_triton

    def make(cfg):
        q, k, v, do = make_inputs(cfg, device)
        if fwd_cfg is None and bwd_cfg is None:
            f = lambda q, k, v: flash_attention_triton(q, k, v, causal=cfg["causal"])  # noqa: E731
        else:  # a candidate configuration, straight through the launchers
            f = _launcher_fn(cfg["causal"], cfg["D"] ** -0.5, fwd_cfg, bwd_cfg)
        return _timed(f, q, k, v, do, cfg["pass_"])

    return make


def _mask(causal: bool):
    from attnlab.variants import Mask

    return Mask(-1, 0 if causal else -1)


def _launcher_fn(causal, scale, fwd_cfg, bwd_cfg):
    from attnlab.gpu import prefill_backward, prefill_forward

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = prefill_forward(q, k, v, mask=_mask(causal), scale=scale, config=fwd_cfg)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, do):
            q, k, v, out, lse = ctx.saved_tensors
            return prefill_backward(do, q, k, v, out, lse, mask=_mask(causal), scale=scale, config=bwd_cfg)

    return Fn.apply


def provider_sdpa(device, backend_name, name):
    """``scaled_dot_product_attention`` pinned to ``backend_name`` (None: PyTorch's own choice, as a model
    calls it). GQA rows pass ``enable_gqa``; a backend that refuses it gets K/V repeated to the query heads
    beforehand, outside the timing, and the row is marked (``kv: "repeated"``)."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    pinned = (lambda: nullcontext()) if backend_name is None else (lambda: sdpa_kernel(getattr(SDPBackend, backend_name)))

    def make(cfg):
        if device != "cuda":
            return None
        q, k, v, do = make_inputs(cfg, device)
        gqa = kv_heads(cfg) != cfg["H"]

        def f(q, k, v):
            with pinned():  # top-left = bottom-right causal alignment when Nq == Nk
                return sdpa(q, k, v, is_causal=cfg["causal"], enable_gqa=gqa)

        fn = _timed(f, q, k, v, do, cfg["pass_"])
        try:
            fn()  # raises here (and the row says so) when the backend refuses the shape
        except RuntimeError:
            if not gqa:
                raise
            # the backend refuses enable_gqa: K/V repeated to the H query heads beforehand, outside the
            # timing (the peer's best case; its row says so)
            k, v = (t.detach().repeat_interleave(cfg["H"] // kv_heads(cfg), dim=1).requires_grad_(t.requires_grad)
                    for t in (k, v))
            gqa = False
            fn = _timed(f, q, k, v, do, cfg["pass_"])
            fn()
            _REPEATED.add(_key(cfg, name))
        return fn

    return make


_REPEATED: set = set()  # (shape, provider) pairs that ran on K/V repeated to the H query heads


def _key(cfg, name):
    return (cfg["D"], cfg["causal"], cfg["N"], cfg["pass_"], cfg["H"], kv_heads(cfg), name)


_FLEX = {}


def provider_flex(device):
    def make(cfg):
        if device != "cuda":
            return None
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if sum(_FLEX.get("compile_s", [])) > _FLEX.get("budget", float("inf")):
            raise RuntimeError("FlexAttention compile budget spent (--flex-budget)")
        if "fn" not in _FLEX:
            from torch import _dynamo

            for name in ("recompile_limit", "cache_size_limit"):  # one compile per shape is fine here
                if hasattr(_dynamo.config, name):
                    setattr(_dynamo.config, name, 64)
            _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        q, k, v, do = make_inputs(cfg, device)
        mask = None
        if cfg["causal"]:
            mask = create_block_mask(lambda b, h, qi, kv: qi >= kv, B=None, H=None, Q_LEN=cfg["N"],
                                     KV_LEN=cfg["N"], device=device)
        flex, gqa = _FLEX["fn"], kv_heads(cfg) != cfg["H"]
        fn = _timed(lambda q, k, v: flex(q, k, v, block_mask=mask, enable_gqa=gqa), q, k, v, do, cfg["pass_"])
        t = time.perf_counter()
        fn()  # compile outside the timing
        torch.cuda.synchronize()
        _FLEX.setdefault("compile_s", []).append(round(time.perf_counter() - t, 1))
        return fn

    return make


def providers(device, names):
    table = {
        "attnlab": lambda: provider_attnlab(device),
        "sdpa": lambda: provider_sdpa(device, None, "sdpa"),
        "sdpa-flash": lambda: provider_sdpa(device, "FLASH_ATTENTION", "sdpa-flash"),
        "sdpa-cudnn": lambda: provider_sdpa(device, "CUDNN_ATTENTION", "sdpa-cudnn"),
        "sdpa-efficient": lambda: provider_sdpa(device, "EFFICIENT_ATTENTION", "sdpa-efficient"),
        "flex": lambda: provider_flex(device),
    }
    return {n: table[n]() for n in names}


# -- parallel compilation: fill Triton's on-disk cache before anything is timed ---------------------


def _warm_job(job):
    """Compile one (config, shape class) in a worker process by running it on a small input whose
    integer arguments fall in the same specialisation classes (multiples of 16) as the real ones.
    ``bwd_cfg`` False: forward only; configs None: the library's table."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if job[0] == "flex":  # fill inductor's caches for one FlexAttention configuration
        try:
            provider_flex(device)(dict(zip(("D", "causal", "N", "pass_", "B", "H", "Hkv"), job[1:])))
        except Exception as e:
            return f"{job}: {type(e).__name__}: {str(e)[:200]}"
        return None
    D, causal, H, fwd_cfg, bwd_cfg, quick, *hkv = job  # (..., Hkv) for GQA shapes
    cfg = dict(D=D, causal=causal, N=64 if quick else 512, pass_="fwd" if bwd_cfg is False else "fwd_bwd",
               B=1, H=H, Hkv=hkv[0] if hkv else H)
    try:
        q, k, v, do = make_inputs(cfg, device)
        if fwd_cfg is None and bwd_cfg in (None, False):
            f = provider_attnlab(device)(cfg)
        else:
            f = _timed(_launcher_fn(causal, D ** -0.5, fwd_cfg, bwd_cfg or None), q, k, v, do, cfg["pass_"])
        f()
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # reported by the caller; the timing run meets the same error and records it
        return f"{job[:5]}: {type(e).__name__}: {str(e)[:200]}"
    return None


def precompile(jobs, workers: int, timeout: float = 240.0) -> float:
    """Run the warm-up jobs in spawned worker processes (``workers`` at a time); past ``timeout``
    seconds the workers are terminated and whatever is left compiles on first use."""
    t = time.perf_counter()
    jobs = list(dict.fromkeys(jobs))
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp

        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")  # the workers are the parallelism
        pool = mp.get_context("spawn").Pool(min(workers, len(jobs)))
        try:
            errors = pool.map_async(_warm_job, jobs, chunksize=1).get(timeout=timeout)
        except mp.TimeoutError:
            errors = [f"timed out after {timeout:.0f} s; the rest compiles on first use"]
        finally:
            pool.terminate()
            pool.join()
    else:
        errors = [_warm_job(j) for j in jobs]
    for e in errors:
        if e:
            print("precompile failed:", e, flush=True)
    return time.perf_counter() - t


def load_configs(path) -> None:
    """Put the configurations a sweep chose into the library's table (for bench and check)."""
    from attnlab.gpu import BwdConfig, FwdConfig, set_config

    if not path:
        return
    for key, entry in json.loads(Path(path).read_text()).items():
        D, causal, *length = key.split(",")  # "D,causal" (both length classes) or "D,causal,class"
        fwd = FwdConfig(**entry["fwd"]) if "fwd" in entry else None
        bwd = BwdConfig(**entry["bwd"]) if "bwd" in entry else None
        set_config(int(D), causal == "True", fwd=fwd, bwd=bwd, length=length[0] if length else None)
        print(f"configs for {key}: {entry}", flush=True)


def table_jobs(cfgs, quick):
    """Warm-up jobs for the library's current table on the given benchmark configurations."""
    from attnlab.gpu import default_bwd_config, default_fwd_config

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return [(c["D"], c["causal"], c["H"], default_fwd_config(c["D"], c["causal"], dev, c["N"]),
             default_bwd_config(c["D"], c["causal"], dev, c["N"]) if c["pass_"] == "fwd_bwd" else False, quick,
             kv_heads(c))
            for c in cfgs]


# -- check: every benchmarked shape against float64 on a few heads ---------------------------------


def check(args) -> list[dict]:
    """flash-attention's criterion on the benchmark shapes: for out, dq, dk, dv of the first and the last K/V
    head (with the query heads that read it), err(attnlab) <= 2·err(bfloat16 attention_ref) + 1e-5, errors
    vs float64."""
    from attnlab.gpu import flash_attention_triton
    from attnlab.reference import attention_ref

    device = args.device
    rows = []
    cfgs = [c for g in args.gqa for c in grid(args.quick, Ds=tuple(args.D), Ns=tuple(args.N), passes=("fwd_bwd",),
                                               group=g)]
    load_configs(args.configs)
    jobs = table_jobs(cfgs, args.quick)
    print(f"check: compiled attnlab's kernels in {precompile(jobs, args.workers):.1f} s", flush=True)
    for cfg in cfgs:
        q, k, v, do = make_inputs(cfg, device, seed=1)
        out = flash_attention_triton(q, k, v, causal=cfg["causal"])
        grads = torch.autograd.grad(out, (q, k, v), do)
        row = {key: cfg[key] for key in ("D", "causal", "N", "B", "H", "Hkv")}
        ok = True
        group = cfg["H"] // cfg["Hkv"]
        for b, hk in ((0, 0), (cfg["B"] - 1, cfg["Hkv"] - 1)):  # a K/V head and the query heads that read it
            sl = (slice(b, b + 1), slice(hk * group, (hk + 1) * group))
            kv_sl = (slice(b, b + 1), slice(hk, hk + 1))
            res = {}
            for dt in (torch.float64, q.dtype):
                qq = q[sl].detach().to(dt).requires_grad_()
                kk, vv = (t[kv_sl].detach().to(dt).requires_grad_() for t in (k, v))
                o, _ = attention_ref(qq, kk, vv, causal=cfg["causal"])
                res[dt] = [o.detach(), *torch.autograd.grad(o, (qq, kk, vv), do[sl].to(dt))]
                del qq, kk, vv, o
            got_all = [out[sl], grads[0][sl], grads[1][kv_sl], grads[2][kv_sl]]
            for name, got, same, ref in zip(("out", "dq", "dk", "dv"), got_all, res[q.dtype], res[torch.float64]):
                e = (got.double() - ref).abs().max().item()
                e_ref = (same.double() - ref).abs().max().item()
                row[f"{name}_err"] = max(row.get(f"{name}_err", 0.0), e)
                row[f"{name}_ref_err"] = max(row.get(f"{name}_ref_err", 0.0), e_ref)
                ok &= bool(e <= 2 * e_ref + 1e-5) and not torch.isnan(got).any().item()
            del res
        row["ok"] = ok
        rows.append(row)
        print(" ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
        del q, k, v, do, out, grads
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


# -- sweep: candidate configurations of attnlab's kernels -----------------------------------------


def sweep_candidates(quick: bool, which: str = "v2"):
    """Candidate configurations: "v2" (the full forward and backward list), "v3" (forward only,
    D = 128: two 8-warp programs per SM through a 128-register cap, against the table's choice) or "v4"
    (forward only: the Gluon kernel's tiles against the table's Triton entries) or "v5" (backward only: the
    Gluon backward's ring depths, dQ sharing and dQ lag against the table's Triton backward; one forward, not a
    candidate: best.json then holds backward entries only)."""
    from attnlab.gpu import BwdConfig, FwdConfig

    if which == "v5":  # the Gluon backward (one pass) against the table's Triton backward
        fwd = [FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)]
        if quick:
            return [FwdConfig(16, 16, 1, 1)], [BwdConfig(16, 16, 1, 1, 16, 16, 1, 1),
                                               BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True)]
        return fwd, [BwdConfig(64, 128, 8, 4, 128, 64, 8, 4), BwdConfig(64, 64, 4, 3, 64, 64, 4, 3),
                     BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True),
                     BwdConfig(64, 128, 4, 3, 64, 128, 4, 3, gluon=True),  # (D = 64: the shared memory)
                     BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_shared=True),
                     BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_lag=1),  # (D = 64: shared memory)
                     BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, dq_lag=2)]
    if which == "v4":  # the Gluon forward (softmax under the P·V wgmma) against the table's Triton entries
        if quick:
            return [FwdConfig(16, 16, 1, 1), FwdConfig(16, 16, 1, 1, gluon=True)], []
        return [FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True),
                FwdConfig(128, 128, 4, 3, tma=True, warp_spec=True, gluon=True),
                FwdConfig(128, 64, 4, 3, tma=True, warp_spec=True, gluon=True),
                FwdConfig(192, 128, 4, 2, tma=True, warp_spec=True, gluon=True),
                FwdConfig(192, 64, 4, 2, tma=True, warp_spec=True, gluon=True),
                FwdConfig(128, 128, 8, 2, tma=True, gluon=True), FwdConfig(64, 64, 4, 3, tma=True, gluon=True),
                FwdConfig(128, 64, 8, 3), FwdConfig(128, 128, 8, 3, tma=True),
                FwdConfig(128, 64, 8, 2, tma=True, warp_spec=True, maxnreg=128)], []
    if which == "v3":
        if quick:
            return [FwdConfig(16, 16, 1, 1), FwdConfig(16, 16, 1, 1, tma=True, maxnreg=128)], []
        return [FwdConfig(128, 128, 8, 3, tma=True, warp_spec=True), FwdConfig(128, 128, 8, 3, tma=True),
                FwdConfig(128, 64, 8, 2, tma=True), FwdConfig(128, 64, 8, 2, tma=True, maxnreg=128),
                FwdConfig(128, 64, 8, 2, tma=True, warp_spec=True, maxnreg=128)], []
    if quick:
        return [FwdConfig(16, 16, 1, 1), FwdConfig(16, 16, 1, 1, tma=True)], [
            BwdConfig(16, 16, 1, 1, 16, 16, 1, 1), BwdConfig(16, 16, 1, 1, 16, 16, 1, 1, dq_atomic=True)]
    # run 1 (2026-11-29) measured 9 forward and 6 backward candidates at N = 4K and 16K; this list
    # keeps the leaders and the close runners-up, and adds the warp-specialised key loop and wider
    # dQ / deeper dK-dV pipelines (pruned with the sm_90 register and shared-memory reports)
    fwd = [FwdConfig(128, 64, 8, 3), FwdConfig(128, 64, 8, 3, tma=True), FwdConfig(128, 64, 4, 3, tma=True),
           FwdConfig(128, 128, 8, 3, tma=True), FwdConfig(128, 128, 4, 3, tma=True), FwdConfig(128, 128, 8, 2),
           FwdConfig(64, 64, 4, 3), FwdConfig(64, 128, 4, 3, tma=True),
           FwdConfig(128, 128, 8, 3, tma=True, warp_spec=True), FwdConfig(128, 64, 8, 3, tma=True, warp_spec=True)]
    bwd = [BwdConfig(64, 128, 8, 3, 128, 64, 8, 3), BwdConfig(32, 128, 8, 3, 128, 64, 8, 3),
           BwdConfig(64, 128, 8, 2, 128, 64, 8, 2), BwdConfig(64, 128, 8, 3, 128, 128, 8, 2),
           BwdConfig(64, 128, 8, 4, 128, 64, 8, 4), BwdConfig(64, 64, 4, 3, 64, 64, 4, 3),
           BwdConfig(64, 128, 8, 3, 128, 64, 8, 3, dq_atomic=True)]
    return fwd, bwd


def sweep(args) -> list[dict]:
    device = args.device
    fwd_cands, bwd_cands = sweep_candidates(args.quick, args.set)
    Ns = (64,) if args.quick else tuple(args.sweep_n)
    shapes = [c for c in grid(args.quick, Ds=tuple(args.D), Ns=Ns, passes=("fwd",))]
    jobs = []
    for c in shapes:
        jobs += [(c["D"], c["causal"], c["H"], f, False, args.quick) for f in fwd_cands]
        jobs += [(c["D"], c["causal"], c["H"], fwd_cands[0], b, args.quick) for b in bwd_cands]
    print(f"sweep: compiled {len(set(jobs))} variants in {precompile(jobs, args.workers):.1f} s", flush=True)
    rows = []
    for c in shapes:
        rows += _sweep_shape(c, fwd_cands, bwd_cands, device)
    print(sweep_summary(rows))
    if args.best:
        best = best_configs(rows, fwd_cands, bwd_cands)
        if args.set == "v5":  # the one forward is there to make O and L, not a choice
            best = {key: {"bwd": e["bwd"]} for key, e in best.items() if "bwd" in e}
        Path(args.best).write_text(json.dumps(best, indent=2))
        print("best:", json.dumps(best))
    return rows


def _sweep_shape(c, fwd_cands, bwd_cands, device) -> list[dict]:
    """Time every candidate on one benchmark shape: forward kernels, then backward kernels."""
    from attnlab.bench import time_fn
    from attnlab.gpu import prefill_backward, prefill_forward

    q, k, v, do = make_inputs(dict(c, pass_="fwd_bwd"), device)
    causal, scale = c["causal"], c["D"] ** -0.5
    with torch.no_grad():
        out, lse = prefill_forward(q, k, v, mask=_mask(causal), scale=scale, config=fwd_cands[0])
    rows = []
    for kind, cands in (("fwd", fwd_cands), ("bwd", bwd_cands)):
        fl = flops(dict(c, pass_=kind))
        for cand in cands:
            if kind == "fwd":
                def fn(cand=cand):
                    return prefill_forward(q, k, v, mask=_mask(causal), scale=scale, config=cand)
            else:
                def fn(cand=cand):
                    return prefill_backward(do, q, k, v, out, lse, mask=_mask(causal), scale=scale, config=cand)
            row = dict(D=c["D"], causal=causal, N=c["N"], kind=kind, config=short(cand))
            try:
                ms = time_fn(fn, device=device)
                row |= dict(ms=ms, tflops=fl / (ms * 1e-3) / 1e12)
            except Exception as e:  # a configuration that does not fit (shared memory, registers)
                row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
            rows.append(row)
            print(" ".join(f"{n}={x:.3f}" if isinstance(x, float) else f"{n}={x}" for n, x in row.items()),
                  flush=True)
    return rows


def best_configs(rows, fwd_cands, bwd_cands) -> dict:
    """Per (D, causal, length class): the forward and backward candidates with the highest TFLOP/s
    summed over the class's N ("short": N < SHORT_KEYS, "long": the rest). Keys "D,causal,class"."""
    from dataclasses import asdict

    from attnlab.gpu.config import length_class

    by_name = {short(c): c for c in [*fwd_cands, *bwd_cands]}
    score: dict[tuple, dict] = {}
    for r in rows:
        if "tflops" in r:
            d = score.setdefault((r["D"], r["causal"], length_class(r["N"]), r["kind"]), {})
            d[r["config"]] = d.get(r["config"], 0.0) + r["tflops"]
    out = {}
    for (D, causal, length, kind), d in score.items():
        out.setdefault(f"{D},{causal},{length}", {})[kind] = asdict(by_name[max(d, key=d.get)])
    return out


def short(cfg) -> str:
    """A configuration in a few characters: 128x64w8s3[tma][+ws][+gl][+p] or m64n128w8s2/m128n64w8s2[+atomic]."""
    if hasattr(cfg, "block_m"):
        return (f"{cfg.block_m}x{cfg.block_n}w{cfg.num_warps}s{cfg.num_stages}" + ("tma" if cfg.tma else "")
                + ("+ws" if getattr(cfg, "warp_spec", False) else "")
                + (f"r{cfg.maxnreg}" if getattr(cfg, "maxnreg", None) else "")
                + ("+gl" if getattr(cfg, "gluon", False) else "")
                + ("+p" if getattr(cfg, "persistent", False) else ""))
    if getattr(cfg, "gluon", False):
        return (f"gluon-s{cfg.stages1}" + ("-atomic" if cfg.dq_atomic else "-tma")
                + (f"-dq/{cfg.dq_split}" if cfg.dq_split > 1 else "") + ("-dqsh" if cfg.dq_shared else "")
                + (f"-lag{cfg.dq_lag}" if cfg.dq_lag else ""))
    if cfg.dq_atomic:
        return f"m{cfg.block_m1}n{cfg.block_n1}w{cfg.warps1}s{cfg.stages1}+atomic"
    return (f"m{cfg.block_m1}n{cfg.block_n1}w{cfg.warps1}s{cfg.stages1}/"
            f"m{cfg.block_m2}n{cfg.block_n2}w{cfg.warps2}s{cfg.stages2}")


def sweep_summary(rows) -> str:
    """Per (D, causal, N, kernel): every candidate's TFLOP/s, best first."""
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["D"], r["causal"], r["N"], r["kind"]), []).append(r)
    lines = []
    for (D, causal, N, kind), rs in groups.items():
        rs = sorted(rs, key=lambda r: -r.get("tflops", 0.0))
        cells = [f"{r['config']} {r['tflops']:.0f}" if "tflops" in r else f"{r['config']} ERR" for r in rs]
        lines.append(f"D={D} {'causal' if causal else 'full  '} N={N:5d} {kind}: " + ", ".join(cells))
    return "\n".join(lines)


# -- aot: the compiler's report for sm_90, with no GPU --------------------------------------------


def _compile_sm90(fn, ptr_types: dict, constexprs: dict, num_warps: int, num_stages: int, maxnreg=None):
    """Compile one kernel for Hopper (sm_90) on this machine: Triton's own ptxas, no driver needed.
    Integer arguments are plain i32 with strides marked divisible by 16, as launches specialise them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # the variants' switches at their dense defaults (a dense kernel: no window, softcap, ALiBi, varlen)
    dense = dict(HAS_WINDOW=False, SOFTCAP=0, ALIBI=False, VARLEN=False, SLOPES=None, CU_Q=None, CU_K=None,
                 TABLE=None)
    constexprs = {**{n: v for n, v in dense.items() if n in fn.arg_names}, **constexprs}
    sig, attrs = {}, {}
    for i, n in enumerate(fn.arg_names):
        if n in constexprs:
            sig[n] = "constexpr"
        elif n in ptr_types:
            sig[n] = ptr_types[n]
            if ptr_types[n].startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif n in ("qk_scale", "sm_scale", "cap2"):
            sig[n] = "fp32"
        else:
            sig[n] = "i32"
            if n.startswith("stride"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs, attrs)
    opts = dict(num_warps=num_warps, num_stages=num_stages) | ({"maxnreg": maxnreg} if maxnreg else {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def _resources(kernel) -> dict:
    """Registers, spill stack, shared memory and the instruction mix, read from the cubin's SASS."""
    import re

    from attnlab.gpu.prefill_gluon import cuobjdump

    res, sass = cuobjdump(kernel, "--dump-resource-usage") or "", cuobjdump(kernel, "--dump-sass") or ""
    out = {"smem_kb": round(kernel.metadata.shared / 1024, 1)}
    for key, pat in (("regs", r"REG:(\d+)"), ("stack", r"STACK:(\d+)")):
        m = re.search(pat, res)
        out[key] = int(m.group(1)) if m else None
    for op in ("HGMMA", "HMMA", "UTMALDG", "LDGSTS", "LDL", "STL", "MUFU.EX2"):
        out[op] = len(re.findall(rf"\b{re.escape(op)}\b", sass))
    out["atomics"] = len(re.findall(r"\b(?:RED|REDG|ATOM|ATOMG)\.", sass))
    return out


def _gluon_row(row: dict, report, kwargs: dict, extra=()) -> dict:
    """An aot row for a Gluon kernel (``row`` has its D and causal) from its sm_90 report (``report``, a
    module's ``sm90_report``: PTX counts, no SASS ones), or the first line of the error that refused the
    build; printed as it comes."""
    try:
        rep = report(row["D"], causal=row["causal"], **kwargs)
        row |= dict(smem_kb=rep["smem_kb"], regs=rep.get("regs"), stack=rep.get("stack"),
                    wgmma_waits=rep["wait_groups"]) | {k: rep[k] for k in extra}
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return row


def aot(args) -> list[dict]:
    """Build every kernel the library table and the sweep would launch, for sm_90, and report what the
    compiler made of it: a spill (stack > 0, LDL/STL) or HMMA instead of HGMMA shows up here for free."""
    import triton

    from attnlab.gpu import default_bwd_config, default_fwd_config, prefill_kernels
    from attnlab.gpu.config import BWD_HEAD_DIMS

    jit = prefill_kernels()

    dev = torch.device("cuda")
    fwd_cands, bwd_cands = sweep_candidates(False)
    work = []  # (label, D, causal, FwdConfig | None, BwdConfig | None)
    for D in (32, 64, 96, 128, 256):
        for causal in (False, True):
            gluon_dim = D in (64, 128)  # other head dims run the Triton entry of their bucket
            f = default_fwd_config(D, causal, dev, gluon=gluon_dim)
            b = default_bwd_config(D, causal, dev, gluon=gluon_dim) if D in BWD_HEAD_DIMS else None
            work.append(("table", D, causal, f, b))
    for D in (64, 128):
        work += [("sweep", D, True, c, None) for c in fwd_cands] + [("sweep", D, True, None, c) for c in bwd_cands]
    rows = []
    for label, D, causal, f, b in work:
        BD = 1 << (D - 1).bit_length()
        kernels = []
        if f is not None and f.gluon and D in (64, 128):  # the Gluon forward: its own sm_90 report
            from attnlab.gpu.prefill_gluon import sm90_report

            rows.append(_gluon_row(dict(source=label, D=D, causal=causal, kernel=f"fwd {short(f)}"), sm90_report,
                                   dict(block_m=f.block_m, block_n=f.block_n, stages=f.num_stages,
                                        num_warps=f.num_warps, warp_spec=f.warp_spec)))
            f = None
        if f is not None:
            ptr = {n: "*bf16" for n in ("Q", "K", "V", "O")} | {"LSE": "*fp32"}
            if f.tma:
                ptr |= {n: f"tensordesc<bf16[1,1,{f.block_m if n in 'QO' else f.block_n},{BD}]>" for n in "QKVO"}
            kernels.append((f"fwd {short(f)}", jit["fwd"], ptr, dict(HEAD_D=D, BLOCK_D=BD, BLOCK_M=f.block_m,
                            BLOCK_N=f.block_n, CAUSAL=causal, USE_TMA=f.tma, WARP_SPEC=f.warp_spec),
                            f.num_warps, f.num_stages))
        if b is not None and b.gluon and D in (64, 128):  # the Gluon backward: its own sm_90 report
            from attnlab.gpu.prefill_gluon_bwd import sm90_report as bwd_report

            rows.append(_gluon_row(dict(source=label, D=D, causal=causal, kernel=f"bwd {short(b)}"), bwd_report,
                                   dict(stages=b.stages1, dq_split=b.dq_split, dq_atomic=b.dq_atomic,
                                        dq_shared=b.dq_shared, dq_lag=b.dq_lag), ("tma_reduces", "atomics")))
            b = None
        if b is not None:
            ptr = {n: "*bf16" for n in ("Q", "K", "V", "DO", "DK", "DV", "DQ")} | {"LSE2": "*fp32", "DELTA": "*fp32"}
            kernels.append((f"dkdv {short(b).split('/')[0]}", jit["dkdv"],
                            ptr | ({"DQ": "*fp32"} if b.dq_atomic else {}),
                            dict(HEAD_D=D, BLOCK_D=BD, BLOCK_M=b.block_m1, BLOCK_N=b.block_n1, CAUSAL=causal,
                                 EVEN_M=True, DQ_ATOMIC=b.dq_atomic), b.warps1, b.stages1))
            if not b.dq_atomic:
                kernels.append((f"dq m{b.block_m2}n{b.block_n2}w{b.warps2}s{b.stages2}", jit["dq"], ptr,
                                dict(HEAD_D=D, BLOCK_D=BD, BLOCK_M=b.block_m2, BLOCK_N=b.block_n2, CAUSAL=causal),
                                b.warps2, b.stages2))
        for name, fn, ptr, const, w, st in kernels:
            row = dict(source=label, D=D, causal=causal, kernel=name)
            try:
                row |= _resources(_compile_sm90(fn, ptr, const, w, st))
            except Exception as e:  # e.g. shared memory over the limit
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    print(f"triton {triton.__version__}: {sum('error' in r for r in rows)} of {len(rows)} builds failed, "
          f"{sum(bool(r.get('stack')) for r in rows)} spill")
    print(aot_markdown(rows))
    return rows


def aot_markdown(rows) -> str:
    head = "| source | D | causal | kernel | regs | spill stack B | LDL/STL | smem KB | HGMMA | HMMA | TMA loads |"
    lines = [head, "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['source']} | {r['D']} | {r['causal']} | {r['kernel']} | {r['error']} |")
            continue
        g = {k: r.get(k, "–") for k in ("regs", "stack", "LDL", "STL", "HGMMA", "HMMA", "UTMALDG")}  # (Gluon
        # rows come from the PTX report: no SASS counts)
        lines.append(f"| {r['source']} | {r['D']} | {'yes' if r['causal'] else 'no'} | {r['kernel']} | {g['regs']} | "
                     f"{g['stack']} | {g['LDL']}/{g['STL']} | {r['smem_kb']} | {g['HGMMA']} | {g['HMMA']} | "
                     f"{g['UTMALDG']} |")
    return "\n".join(lines)


# -- bench ----------------------------------------------------------------------------------------


def bench(args) -> list[dict]:
    device = args.device
    names = [p for p in args.providers.split(",") if p]
    cfgs = [c for g in args.gqa for c in grid(args.quick, Ds=tuple(args.D), Ns=tuple(args.N), group=g)]
    _FLEX["budget"] = args.flex_budget
    load_configs(args.configs)
    jobs = []
    if "flex" in names and device == "cuda":  # the longest compiles first
        jobs += [("flex", *(c[n] for n in ("D", "causal", "N", "pass_", "B", "H", "Hkv"))) for c in cfgs]
    jobs += table_jobs(cfgs, args.quick) if "attnlab" in names else []
    if jobs:
        print(f"bench: precompiled {len(jobs)} jobs in {precompile(jobs, args.workers):.1f} s",
              flush=True)
    x_names = ["D", "causal", "N", "pass_", "B", "H", "Hkv"]
    groups = ", ".join(str(g) for g in args.gqa if g > 1)
    title = "prefill, bfloat16, B·N = 16K tokens, H·D = 2048" + (f", GQA {groups} query heads per K/V head"
                                                                  if groups else "")
    b = Benchmark(name=title, x_names=x_names, x_vals=[tuple(c[n] for n in x_names) for c in cfgs],
                  providers=providers(device, names), flops=flops, device=device)
    rows = run(b, rounds=args.rounds, after=note_gpu_state if args.clocks else None,
               around=ClockSampler() if args.clocks else None)
    for r in rows:
        if _key(r, r["provider"]) in _REPEATED:
            r["kv"] = "repeated"
    if _FLEX.get("compile_s"):
        print(f"flex compile times (s): {_FLEX['compile_s']}")
    return rows


def with_roofline(rows: list[dict], gpu) -> list[dict]:
    """Each bench row with ``roofline_ms`` (the shape and pass on ``gpu``) and, where it was timed,
    ``of_roofline`` = roofline_ms / ms; where the row noted the SM clock of its times (``--clocks``: the mean of the
    reads during each time, ``gpu_during``, or in runs from before them the read after it, ``gpu_state``) and the
    preset knows the clock of its peak, ``sm_mhz`` (the median of those clocks) and ``clock_of_roofline``, the same
    share against the roofline at that clock (``GPU.at_clock``): how far the kernel is from the limit the GPU gave it,
    a GPU held at its power limit running below the clock its peak is quoted at; and where the power draw was noted,
    ``power_w`` (the median over the times). ``gpu`` None leaves the rows as they are."""
    if gpu is not None:
        for r in rows:
            shape = dict(batch=r["B"], heads=r["H"], kv_heads=kv_heads(r), seq=r["N"], head_dim=r["D"],
                         causal=r["causal"], pass_=r["pass_"])
            add_fraction(r, prefill_roofline_ms(**shape, gpu=gpu))
            r.pop("sm_mhz", None)
            r.pop("clock_of_roofline", None)
            r.pop("power_w", None)
            clocks = noted(r, "sm_mhz")
            if clocks and gpu.tensor_mhz:
                r["sm_mhz"] = statistics.median(clocks)
                if r.get("ms"):
                    r["clock_of_roofline"] = prefill_roofline_ms(**shape, gpu=gpu.at_clock(r["sm_mhz"])) / r["ms"]
            watts = row_power_w(r)
            if watts is not None:
                r["power_w"] = watts
    return rows


def noted(r: dict, key: str) -> list[float]:
    """``key`` (``sm_mhz``, ``power_w``) of each of a bench row's times where it was noted: from the reads during the
    times (``gpu_during``) where the run took them, else from the read after each (``gpu_state``)."""
    during = [s[key] for s in r.get("gpu_during") or [] if s and s.get(key)]
    return during or [s[key] for s in r.get("gpu_state") or [] if s and s.get(key)]


def row_power_w(r: dict) -> float | None:
    """The median over a bench row's times of the GPU's power draw (W) noted with each, or None."""
    watts = noted(r, "power_w")
    return statistics.median(watts) if watts else None


def roofline_note(gpu, at_clock: bool = False) -> str:
    note = (f"roofline: `attnlab.cost.roofline.attention_roofline` on {preset_text(gpu)}, every array moved "
            "once and FLOPs on the visible pairs only; % = roofline time / measured time")
    if at_clock and gpu.tensor_mhz:
        note += (f"; where the SM clock was noted with each time, attnlab's MHz (their median) and its % of the "
                 f"roofline at that clock (the preset's {gpu.tensor_flops / 1e12:.0f} TFLOP/s is quoted at "
                 f"{gpu.tensor_mhz:.0f} MHz)")
    return note


def gpu_state(index: int = 0) -> dict | None:
    """The GPU's SM clock (MHz) and power draw (W) now, from NVML where ``pynvml`` is installed, else from
    ``nvidia-smi``; None where neither answers (a CPU machine)."""
    return state_reader(index)()


def _smi_state(index: int) -> dict | None:
    """``gpu_state`` from ``nvidia-smi`` (tens of ms a read), or None."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        mhz, watts = (float(x) for x in out.strip().split(","))
        return dict(sm_mhz=mhz, power_w=watts)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _field_value(v) -> float:
    """An NVML field value (``nvmlFieldValue_t``) as a number, by its type."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(v.valueType, "uiVal")
    return float(getattr(v.value, member))


def power_reader(pynvml, handle):
    """(``source``, a function of no arguments giving the power draw in W) for an NVML ``handle``: the instantaneous
    power (``NVML_FI_DEV_POWER_INSTANT``) where this NVML answers it, ``source`` "instant"; else
    ``nvmlDeviceGetPowerUsage``, which on Ampere and newer GPUs (GA100 aside) is the average of the last second,
    ``source`` "1 s average"."""
    field = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
    if field is not None:
        def instant() -> float:
            v = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0]
            if v.nvmlReturn != 0:
                raise RuntimeError(f"NVML field {field}: return code {v.nvmlReturn}")
            return _field_value(v) / 1000

        try:
            if instant() > 0:
                return "instant", instant
        except Exception:  # (an NVML without the field)
            pass
    return "1 s average", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000


def state_reader(index: int = 0):
    """A function of no arguments that reads the GPU's SM clock (MHz) and power draw (W) now, or None: NVML's handle
    opened once where ``pynvml`` is installed (µs a read; the power ``power_reader``'s, instantaneous where NVML
    answers it), else ``nvidia-smi``'s answer. The function's ``power_source`` says which power it reads."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        source, power = power_reader(pynvml, handle)
    except Exception:  # (no pynvml, or no NVML: the command line)
        def smi() -> dict | None:
            return _smi_state(index)

        smi.power_source = "nvidia-smi power.draw"
        return smi

    def read() -> dict | None:
        try:
            return dict(sm_mhz=float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), power_w=power())
        except Exception:
            return None

    read.power_source = source
    return read


def state_summary(samples: list[dict]) -> dict | None:
    """The mean, lowest and highest SM clock, the mean power and the number of reads of ``samples`` (``gpu_state``
    dicts); None for none."""
    if not samples:
        return None
    mhz = [s["sm_mhz"] for s in samples]
    return dict(sm_mhz=statistics.fmean(mhz), sm_mhz_min=min(mhz), sm_mhz_max=max(mhz),
                power_w=statistics.fmean(s["power_w"] for s in samples), reads=len(samples))


class ClockSampler:
    """``attnlab.bench.run``'s ``around`` for ``--clocks``: while each of a row's times is taken, a thread reads the
    GPU's clock and power (``read``, default ``state_reader()``) every ``interval`` seconds, and after it
    ``state_summary`` of the reads goes into ``row["gpu_during"]`` (one entry a time, None where nothing answered).
    The clock noted once after a time (``note_gpu_state``) is the moment after it, when a short time's GPU may already
    be idle; these reads cover the time itself."""

    def __init__(self, read=None, interval: float = 0.01):
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.read = read if read is not None else state_reader()
        self.interval = interval

    @contextlib.contextmanager
    def __call__(self, row: dict):
        samples: list[dict] = []
        stop = threading.Event()

        def loop():
            while True:
                state = self.read()
                if state:
                    samples.append(state)
                if stop.wait(self.interval):
                    return

        thread = threading.Thread(target=loop, name="clock-sampler", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            row.setdefault("gpu_during", []).append(state_summary(samples))


def power_limit_w(index: int = 0) -> float | None:
    """The GPU's enforced power limit (W), from NVML where ``pynvml`` is installed, else from ``nvidia-smi``; None
    where neither answers. ``bench --clocks`` records it with the run (``environment["power_limit_w"]``): a time whose
    power draw sits at it ran as fast as the power let it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetEnforcedPowerLimit(pynvml.nvmlDeviceGetHandleByIndex(index)) / 1000
    except Exception:  # (no pynvml, or no NVML: the command line)
        pass
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=power.limit", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def note_gpu_state(row: dict) -> None:
    """``attnlab.bench.run``'s ``after`` for ``--clocks``: the GPU's clock and power right after each of a row's
    times, in ``row["gpu_state"]`` (one entry a time, None where nothing answered)."""
    row.setdefault("gpu_state", []).append(gpu_state())


def round_ratios(a: dict | None, ref: dict | None) -> list[float]:
    """attnlab's speed over a peer's, round by round (``ms_rounds`` of two rows timed in turns); [] where the
    rows were timed once."""
    ta, tr = ((r or {}).get("ms_rounds") or [] for r in (a, ref))
    return [y / x for x, y in zip(ta, tr)] if len(ta) == len(tr) > 1 else []


def markdown(rows: list[dict], names=PROVIDERS, *, at_clock: bool = False) -> str:
    """One line per configuration: TFLOP/s of each provider and attnlab's ratios; where the rows carry
    the roofline (``with_roofline``), its time and each provider's share of it, and with ``at_clock`` where they
    carry the clocks, attnlab's clock and its share of the roofline at that clock. GQA rows get a heads
    column (H/Hkv), and a peer that ran on K/V repeated to the query heads a ``*``."""
    keyed: dict[tuple, dict] = {}
    for r in rows:
        key = (r["D"], r["causal"], r["N"], r["pass_"], r["H"], kv_heads(r))
        keyed.setdefault(key, {})[r["provider"]] = r
    names = [n for n in (*names, *sorted({r["provider"] for r in rows} - set(names)))
             if any(n in v for v in keyed.values())]
    refs = ["sdpa-flash", "sdpa-cudnn"] + (["sdpa"] if "sdpa" in names else [])
    gqa = any(k[4] != k[5] for k in keyed)
    roof = any("roofline_ms" in r for r in rows)
    clock = at_clock and roof and any("clock_of_roofline" in r for r in rows)
    head = ["D", *(["heads"] if gqa else []), "causal", "N", "pass"] + names
    head += [{"sdpa-flash": "÷ sdpa-flash", "sdpa-cudnn": "÷ cudnn", "sdpa": "÷ sdpa"}[n] for n in refs]
    head += ["roofline ms"] + [f"{n} %" for n in names] if roof else []
    head += ["attnlab MHz", "attnlab % at its clock"] if clock else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    # by pass, then group (the multi-head rows first), head dim, mask and length
    for (D, causal, N, p, H, Hkv), by in sorted(keyed.items(),
                                                key=lambda kv: (kv[0][3], kv[0][4] // kv[0][5], kv[0][0], kv[0][1],
                                                                kv[0][2])):
        vals = {n: r.get("tflops") for n, r in by.items()}
        cells = [str(D), *([f"{H}/{Hkv}"] if gqa else []), "yes" if causal else "no",
                 f"{N // 1024}K" if N >= 1024 else str(N), p.replace("_", "+")]
        cells += [(f"{vals[n]:.0f}" + ("*" if by[n].get("kv") == "repeated" else "")) if vals.get(n) else "—"
                  for n in names]
        a = vals.get("attnlab")
        for ref in refs:
            cell = f"{a / vals[ref]:.2f}" if a and vals.get(ref) else "—"
            per_round = round_ratios(by.get("attnlab"), by.get(ref))
            if cell != "—" and per_round:
                cell += f" ({min(per_round):.2f}–{max(per_round):.2f})"
            cells.append(cell)
        if roof:
            ms = next((r["roofline_ms"] for r in by.values() if "roofline_ms" in r), None)
            cells.append("—" if ms is None else f"{ms:.3g}")
            cells += [percent(by[n].get("of_roofline")) if n in by else "—" for n in names]
        if clock:
            mine = by.get("attnlab", {})
            cells += ["—" if mine.get("sm_mhz") is None else f"{mine['sm_mhz']:.0f}",
                      percent(mine.get("clock_of_roofline"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def slow_rounds(rows: list[dict], threshold: float = 1.10) -> dict:
    """The rounds of a table timed in rounds that took more than ``threshold`` × their row's fastest round: counted
    by provider, by round and by place in the round (the providers of a shape take turns in the rows' order, rotated
    by one each round: ``attnlab.bench.run``, which records each row's ``places``; a run made before it recorded them
    but with ``--clocks``, which came with the rotation, gets the rotation's places; others none), and each listed with the SM clock noted after it (``--clocks``) beside
    the same row's other rounds'. ``clock_slow`` / ``clock_rest``: the median SM clock (MHz) after the slow rounds and
    after all the others (None without clocks)."""
    by_cfg: dict[tuple, list[dict]] = {}
    for r in rows:
        if len(r.get("ms_rounds") or []) > 1:
            by_cfg.setdefault((r["D"], r["causal"], r["N"], r["pass_"], r["H"], kv_heads(r)), []).append(r)
    slow, clocks_slow, clocks_rest, total = [], [], [], 0
    for (D, causal, N, p, H, Hkv), group in by_cfg.items():
        n = len(group)
        for i, r in enumerate(group):
            best = min(r["ms_rounds"])
            states = r.get("gpu_state") or []
            places = r.get("places") or ([(i - k) % n for k in range(len(r["ms_rounds"]))] if states else None)
            for k, ms in enumerate(r["ms_rounds"]):
                total += 1
                mhz = states[k]["sm_mhz"] if k < len(states) and states[k] else None
                is_slow = ms / best > threshold
                if mhz is not None:
                    (clocks_slow if is_slow else clocks_rest).append(mhz)
                if is_slow:
                    others = [s["sm_mhz"] for j, s in enumerate(states) if j != k and s]
                    slow.append({"D": D, "causal": causal, "N": N, "pass_": p, "H": H, "Hkv": Hkv,
                                 "provider": r["provider"], "round": k, "place": places[k] if places else None,
                                 "over_best": ms / best,
                                 "sm_mhz": mhz, "others_mhz": others})
    count = lambda key: dict(sorted(Counter(s[key] for s in slow if s[key] is not None).items()))  # noqa: E731
    return {"threshold": threshold, "times": total, "slow": slow, "by_provider": count("provider"),
            "by_round": count("round"), "by_place": count("place"),
            "clock_slow": statistics.median(clocks_slow) if clocks_slow else None,
            "clock_rest": statistics.median(clocks_rest) if clocks_rest else None}


def slow_rounds_markdown(rows: list[dict], threshold: float = 1.10) -> str:
    """``slow_rounds`` as a sentence and a table ("" where no row was timed in rounds)."""
    s = slow_rounds(rows, threshold)
    if not s["times"]:
        return ""
    fmt = lambda d: ", ".join(f"{k}: {v}" for k, v in d.items()) or "none"  # noqa: E731
    text = (f"Rounds more than {(threshold - 1) * 100:.0f} % over their row's fastest: {len(s['slow'])} of {s['times']}; "
            f"by provider {fmt(s['by_provider'])}; by round (from 0) {fmt(s['by_round'])}; by place in the round "
            f"(from 0) {fmt(s['by_place'])}.")
    if s["clock_slow"] is not None:
        text += (f" Median SM clock after the slow rounds {s['clock_slow']:.0f} MHz, after the others "
                 f"{s['clock_rest']:.0f} MHz.")
    if not s["slow"]:
        return text + "\n"
    lines = [text, "", "| D | heads | causal | N | pass | provider | round | place | × fastest | SM MHz | its other rounds' MHz |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["slow"]:
        lines.append(f"| {r['D']} | {r['H']}/{r['Hkv']} | {'yes' if r['causal'] else 'no'} | {r['N'] // 1024}K | "
                     f"{r['pass_'].replace('_', '+')} | {r['provider']} | {r['round']} | "
                     f"{'—' if r['place'] is None else r['place']} | "
                     f"{r['over_best']:.3f} | {'—' if r['sm_mhz'] is None else format(r['sm_mhz'], '.0f')} | "
                     f"{', '.join(f'{m:.0f}' for m in r['others_mhz']) or '—'} |")
    return "\n".join(lines) + "\n"


def compare_markdown(runs: dict[str, list[dict]], peer: str = "sdpa-cudnn") -> str:
    """attnlab's speed over ``peer``'s on each shape and pass of several runs (``runs``: a label -> its bench rows),
    a column a run: the ratio of the medians and, where the run had rounds, its lowest and highest round."""
    cells: dict[tuple, dict[str, str]] = {}
    for label, rows in runs.items():
        by: dict[tuple, dict] = {}
        for r in rows:
            if "ms" in r:
                by.setdefault((r["pass_"], r["D"], r["H"], kv_heads(r), r["causal"], r["N"]), {})[r["provider"]] = r
        for key, v in by.items():
            if "attnlab" in v and peer in v:
                rr = round_ratios(v["attnlab"], v[peer])
                cells.setdefault(key, {})[label] = f"{v[peer]['ms'] / v['attnlab']['ms']:.2f}" + (
                    f" ({min(rr):.2f}–{max(rr):.2f})" if rr else "")
    gqa = any(k[2] != k[3] for k in cells)
    head = ["D", *(["heads"] if gqa else []), "causal", "N", "pass", *runs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (p, D, H, Hkv, causal, N), by in sorted(cells.items()):
        lines.append("| " + " | ".join([str(D), *([f"{H}/{Hkv}"] if gqa else []), "yes" if causal else "no",
                                        f"{N // 1024}K" if N >= 1024 else str(N), p.replace("_", "+"),
                                        *(by.get(label, "—") for label in runs)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["check", "sweep", "bench", "aot", "report", "compare"])
    p.add_argument("path", nargs="*", help="report: the JSON written by bench; compare: several of them")
    p.add_argument("--json", default=None, help="write the rows (and the environment) here")
    p.add_argument("--md", default=None, help="bench: also write the markdown table here")
    p.add_argument("--providers", default=",".join(PROVIDERS))
    p.add_argument("--D", type=int, nargs="+", default=[64, 128])
    p.add_argument("--N", type=int, nargs="+", default=[16384, 4096, 1024])
    p.add_argument("--sweep-n", type=int, nargs="+", default=[16384, 4096, 1024])
    p.add_argument("--gqa", type=int, nargs="+", default=[1], metavar="G",
                   help="check/bench: G query heads per K/V head (GQA; H/Hkv = G, H = 2048 / D); 1: multi-head; "
                        "several: the rows of each, in one process and one table")
    p.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    p.add_argument("--set", choices=["v2", "v3", "v4", "v5"], default="v2", help="sweep: which candidate list")
    p.add_argument("--best", default=None, help="sweep: write the best configuration per (D, causal) here")
    p.add_argument("--configs", default=None, help="check/bench: use the configurations a sweep wrote")
    p.add_argument("--flex-budget", type=float, default=90.0, help="seconds of FlexAttention compiles, then skip")
    p.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test of the script")
    p.add_argument("--clocks", action="store_true",
                   help="bench: note the GPU's SM clock and power draw during each time (the JSON's gpu_during: "
                        "their mean, lowest and highest over reads every 10 ms) and right after it (gpu_state)")
    p.add_argument("--at-clock", action="store_true",
                   help="report: attnlab's SM clock (the median of those noted after its times, --clocks) and its "
                        "share of the roofline at that clock (bench --clocks shows them)")
    p.add_argument("--rounds", type=int, default=1,
                   help="bench: the providers of each shape take turns this many times (the order rotated by one "
                        "each round), each row the median of its rounds; the table's ratios then show their "
                        "lowest and highest round")
    p.add_argument("--gpu", type=str.upper, choices=list(GPUS), default=None,
                   help="bench/report: the attnlab.cost preset of the roofline columns (default: the one the "
                        "device's name, or the report's JSON, names; none on the CPU)")
    args = p.parse_args(argv)
    if len(set(args.gqa)) != len(args.gqa):
        p.error(f"--gqa: each group once, got {' '.join(map(str, args.gqa))}")
    if args.command in ("check", "bench"):
        for g in args.gqa:  # (refused before anything is compiled or timed)
            try:
                list(grid(args.quick or not torch.cuda.is_available(), Ds=tuple(args.D), Ns=tuple(args.N), group=g))
            except ValueError as e:
                p.error(f"--gqa {g}: {e}")
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.command == "aot":  # compiles for sm_90 here, GPU or not; never runs anything
        rows = aot(args)
        if args.json:
            Path(args.json).write_text(json.dumps({"command": "aot", "environment": environment(), "rows": rows},
                                                  indent=2))
        return 1 if any("error" in r for r in rows) else 0
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.quick = True
        args.workers = 1
    if args.command == "compare":
        if len(args.path) < 2:
            p.error("compare: give two or more JSON files written by bench")
        print(compare_markdown({Path(x).name: json.loads(Path(x).read_text())["rows"] for x in args.path}))
        return 0
    if args.command == "report":
        if len(args.path) != 1:
            p.error("report: give one JSON file written by bench")
        saved = json.loads(Path(args.path[0]).read_text())
        gpu = preset_for(saved.get("environment", {}).get("gpu"), args.gpu or saved.get("roofline_gpu"))
        rows = with_roofline(saved["rows"], gpu)
        slow = slow_rounds_markdown(rows)
        print((roofline_note(gpu, args.at_clock) + "\n\n" if gpu else "") + markdown(rows, at_clock=args.at_clock)
              + ("\n" + slow if slow else ""))
        return 0
    rows = {"check": check, "sweep": sweep, "bench": bench}[args.command](args)
    env = environment()
    if args.command == "bench" and args.clocks:
        env["power_limit_w"] = power_limit_w()
        env["power_source"] = getattr(state_reader(), "power_source", None)
    gpu = preset_for(env.get("gpu"), args.gpu) if args.command == "bench" else None
    with_roofline(rows, gpu)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": args.command, "environment": env, "rows": rows,
                                               "flex_compile_s": _FLEX.get("compile_s"),
                                               "roofline_gpu": gpu and gpu.name}, indent=2))
    if args.command == "bench":
        md = (f"{env['date']}, {env.get('gpu', 'CPU')}, torch {env['torch']}, triton {env['triton']}, "
              f"CUDA {env.get('cuda')}; TFLOP/s (do_bench median)" + (f"; {roofline_note(gpu, args.clocks)}" if gpu else "")
              + "\n\n" + markdown(rows, at_clock=args.clocks))
        slow = slow_rounds_markdown(rows)
        md += "\n" + slow if slow else ""
        print(md)
        if args.md:
            Path(args.md).write_text(md)
    if args.command == "check":
        bad = [r for r in rows if not r["ok"]]
        print(f"check: {len(rows) - len(bad)}/{len(rows)} shapes pass")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
