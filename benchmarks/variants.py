"""Attention variants on real hardware: attnlab's Triton kernels against PyTorch's own way to do each one,
measured in the same run.

Variants (all causal, bfloat16, 16K tokens, H·D = 2048, D ∈ {64, 128}):

* ``window``  sliding window of W = 4096 keys (Mistral / Gemma 2 style: ``window=(W-1, 0)``)
* ``softcap`` logit softcapping at 50 (Gemma 2)
* ``alibi``   ALiBi with the standard geometric slopes (MPT, BLOOM)
* ``varlen``  a packed batch of documents of mixed lengths 256–1792 (causal inside each document)

Providers:

* ``attnlab`` / ``attnlab-det``: ``attnlab.flash_attention`` (``flash_attention_varlen`` for varlen), the
  second with ``deterministic=True`` (fwd+bwd only; ``--det-kernel`` picks its backward for a run,
  ``--packed-kernel`` the backward of packed batches, ``--packed-fwd`` their forward, ``--packed-det`` their
  deterministic backward);
* ``flex``: ``torch.compile(flex_attention)`` with a block mask (window, causal, documents) made
  beforehand and a ``score_mod`` (softcap, ALiBi);
* ``sdpa-*``: ``scaled_dot_product_attention``'s best routes: a boolean mask (window) or a float bias
  (ALiBi) through the efficient and cuDNN backends; jagged NestedTensors through the flash backend
  (varlen), and the same documents padded to the longest (``sdpa-padded``). Softcap has no SDPA route.

TFLOP/s count only the (query, key) pairs actually visible (``attnlab.cost.window``): 4·pairs·D·H for
the forward, ×3.5 for forward+backward. Time: ``triton.testing.do_bench``'s median. Beside it:
``roofline_ms`` (``attnlab.cost``'s roofline of the variant's shape, window and documents on the GPU
preset of the device, ``--gpu`` to pick another) and ``of_roofline`` = roofline_ms / ms.

    python benchmarks/variants.py check                 # every variant vs the float64 oracle, bf16, odd shapes
    python benchmarks/variants.py bench --D 64 --json variants-64.json --md variants-64.md
    python benchmarks/variants.py report variants-64.json variants-128.json
    python benchmarks/variants.py check --quick         # tiny, on the CPU under TRITON_INTERPRET=1
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # roofline_columns, also when loaded as a module

from roofline_columns import add_fraction, percent, prefill_roofline_ms, preset_for  # noqa: E402

import attnlab  # noqa: E402
from attnlab.bench import environment, time_fn  # noqa: E402
from attnlab.cost import GPUS  # noqa: E402
from attnlab.reference import attention_ref, attention_ref_varlen  # noqa: E402
from attnlab.variants import Mask  # noqa: E402

VARIANTS = ("window", "softcap", "alibi", "varlen")
TOKENS, WIDTH, WINDOW, SOFTCAP = 16384, 2048, 4096, 50.0
DOC_MIN, DOC_MAX = 256, 1792


def alibi_slopes(H: int) -> torch.Tensor:
    """The ALiBi paper's slopes 2^(-8i/H), i = 1..H (H a power of two)."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], dtype=torch.float32)


def doc_lengths(total: int, seed: int = 0, lo: int = DOC_MIN, hi: int = DOC_MAX) -> list[int]:
    """Lengths in [lo, hi] summing to ``total`` (drawn with a seeded generator)."""
    g = torch.Generator().manual_seed(seed)
    out, left = [], total
    while left > hi:
        n = int(torch.randint(lo, min(hi, left - lo) + 1, (1,), generator=g))
        out.append(n)
        left -= n
    if left:
        out.append(left)
    return out


def variant_kwargs(name: str, H: int, device) -> dict:
    """The attnlab keyword arguments of one variant (varlen: causal inside each document)."""
    if name == "window":
        return dict(causal=True, window=(WINDOW - 1, 0))
    if name == "softcap":
        return dict(causal=True, softcap=SOFTCAP)
    if name == "alibi":
        return dict(causal=True, alibi_slopes=alibi_slopes(H).to(device))
    return dict(causal=True)


def visible_pairs(name: str, N: int, lengths=None) -> int:
    """Visible (query, key) pairs of one head: closed forms from attnlab.cost, checked in its tests."""
    from attnlab.cost import window as cw

    if name == "varlen":
        return sum(cw.visible_pairs(seq_q=n, seq_k=n, causal=True) for n in lengths)
    left = WINDOW - 1 if name == "window" else -1
    return cw.visible_pairs(seq_q=N, seq_k=N, window=(left, 0), causal=True)


# -- inputs --------------------------------------------------------------------------------------


def make_inputs(cfg, device, dtype, seed=0, grad=True):
    """q, k, v, dout as (1, H, N, D) (dense variants) or packed (N, H, D) plus cu_seqlens (varlen)."""
    g = torch.Generator(device=device).manual_seed(seed)
    H, N, D = cfg["H"], cfg["N"], cfg["D"]
    shape = (N, H, D) if cfg["variant"] == "varlen" else (1, H, N, D)
    q, k, v, do = (torch.randn(shape, generator=g, device=device, dtype=dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(grad)
    return q, k, v, do


def cu_seqlens(lengths, device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def _timed(f, q, k, v, do, pass_):
    if pass_ == "fwd":
        return lambda: f(q, k, v)
    return lambda: torch.autograd.grad(f(q, k, v), (q, k, v), do)


# -- providers: each returns a zero-argument callable to time, or raises with a reason ----------------


def provider_attnlab(cfg, device, deterministic=False):
    q, k, v, do = make_inputs(cfg, device, cfg["dtype"], grad=cfg["pass_"] == "fwd_bwd")
    kw = variant_kwargs(cfg["variant"], cfg["H"], device)
    if cfg["variant"] == "varlen":
        cu = cu_seqlens(cfg["lengths"], device)
        mx = max(cfg["lengths"])

        def f(q, k, v):
            return attnlab.flash_attention_varlen(q, k, v, cu, cu, max_seqlen_q=mx, max_seqlen_k=mx,
                                                  deterministic=deterministic, **kw)
    else:
        def f(q, k, v):
            return attnlab.flash_attention(q, k, v, deterministic=deterministic, **kw)
    return _timed(f, q, k, v, do, cfg["pass_"])


_FLEX: dict = {}


def provider_flex(cfg, device):
    if device != "cuda":
        raise RuntimeError("FlexAttention is timed on CUDA only")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _FLEX:
        from torch import _dynamo

        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(_dynamo.config, name):
                setattr(_dynamo.config, name, 64)
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    if sum(_FLEX.get("compile_s", [])) > _FLEX.get("budget", float("inf")):
        raise RuntimeError("FlexAttention compile budget spent (--flex-budget)")
    H, N, name = cfg["H"], cfg["N"], cfg["variant"]
    q, k, v, do = make_inputs(dict(cfg, variant="dense"), device, cfg["dtype"], grad=cfg["pass_"] == "fwd_bwd")
    score_mod = None
    if name == "window":
        def mask_mod(b, h, qi, kv):
            return (qi >= kv) & (qi - kv < WINDOW)
    elif name == "varlen":
        doc = torch.repeat_interleave(torch.arange(len(cfg["lengths"]), device=device),
                                      torch.tensor(cfg["lengths"], device=device))

        def mask_mod(b, h, qi, kv):
            return (doc[qi] == doc[kv]) & (qi >= kv)
    else:
        def mask_mod(b, h, qi, kv):
            return qi >= kv
        if name == "softcap":
            def score_mod(s, b, h, qi, kv):
                return torch.tanh(s / SOFTCAP) * SOFTCAP
        else:
            slopes = alibi_slopes(H).to(device)

            def score_mod(s, b, h, qi, kv):
                return s - slopes[h] * (qi - kv).abs()
    block_mask = create_block_mask(mask_mod, None, None, N, N, device=device)
    flex = _FLEX["fn"]
    fn = _timed(lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask), q, k, v, do, cfg["pass_"])
    t = time.perf_counter()
    fn()  # compile outside the timing
    torch.cuda.synchronize()
    _FLEX.setdefault("compile_s", []).append(time.perf_counter() - t)
    cfg.setdefault("notes", []).append(f"flex compiled in {time.perf_counter() - t:.0f} s")
    return fn


def provider_sdpa(cfg, device, backend_name):
    if device != "cuda":
        raise RuntimeError("SDPA is timed on CUDA only")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    H, N, name = cfg["H"], cfg["N"], cfg["variant"]
    backend = None if backend_name == "padded" else getattr(SDPBackend, backend_name)
    grad = cfg["pass_"] == "fwd_bwd"
    if name == "softcap":
        raise RuntimeError("SDPA has no softcap")
    if name == "varlen":
        lengths = cfg["lengths"]
        q, k, v, do = make_inputs(cfg, device, cfg["dtype"], grad=False)
        offsets = cu_seqlens(lengths, device).to(torch.int64)
        if backend_name == "padded":
            L = max(lengths)

            def pad(x):  # (N, H, D) -> (B, H, L, D)
                parts = torch.split(x, lengths)
                return torch.stack([torch.nn.functional.pad(p, (0, 0, 0, 0, 0, L - p.shape[0])) for p in parts]
                                   ).transpose(1, 2).contiguous()
            qp, kp, vp, dop = (pad(t) for t in (q, k, v, do))
            for t in (qp, kp, vp):
                t.requires_grad_(grad)

            def f(q, k, v):  # padded keys come after every real key: causal hides them from real queries
                return sdpa(q, k, v, is_causal=True)
            fn = _timed(f, qp, kp, vp, dop, cfg["pass_"])
        else:
            def nest(x):  # (N, H, D) -> jagged (B, H, j, D)
                return torch.nested.nested_tensor_from_jagged(x.detach(), offsets).transpose(1, 2)
            qn, kn, vn = (nest(t).requires_grad_(grad) for t in (q, k, v))
            don = nest(do)

            def f(q, k, v):
                with sdpa_kernel(backend):
                    return sdpa(q, k, v, is_causal=True)
            fn = _timed(f, qn, kn, vn, don, cfg["pass_"])
        fn()
        return fn
    q, k, v, do = make_inputs(cfg, device, cfg["dtype"], grad=grad)
    i = torch.arange(N, device=device)[:, None]
    j = torch.arange(N, device=device)[None, :]
    if name == "window":
        mask = Mask(WINDOW - 1, 0).visible(i, j, 0)  # (N, N) bool
    else:  # alibi: a float bias with the causal mask folded in
        slopes = alibi_slopes(H).to(device)[:, None, None]
        mask = (-slopes * (i - j).abs()).masked_fill(j > i, float("-inf")).to(cfg["dtype"])[None]  # (1, H, N, N)

    def f(q, k, v):
        with sdpa_kernel(backend):
            return sdpa(q, k, v, attn_mask=mask)
    fn = _timed(f, q, k, v, do, cfg["pass_"])
    fn()  # raises here when the backend refuses
    return fn


PROVIDERS = {
    "attnlab": lambda cfg, dev: provider_attnlab(cfg, dev),
    "attnlab-det": lambda cfg, dev: provider_attnlab(cfg, dev, deterministic=True),
    "flex": provider_flex,
    "sdpa-efficient": lambda cfg, dev: provider_sdpa(cfg, dev, "EFFICIENT_ATTENTION"),
    "sdpa-cudnn": lambda cfg, dev: provider_sdpa(cfg, dev, "CUDNN_ATTENTION"),
    "sdpa-flash": lambda cfg, dev: provider_sdpa(cfg, dev, "FLASH_ATTENTION"),
    "sdpa-padded": lambda cfg, dev: provider_sdpa(cfg, dev, "padded"),
}


def applies(provider: str, cfg) -> bool:
    name = cfg["variant"]
    if provider == "attnlab-det":
        return cfg["pass_"] == "fwd_bwd"
    if provider == "sdpa-flash":  # the flash backend takes no mask; it does take jagged tensors
        return name == "varlen"
    if provider == "sdpa-padded":
        return name == "varlen"
    if provider in ("sdpa-efficient", "sdpa-cudnn"):
        return name in ("window", "alibi", "varlen")
    return True


# -- the benchmark --------------------------------------------------------------------------------


def grid(Ds, variants, passes, quick: bool):
    tokens, width = (64, 64) if quick else (TOKENS, WIDTH)
    for D in Ds:
        for name in variants:
            for p in passes:
                cfg = dict(variant=name, D=D, H=width // D, N=tokens, pass_=p)
                if name == "varlen":
                    cfg["lengths"] = doc_lengths(tokens, lo=8, hi=24) if quick else doc_lengths(tokens)
                yield cfg


def roofline_ms(cfg, gpu) -> float:
    """attnlab.cost's roofline of one configuration: causal, the window's left edge, the documents."""
    return prefill_roofline_ms(batch=1, heads=cfg["H"], seq=cfg["N"], head_dim=cfg["D"], causal=True,
                               pass_=cfg["pass_"], gpu=gpu, window=(WINDOW - 1, 0) if cfg["variant"] == "window" else None,
                               seqlens=cfg.get("lengths") if cfg["variant"] == "varlen" else None)


def bench(args) -> list[dict]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    gpu = preset_for(torch.cuda.get_device_name() if device == "cuda" else None, args.gpu)
    # the switches the library's calls read as they run: (argument, module, switch, its value for gluon / triton)
    switches = (("det_kernel", "prefill_gluon_bwd", "DETERMINISTIC", True, False),  # deterministic backward
                ("packed_kernel", "prefill_gluon_bwd", "PACKED", True, False),  # packed batches' backward
                ("packed_fwd", "prefill_gluon", "PACKED", True, False),  # their forward
                ("packed_det", "prefill_gluon_bwd", "PACKED_DET", (64, 128), ()))  # their deterministic backward
    for arg, module, name, on, off in switches:
        choice = getattr(args, arg, "library")
        if choice != "library":
            setattr(importlib.import_module(f"attnlab.gpu.{module}"), name, off if choice == "triton" else on)
    det_kernel, packed_kernel, packed_fwd, packed_det = (getattr(args, s[0], "library") for s in switches)
    if packed_fwd == "gluon-dynamic":  # the Gluon forward's persistent build taking its tiles from a counter
        import dataclasses

        from attnlab.gpu import config as gc
        from attnlab.gpu import prefill_gluon

        prefill_gluon.PACKED = True
        for D in list(gc._GLUON_PACKED_FWD):
            gc._GLUON_PACKED_FWD[D] = dataclasses.replace(gc._GLUON_PACKED_FWD[D], persistent=True, dynamic=True)
    rows = []
    for cfg in grid(args.D, args.variants, args.passes, args.quick):
        cfg["dtype"] = dtype
        pairs = visible_pairs(cfg["variant"], cfg["N"], cfg.get("lengths"))
        flops = 4.0 * pairs * cfg["D"] * cfg["H"] * (3.5 if cfg["pass_"] == "fwd_bwd" else 1.0)
        for prov in args.providers:
            if not applies(prov, cfg):
                continue
            row = {k: v for k, v in cfg.items() if k not in ("dtype", "lengths", "notes")}
            row.update(provider=prov, pairs=pairs)
            if prov == "attnlab-det":
                row["det_kernel"] = det_kernel
            if cfg["variant"] == "varlen" and prov.startswith("attnlab"):
                row["packed_kernel"] = packed_kernel
                row["packed_fwd"] = packed_fwd
                if prov == "attnlab-det":
                    row["packed_det"] = packed_det
            try:
                fn = PROVIDERS[prov](cfg, device)
                row["ms"] = time_fn(fn, device=device)
                row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
            except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
            if gpu is not None:
                add_fraction(row, roofline_ms(cfg, gpu))
            if cfg.get("notes"):
                row["notes"] = cfg.pop("notes")
            rows.append(row)
            shown = f"{row['tflops']:7.1f} TFLOP/s {row['ms']:8.3f} ms" if "ms" in row else row["skipped"]
            print(f"D={cfg['D']:3d} {cfg['variant']:7s} {cfg['pass_']:7s} {prov:15s} {shown}", flush=True)
            if args.json:  # after every row, so a run stopped at its time limit keeps what it measured
                _write_json(args.json, "variants bench", rows)
            torch.cuda.empty_cache() if device == "cuda" else None
    return rows


def _write_json(path, name, rows) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"benchmark": name, "environment": environment(), "rows": rows},
                                     indent=2, default=str))


def report(rows) -> str:
    """Markdown: per (D, variant, pass) every provider's TFLOP/s, and attnlab's ratio to FlexAttention
    and to the best SDPA route; where the rows carry it, the roofline time and each one's share of it."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        groups.setdefault((r["D"], r["variant"], r["pass_"]), {})[r["provider"]] = r
    roof = any("roofline_ms" in r for r in rows)
    lines = ["| D | variant | pass | attnlab | det. | flex | best SDPA (route) | ×flex | ×SDPA | det./default |"
             + (" roofline ms | attnlab % | det. % | flex % | SDPA % |" if roof else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 5 if roof else "")]
    def fmt(x):
        return "—" if x is None else f"{x:.0f}"

    def ratio(x, y):
        return "—" if x is None or y is None else f"{x / y:.2f}"

    for (D, name, p), by in sorted(groups.items()):
        tf = {prov: r["tflops"] for prov, r in by.items() if "tflops" in r}
        a, det, fx = tf.get("attnlab"), tf.get("attnlab-det"), tf.get("flex")
        sdpas = {k: x for k, x in tf.items() if k.startswith("sdpa")}
        best = max(sdpas, key=sdpas.get) if sdpas else None
        lines.append(f"| {D} | {name} | {p} | {fmt(a)} | {fmt(det)} | {fmt(fx)} | "
                     f"{fmt(sdpas.get(best))} ({best or 'none'}) | {ratio(a, fx)} | "
                     f"{ratio(a, sdpas.get(best))} | {ratio(det, a)} |")
        if roof:
            ms = next((r["roofline_ms"] for r in by.values() if "roofline_ms" in r), None)
            lines[-1] += f" {'—' if ms is None else f'{ms:.3g}'} | " + " | ".join(
                percent(by[k].get("of_roofline")) if k in by else "—" for k in ("attnlab", "attnlab-det", "flex", best)
            ) + " |"
    return "\n".join(lines)


# -- correctness: the flash-attn criterion on odd shapes -------------------------------------------


def check(args) -> list[dict]:
    """Each variant, forward and gradients, in bf16 (fp16 on the CPU) against the float64 oracle:
    error <= 2x the same-dtype PyTorch reference's error + a dtype floor."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    shapes = [(1, 4, 2, 77, 45, 64)] if args.quick else [(2, 8, 2, 1000, 1000, 64), (1, 8, 4, 733, 1537, 128),
                                                        (3, 4, 4, 257, 257, 128)]
    rows = []
    for B, H, Hkv, Nq, Nk, D in shapes:
        for name in VARIANTS:
            g = torch.Generator(device=device).manual_seed(B * 1000 + Nq)
            ok = True
            q, k, v, fast, ref = _check_case(name, B, H, Hkv, Nq, Nk, D, g, device)
            do = torch.randn(q.shape[:-1] + (D,), generator=g, device=device, dtype=torch.float64)
            results = {}
            for label, fn, dt in (("oracle", ref, torch.float64), ("same", ref, dtype), ("attnlab", fast, dtype)):
                qq, kk, vv = (t.to(dt).requires_grad_(True) for t in (q, k, v))
                o = fn(qq, kk, vv)
                grads = torch.autograd.grad(o, (qq, kk, vv), do.to(dt))
                results[label] = [o.double(), *(x.double() for x in grads)]
            row = dict(variant=name, shape=[B, H, Hkv, Nq, Nk, D])
            for idx, what in enumerate(("out", "dq", "dk", "dv")):
                want = results["oracle"][idx]
                err = float((results["attnlab"][idx] - want).detach().abs().max())
                err_ref = float((results["same"][idx] - want).detach().abs().max())
                floor = 4 * torch.finfo(dtype).eps * float(want.detach().abs().max())
                row[what] = dict(err=err, err_ref=err_ref, ok=err <= 2 * err_ref + floor)
                ok &= row[what]["ok"]
            row["ok"] = ok
            rows.append(row)
            print(f"{name:7s} {row['shape']} " + " ".join(
                f"{w} {row[w]['err']:.2e}/{row[w]['err_ref']:.2e}" for w in ("out", "dq", "dk", "dv"))
                + f" ok={ok}", flush=True)
    det = determinism(device, dtype, args.quick)
    rows.append(det)
    print(f"deterministic backward bit-identical over {det['runs']} runs: {det['ok']}", flush=True)
    return rows


def _check_case(name, B, H, Hkv, Nq, Nk, D, g, device):
    """float64 inputs of one check and the two functions of (q, k, v) that compute it: attnlab, the oracle."""
    f64 = dict(generator=g, device=device, dtype=torch.float64)
    if name == "varlen":  # documents of 1..Nq/2 queries, every other one with 7 more keys (bottom-right)
        lens_q = doc_lengths(Nq * B, seed=Nq, lo=1, hi=max(2, Nq // 2))
        lens_k = [n + (7 if i % 2 else 0) for i, n in enumerate(lens_q)]
        q = torch.randn(sum(lens_q), H, D, **f64)
        k, v = (torch.randn(sum(lens_k), Hkv, D, **f64) for _ in range(2))
        cq, ck = cu_seqlens(lens_q, device), cu_seqlens(lens_k, device)
        kw = dict(causal=True, window=(31, 0))
        return (q, k, v, lambda q, k, v: attnlab.flash_attention_varlen(q, k, v, cq, ck, **kw),
                lambda q, k, v: attention_ref_varlen(q, k, v, cq, ck, **kw)[0])
    q = torch.randn(B, H, Nq, D, **f64)
    k, v = (torch.randn(B, Hkv, Nk, D, **f64) for _ in range(2))
    kw = dict(causal=False, window=(97, 13)) if name == "window" else variant_kwargs(name, H, device)
    return (q, k, v, lambda q, k, v: attnlab.flash_attention(q, k, v, **kw),
            lambda q, k, v: attention_ref(q, k, v, **kw)[0])


def determinism(device, dtype, quick: bool) -> dict:
    """deterministic=True: the gradients of several backward runs are bit-identical."""
    g = torch.Generator(device=device).manual_seed(1)
    B, H, Hkv, N, D = (1, 4, 1, 100, 64) if quick else (2, 16, 2, 4099, 128)
    q = torch.randn(B, H, N, D, generator=g, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(B, Hkv, N, D, generator=g, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(B, Hkv, N, D, generator=g, device=device, dtype=dtype, requires_grad=True)
    do = torch.randn(B, H, N, D, generator=g, device=device, dtype=dtype)
    runs = 2 if quick else 5
    got = [torch.autograd.grad(attnlab.flash_attention(q, k, v, causal=True, window=(511, 0), deterministic=True),
                               (q, k, v), do) for _ in range(runs)]
    ok = all(torch.equal(a, b) for r in got[1:] for a, b in zip(got[0], r))
    return dict(variant="deterministic", runs=runs, ok=ok)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--quick", action="store_true")
    c.add_argument("--json", default=None)
    b = sub.add_parser("bench")
    b.add_argument("--quick", action="store_true")
    b.add_argument("--D", type=int, nargs="+", default=[64, 128])
    b.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    b.add_argument("--passes", nargs="+", default=["fwd", "fwd_bwd"], choices=["fwd", "fwd_bwd"])
    b.add_argument("--providers", nargs="+", default=list(PROVIDERS), choices=list(PROVIDERS))
    b.add_argument("--json", default=None)
    b.add_argument("--md", default=None)
    b.add_argument("--flex-budget", type=float, default=float("inf"),
                   help="seconds of FlexAttention compiles after which flex rows are skipped")
    b.add_argument("--gpu", type=str.upper, choices=list(GPUS), default=None,
                   help="the attnlab.cost preset of the roofline columns (default: the one the device's name "
                        "names; none on the CPU)")
    b.add_argument("--det-kernel", choices=["library", "gluon", "triton"], default="library",
                   help="the backward of deterministic calls (attnlab-det): the library's choice, the Gluon "
                        "kernel's ordered dQ additions, or the Triton kernels")
    b.add_argument("--packed-kernel", choices=["library", "gluon", "triton"], default="library",
                   help="the backward of packed batches (varlen): the library's choice, the Gluon kernel's "
                        "packed build (Hopper), or the Triton kernels")
    b.add_argument("--packed-det", choices=["library", "gluon", "triton"], default="library",
                   help="the deterministic backward of packed batches (varlen, attnlab-det): the library's choice, "
                        "the Gluon kernel's ordered packed build, or the Triton kernels")
    b.add_argument("--packed-fwd", choices=["library", "gluon", "gluon-dynamic", "triton"], default="library",
                   help="the forward of packed batches (varlen): the library's choice, the Gluon kernel's packed "
                        "build (Hopper), its persistent build taking its tiles from a counter, or the Triton kernel")
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "report":
        rows = [row for f in args.files for row in json.loads(Path(f).read_text())["rows"]]
        print(report(rows))
        return 0
    _FLEX["budget"] = getattr(args, "flex_budget", float("inf"))
    rows = check(args) if args.cmd == "check" else bench(args)
    if args.cmd == "bench":
        print(report(rows))
        if args.md:
            Path(args.md).write_text(report(rows) + "\n")
    if args.json:
        _write_json(args.json, f"variants {args.cmd}", rows)
    if args.cmd == "check":
        return 0 if all(r["ok"] for r in rows) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
