"""Flash-Decoding benchmark (lecture §8.3–§8.4): KV-cache read bandwidth of attnlab's Triton decode
kernel against PyTorch SDPA's backends, the split count of the wave model against the measured best.

Decode attention reads each K/V byte once and does ~1 FLOP per byte (§8.3), so the yardstick is
bandwidth: 2·B·Hkv·L·D·bytes / time (K and V; q and out are negligible). Every number comes from
this run on this GPU:

* ``copy``: a device-to-device copy of 4 GiB, (read + write) bytes / time — the ceiling;
* ``attnlab``: ``flash_decode_cuda`` with the split count the model picks (contiguous cache), and
  on a paged cache (``paged64`` …, same data, pages in random order; output checked equal);
* ``sdpa-flash`` / ``sdpa-cudnn`` / ``sdpa-efficient``: ``scaled_dot_product_attention`` with that
  single backend, ``enable_gqa=True`` for GQA where the backend takes it, else K/V expanded to H
  heads beforehand (the row says which; the bandwidth still counts only the Hkv heads' bytes);
* ``sweep``: attnlab at every split count S, for the measured best and the models' picks.

Timing: ``triton.testing.do_bench`` median (it flushes L2 between calls). Usage on a GPU:

    PYTHONPATH=src python benchmarks/decode.py --json decode.json
    python benchmarks/decode.py --report decode.json      # the markdown table of RESULTS.md

``--quick`` runs tiny shapes (on the CPU through Triton's interpreter: a smoke test, no timing
worth reading).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from pathlib import Path

import torch

SPLITS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
CONFIGS = [  # (BLOCK_N, num_warps, num_stages, EVICT) tried on two shapes
    (64, 4, 3, ""), (64, 4, 4, ""), (64, 4, 2, ""), (128, 4, 3, ""), (128, 8, 3, ""), (32, 4, 4, ""),
    (32, 4, 6, ""), (64, 8, 4, ""), (64, 4, 3, "evict_first"),
]


def bench_ms(fn, device) -> float:
    if device == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    from attnlab.bench import time_fn

    return time_fn(fn, device="cpu", warmup=1, rep=3, min_time=0.0)


def copy_ceiling(device, gib: float) -> dict:
    n = int(gib * 2**30) // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src), device)
    out = {"bytes": 2 * src.numel() * 2, "ms": ms, "tb_per_s": 2 * src.numel() * 2 / (ms * 1e-3) / 1e12}
    del src, dst
    return out


def sdpa_provider(q, k, v, backend_name):
    """A zero-argument callable running SDPA with one backend, and how GQA was handled."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional.scaled_dot_product_attention
    backend = getattr(SDPBackend, backend_name)
    H, Hkv = q.shape[1], k.shape[1]
    tries = [("native", k, v, {})] if H == Hkv else [("enable_gqa", k, v, {"enable_gqa": True}), ("expand", None, None, {})]
    last = None
    for mode, kk, vv, kw in tries:
        if mode == "expand":
            kk, vv = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)

        def fn(kk=kk, vv=vv, kw=kw):
            with sdpa_kernel(backend):
                return F(q, kk, vv, **kw)

        try:
            fn()
            return fn, mode
        except (RuntimeError, TypeError) as e:  # this backend refuses this shape / argument
            last = e
            kk = vv = None
    raise RuntimeError(str(last).splitlines()[0][:100] if last else "refused")


def paged_copy(k, v, page_size, gen):
    """The same K/V in a paged pool, pages in random order: (pool_k, pool_v, block_table)."""
    B, Hkv, L, D = k.shape
    P = L // page_size
    perm = torch.randperm(B * P, generator=gen).to(k.device)
    table = perm.view(B, P).to(torch.int32)
    pools = []
    for x in (k, v):
        pool = torch.empty(B * P, page_size, Hkv, D, dtype=x.dtype, device=x.device)
        for b in range(B):  # one sequence at a time keeps the temporary small
            pool[perm[b * P:(b + 1) * P]] = x[b].view(Hkv, P, page_size, D).permute(1, 2, 0, 3)
        pools.append(pool)
    return pools[0], pools[1], table


def run(args) -> dict:
    from attnlab.bench import environment
    from attnlab.cost import decode_split_time
    from attnlab.gpu import decode as dec

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    D = args.head_dim
    gen = torch.Generator().manual_seed(0)
    result = {"environment": environment(), "rows": [], "sweeps": [], "configs": []}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        result["environment"].update(sms=props.multi_processor_count, gpu_preset=repr(dec.gpu_for_device(0)))
        result["copy"] = copy_ceiling(device, args.copy_gib)
        print(f"copy ceiling: {result['copy']['tb_per_s']:.3f} TB/s", flush=True)
    gpu = dec.gpu_for_device(0) if device == "cuda" else "H100"

    for B in args.batch:
        for H, Hkv in args.heads:
            for L in args.seq:
                t0 = time.time()
                shape = dict(B=B, H=H, Hkv=Hkv, L=L, D=D)
                nbytes = dec.decode_bytes(batch=B, heads_kv=Hkv, seq=L, head_dim=D, itemsize=2)
                q = torch.randn(B, H, 1, D, device=device, dtype=dtype)
                k = torch.randn(B, Hkv, L, D, device=device, dtype=dtype)
                v = torch.randn(B, Hkv, L, D, device=device, dtype=dtype)
                seqlens = torch.full((B,), L, dtype=torch.int32, device=device)
                s_wave = dec.choose_num_splits(batch=B, heads_kv=Hkv, seq=L, head_dim=D, device=q.device)

                def add(provider, ms, **extra):
                    row = dict(shape, provider=provider, ms=ms, tb_per_s=nbytes / (ms * 1e-3) / 1e12,
                               cache_gib=nbytes / 2**30, **extra)
                    result["rows"].append(row)
                    return row

                ref, _ = dec.flash_decode_cuda(q, k, v, cache_seqlens=seqlens)
                add("attnlab", bench_ms(lambda: dec.flash_decode_cuda(q, k, v, cache_seqlens=seqlens), device),
                    splits=s_wave)
                dims = dec.check_decode_inputs(q, k, v, seqlens, None, check_values=False)
                if s_wave > 1:  # the same split count, merged by the group's last program instead
                    fused = lambda: dec._launch(q, k, v, dims, seqlens, None, s_wave, True, D ** -0.5,  # noqa: E731
                                                FUSED_MERGE=True)
                    err = (fused()[0].float() - ref.float()).abs().max().item()
                    add("fused", bench_ms(fused, device), splits=s_wave, max_diff_vs_attnlab=err)
                # -- SDPA backends in the same run
                for name, backend in (("sdpa-flash", "FLASH_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION"),
                                      ("sdpa-efficient", "EFFICIENT_ATTENTION")):
                    if device != "cuda":
                        continue
                    try:
                        fn, mode = sdpa_provider(q, k, v, backend)
                        err = (fn().float() - ref.float()).abs().max().item()
                        add(name, bench_ms(fn, device), gqa=mode, max_diff_vs_attnlab=err)
                    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
                        result["rows"].append(dict(shape, provider=name, skipped=str(e).splitlines()[0][:100]))
                    fn = None
                    gc.collect()
                    torch.cuda.empty_cache()
                # -- the split sweep: measured best vs the models' picks
                sweep = {}
                for S in sorted(set(args.splits) | {s_wave}):
                    if S != s_wave and (S > math.ceil(L / 64) or (B * Hkv * S > 8 * 132 and S > 1)):
                        continue
                    sweep[S] = bench_ms(lambda S=S: dec.flash_decode_cuda(q, k, v, cache_seqlens=seqlens, num_splits=S),
                                        device)
                best = min(sweep, key=sweep.get)
                wave_pred = {S: decode_split_time(batch=B, heads=Hkv, seq=L, head_dim=D, splits=S, gpu=gpu,
                                                  merge_launch=True) * 1e3 for S in sweep}
                result["sweeps"].append(dict(shape, times_ms=sweep, wave_model_ms=wave_pred, best=best,
                                             wave_pick=s_wave, wave_pick_ms=sweep.get(s_wave),
                                             best_ms=sweep[best]))
                # -- paged caches (same data; must give the same output)
                for ps in args.pages if L >= 32768 else args.pages[:1]:
                    if L % ps:
                        continue
                    kp, vp, table = paged_copy(k, v, ps, gen)
                    out_p, _ = dec.flash_decode_cuda(q, kp, vp, cache_seqlens=seqlens, block_table=table)
                    same = bool(torch.equal(out_p, ref))
                    add(f"paged{ps}", bench_ms(lambda: dec.flash_decode_cuda(q, kp, vp, cache_seqlens=seqlens,
                                                                           block_table=table), device),
                        splits=s_wave, equal_to_contiguous=same)
                    del kp, vp, table
                # -- a few kernel configurations on the shapes named by --config-shapes
                if (B, Hkv, L) in args.config_shapes:
                    for bn, nw, ns, ev in CONFIGS:
                        cfg = dict(BLOCK_N=bn, num_warps=nw, num_stages=ns, EVICT=ev)
                        try:
                            ms = bench_ms(lambda cfg=cfg: dec._launch(q, k, v, dims, seqlens, None, s_wave, True,
                                                                      D ** -0.5, **cfg), device)
                            result["configs"].append(dict(shape, splits=s_wave, **cfg, ms=ms,
                                                          tb_per_s=nbytes / (ms * 1e-3) / 1e12))
                        except Exception as e:  # noqa: BLE001 — a config that does not compile is data
                            result["configs"].append(dict(shape, **cfg, error=str(e).splitlines()[0][:100]))
                del q, k, v, ref
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
                print(f"done B={B} H={H} Hkv={Hkv} L={L} in {time.time() - t0:.1f}s", flush=True)
    return result


def table(result, console=None):
    """The rich table printed last: TB/s per provider, the splits, and the fraction of the ceiling."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=160)
    ceiling = result.get("copy", {}).get("tb_per_s")
    provs = []
    for r in result["rows"]:
        if r["provider"] not in provs:
            provs.append(r["provider"])
    t = Table(title=f"decode KV read TB/s (copy ceiling {ceiling or float('nan'):.2f} TB/s)")
    for c in ["B", "H/Hkv", "L", "GiB", *provs, "vs best SDPA", "% ceil", "S wave", "S best", "wave/best"]:
        t.add_column(c, justify="right")
    shapes = []
    for r in result["rows"]:
        key = (r["B"], r["H"], r["Hkv"], r["L"])
        if key not in shapes:
            shapes.append(key)
    for key in shapes:
        rows = {r["provider"]: r for r in result["rows"] if (r["B"], r["H"], r["Hkv"], r["L"]) == key}
        sw = next(s for s in result["sweeps"] if (s["B"], s["H"], s["Hkv"], s["L"]) == key)
        cells = [str(key[0]), f"{key[1]}/{key[2]}", f"{key[3] // 1024}K", f"{rows['attnlab']['cache_gib']:.2f}"]
        for p in provs:
            r = rows.get(p)
            cells.append("-" if r is None or "ms" not in r else f"{r['tb_per_s']:.2f}"
                         + ("*" if r.get("gqa") == "expand" else ""))
        sdpa = [r["tb_per_s"] for p, r in rows.items() if p.startswith("sdpa") and "ms" in r]
        mine = rows["attnlab"]["tb_per_s"]
        cells.append(f"{mine / max(sdpa):.2f}x" if sdpa else "-")
        cells.append(f"{100 * mine / ceiling:.0f}%" if ceiling else "-")
        cells += [str(sw["wave_pick"]), str(sw["best"]), f"{sw['wave_pick_ms'] / sw['best_ms']:.2f}"]
        t.add_row(*cells)
    console.print(t)


def markdown(result) -> str:
    """The RESULTS.md section, rendered from the JSON of one run."""
    env = result["environment"]
    ceiling = result.get("copy", {}).get("tb_per_s", float("nan"))
    lines = [f"Date {env['date']}, {env.get('gpu')} ({env.get('sms')} SMs), torch {env['torch']}, "
             f"triton {env['triton']}, CUDA {env.get('cuda')}. bf16, D = 128, one query token, full caches. "
             f"KV read bandwidth = 2·B·Hkv·L·D·2 bytes / median time (`triton.testing.do_bench`). "
             f"Copy ceiling (4 GiB device-to-device copy, read + write) measured in the same run: "
             f"**{ceiling:.2f} TB/s**. `*`: SDPA ran on K/V expanded to H heads (it refused `enable_gqa`).", ""]
    provs = []
    for r in result["rows"]:
        if r["provider"] not in provs:
            provs.append(r["provider"])
    lines.append("| B | H/Hkv | L | cache GiB | " + " | ".join(provs) + " | vs best SDPA | % of copy | S wave | S best | time(S wave)/time(S best) |")
    lines.append("|" + "---|" * (len(provs) + 9))
    shapes = []
    for r in result["rows"]:
        key = (r["B"], r["H"], r["Hkv"], r["L"])
        if key not in shapes:
            shapes.append(key)
    for key in shapes:
        rows = {r["provider"]: r for r in result["rows"] if (r["B"], r["H"], r["Hkv"], r["L"]) == key}
        sw = next(s for s in result["sweeps"] if (s["B"], s["H"], s["Hkv"], s["L"]) == key)
        cells = [str(key[0]), f"{key[1]}/{key[2]}", f"{key[3] // 1024}K", f"{rows['attnlab']['cache_gib']:.3f}"]
        for p in provs:
            r = rows.get(p)
            cells.append("–" if r is None or "ms" not in r else f"{r['tb_per_s']:.2f}" + ("*" if r.get("gqa") == "expand" else ""))
        sdpa = [r["tb_per_s"] for p, r in rows.items() if p.startswith("sdpa") and "ms" in r]
        mine = rows["attnlab"]["tb_per_s"]
        cells += [f"{mine / max(sdpa):.2f}×" if sdpa else "–", f"{100 * mine / ceiling:.0f}%", str(sw["wave_pick"]),
                  str(sw["best"]), f"{sw['wave_pick_ms'] / sw['best_ms']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write all results as JSON here")
    p.add_argument("--report", default=None, metavar="JSON", help="print the markdown table of a saved run and exit")
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--copy-gib", type=float, default=4.0)
    args = p.parse_args(argv)
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return 0
    args.head_dim = 128
    if args.quick:
        args.batch, args.heads, args.seq, args.pages, args.head_dim = [2], [(4, 4), (4, 1)], [128], [16], 64
        args.config_shapes, args.splits = {(1, 1, 128)}, (1, 2)
    else:
        args.batch, args.heads, args.seq = [1, 16], [(32, 32), (32, 8)], [4096, 32768, 131072]
        args.pages = [64, 16, 256]
        args.config_shapes, args.splits = {(1, 8, 32768), (16, 32, 131072)}, SPLITS
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {args.json}")
    table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
