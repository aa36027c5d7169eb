"""Flash-Decoding benchmark (lecture §8.3–§8.4): KV-cache read bandwidth of attnlab's Triton decode
kernel against PyTorch SDPA's backends, the split count of the wave model against the measured best.

Decode attention reads each K/V byte once and does ~1 FLOP per byte (§8.3), so the yardstick is
bandwidth: 2·B·Hkv·L·D·bytes / time (K and V; q and out are negligible). Every number comes from
this run on this GPU:

* ``copy``: a device-to-device copy of 4 GiB, (read + write) bytes / time — the ceiling;
* ``attnlab``: ``attnlab.gpu.flash_decode_triton`` with the configuration and split count it picks
  itself (contiguous cache), ``merge-kernel`` the same with the separate merge kernel, and
  on a paged cache (``paged64`` …, same data, pages in random order; output checked equal);
* ``sdpa-flash`` / ``sdpa-cudnn`` / ``sdpa-efficient``: ``scaled_dot_product_attention`` with that
  single backend, ``enable_gqa=True`` for GQA where the backend takes it, else K/V expanded to H
  heads beforehand (the row says which; the bandwidth still counts only the Hkv heads' bytes);
* ``sweep``: attnlab at every split count S, for the measured best and the models' picks
  (``attnlab.cost``: the wave model and the calibrated model; ``--report`` fits a calibration to the
  run with ``attnlab.cost.fit_decode_calibration``).

Beside every time: ``roofline_ms``, ``attnlab.cost.decode.decode_roofline`` of the shape (the cache read
once at the GPU preset's bandwidth; ``--gpu`` picks another preset than the device's), and
``of_roofline`` / ``graph_of_roofline`` = roofline_ms / the do_bench / CUDA-graph time.

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
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # roofline_columns, also when loaded as a module

from roofline_columns import add_fraction, decode_roofline_ms, percent, preset_for, preset_text  # noqa: E402

from attnlab.cost import GPUS, get_gpu  # noqa: E402

CONFIGS = [  # (BLOCK_N, num_warps, num_stages) of the config sweep (D = 128; GPU time, every shape):
    (64, 4, 3), (128, 4, 3), (64, 4, 4),  # the two the chooser returns, and 4 stages for the small tile
]


def bench_ms(fn, device) -> float:
    if device == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    from attnlab.bench import time_fn

    return time_fn(fn, device="cpu", warmup=1, rep=3, min_time=0.0)


def captured_graph(fns):
    """The callables ``fns`` captured in one CUDA graph, in order, after one warm-up pass of them on a side stream
    (compiles, allocates, caches), and replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fns:
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_ms(fns, device) -> float:
    """GPU time of one call, CPU launch overhead excluded: ``len(fns)`` callables (the same work on
    different input copies, so that L2 cannot serve a small cache) captured in one CUDA graph,
    replayed; median over replays of (replay time / calls)."""
    if device != "cuda":
        return bench_ms(fns[0], device)
    import statistics

    g = captured_graph(fns)
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / len(fns))
    del g
    return statistics.median(times)


def copy_ceiling(device, gib: float) -> dict:
    n = int(gib * 2**30) // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src), device)
    out = {"bytes": 2 * src.numel() * 2, "ms": ms, "tb_per_s": 2 * src.numel() * 2 / (ms * 1e-3) / 1e12}
    src = dst = None  # free before the next allocation
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


def device_gpu(props):
    """attnlab.cost's GPU preset whose name the device's contains (H100 if none does), with the
    device's SM count."""
    from attnlab.cost import GPUS

    name = props.name.upper()
    preset = next((g for n, g in GPUS.items() if n.upper() in name), GPUS["H100"])
    return replace(preset, sms=props.multi_processor_count)


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


def _copies(nbytes: int, device) -> int:
    """Input copies for graph timing: enough that one pass over them is at least 180 MB, more than 3× the L2 of an
    H100 or H200 (50 MiB), at most 16."""
    return 1 if device != "cuda" else max(1, min(16, math.ceil(3 * 60e6 / nbytes)))


def config_sweep(result, shape, ins, paged, seqlens, nbytes, sms, device, gpu_name, best_split=None):
    """CUDA-graph time of each of CONFIGS on one shape, on the contiguous cache and on the paged one
    (``paged``: copies of ``ins`` in pages), each at the split count its calibration picks (the
    measured one where ``attnlab.cost.CALIBRATIONS`` has it for ``gpu_name``, else scaled from the
    small config's by bytes in flight, else the decode chooser's) and, where that differs, at
    ``best_split`` (the split sweep's best): configs compared at one S."""
    from attnlab import cost
    from attnlab.gpu import choose_num_splits, decode_config_for, decode_configs, flash_decode_triton

    D = shape["D"]
    base = decode_config_for(*ins[0][:2]) if device != "cuda" else decode_configs(D)["small"]
    small = cost.calibration_for(gpu_name, decode_configs(D)["small"].key)
    layouts = [("contiguous", [(q, k, v, None) for q, k, v in ins])]
    if paged is not None:
        layouts.append(("paged", [(q, pk, pv, pt) for (q, _, _), (pk, pv, pt) in zip(ins, paged)]))
    for bn, nw, ns in CONFIGS if device == "cuda" else [(base.block_n, base.num_warps, base.num_stages)]:
        c = replace(base, block_n=bn, num_warps=nw, num_stages=ns)
        cal = cost.calibration_for(gpu_name, c.key) or (small and cost.scaled_calibration(small, c.key))
        S = (cost.calibrated_num_splits(batch=shape["B"], kv_heads=shape["Hkv"], seq=shape["L"], head_dim=D,
                                        sms=sms, cal=cal, min_split_len=bn) if cal else
             choose_num_splits(batch=shape["B"], kv_heads=shape["Hkv"], seq=shape["L"], head_dim=D,
                               device=device, config=c))
        splits = [S] + ([best_split] if best_split not in (None, S) and best_split <= max(1, shape["L"] // bn) else [])
        for (layout, copies), S in ((lay, S) for S in splits for lay in layouts):
            row = dict(shape, layout=layout, splits=S, config=list(c.key), pick=S == splits[0])
            try:
                ms = graph_ms([lambda x=x: flash_decode_triton(x[0], x[1], x[2], cache_seqlens=seqlens, block_table=x[3],
                                                               num_splits=S, config=c)
                               for x in copies], device)
                row.update(graph_ms=ms, graph_tb_per_s=nbytes / (ms * 1e-3) / 1e12)
            except Exception as e:  # noqa: BLE001 — a config that does not compile or fit is data
                row["error"] = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
            result["configs"].append(row)


def run(args) -> dict:
    from attnlab.bench import environment
    from attnlab.cost import decode_split_time, kv_cache_bytes
    from attnlab.gpu import choose_num_splits, decode_config_for, decode_configs, flash_decode_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    D = args.head_dim
    gen = torch.Generator().manual_seed(0)

    def make_inputs(B, H, Hkv, L, n):
        return [(torch.randn(B, H, 1, D, device=device, dtype=dtype), torch.randn(B, Hkv, L, D, device=device, dtype=dtype),
                 torch.randn(B, Hkv, L, D, device=device, dtype=dtype)) for _ in range(n)]

    def cache_bytes(B, Hkv, L):  # K and V of the whole cache, bf16
        return kv_cache_bytes(layers=1, seq=L, batch=B, kv_heads=Hkv, head_dim=D, dtype_bytes=2)

    # the configuration a call with one (sequence, K/V head) uses: the run's default
    cfg = decode_config_for(*make_inputs(1, 1, 1, 64, 1)[0][:2])
    result = {"environment": environment(), "kernel_config": asdict(cfg), "rows": [], "sweeps": [], "configs": [],
              "probes": {}}
    sms, gpu_name, gpu = 132, "H100", "H100"  # without a GPU: the interpreter, an H100-sized grid
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        sms, gpu_name, gpu = props.multi_processor_count, props.name, device_gpu(props)
        result["environment"].update(sms=sms, gpu_preset=repr(gpu))
        result["copy"] = copy_ceiling(device, args.copy_gib)
        print(f"copy ceiling: {result['copy']['tb_per_s']:.3f} TB/s", flush=True)

    # -- calibration probes: one program alone (program_bw) per config the chooser uses, a tiny call
    probes = {"program_bw": (1, 4, args.probe_seq, "small"), "fixed": (1, 8, 1024, "small"),
              "program_bw large": (1, 4, args.probe_seq, "large")}
    for name, (B, Hkv, L, which) in probes.items():
        c = decode_configs(D)[which] if device == "cuda" else cfg
        nbytes = cache_bytes(B, Hkv, L)
        ins = make_inputs(B, 4 * Hkv, Hkv, L, _copies(nbytes, device))
        ms = graph_ms([lambda q=q, k=k, v=v: flash_decode_triton(q, k, v, num_splits=1, config=c)
                       for q, k, v in ins], device)
        result["probes"][name] = dict(B=B, Hkv=Hkv, L=L, splits=1, ms=ms, bytes=nbytes, config=list(c.key),
                                      per_program_bytes_per_s=nbytes / (B * Hkv) / (ms * 1e-3))
        ins = None

    for B in args.batch:
        for H, Hkv in args.heads:
            for L in args.seq:
                t0 = time.time()
                shape = dict(B=B, H=H, Hkv=Hkv, L=L, D=D)
                nbytes = cache_bytes(B, Hkv, L)
                ins = make_inputs(B, H, Hkv, L, _copies(nbytes, device))
                q, k, v = ins[0]
                seqlens = torch.full((B,), L, dtype=torch.int32, device=device)
                ccfg = decode_config_for(q, k)  # the config this call uses
                s_wave = choose_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=D, device=q.device, config=ccfg)
                ref, _ = flash_decode_triton(q, k, v, cache_seqlens=seqlens)

                def measure(provider, make, **extra):
                    """do_bench median on copy 0 and CUDA-graph time over all copies."""
                    try:
                        fns = [make(*x) for x in ins]
                        fns[0]()
                        row = dict(shape, provider=provider, ms=bench_ms(fns[0], device), graph_ms=graph_ms(fns, device),
                                   cache_gib=nbytes / 2**30, **extra)
                    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
                        row = dict(shape, provider=provider, skipped=str(e).splitlines()[0][:100])
                    else:
                        row["tb_per_s"] = nbytes / (row["ms"] * 1e-3) / 1e12
                        row["graph_tb_per_s"] = nbytes / (row["graph_ms"] * 1e-3) / 1e12
                    result["rows"].append(row)
                    fns = None
                    gc.collect()
                    if device == "cuda":
                        torch.cuda.empty_cache()

                measure("attnlab", lambda q, k, v: lambda: flash_decode_triton(q, k, v, cache_seqlens=seqlens),
                        splits=s_wave, config=list(ccfg.key))
                if s_wave > 1:  # the same split count with the separate merge kernel
                    measure("merge-kernel", lambda q, k, v: lambda: flash_decode_triton(
                        q, k, v, cache_seqlens=seqlens, num_splits=s_wave, config=replace(ccfg, fused_merge=False)),
                        splits=s_wave)
                # -- SDPA backends in the same run
                if device == "cuda":
                    for name, backend in (("sdpa-flash", "FLASH_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION"),
                                          ("sdpa-efficient", "EFFICIENT_ATTENTION")):
                        try:
                            fn, mode = sdpa_provider(q, k, v, backend)
                            err = (fn().float() - ref.float()).abs().max().item()
                            fn = None
                        except RuntimeError as e:
                            result["rows"].append(dict(shape, provider=name, skipped=str(e).splitlines()[0][:100]))
                            continue
                        measure(name, lambda q, k, v, backend=backend: sdpa_provider(q, k, v, backend)[0], gqa=mode,
                                max_diff_vs_attnlab=err)
                # -- paged caches (same data; the output must be bit-equal to the contiguous one)
                # (the paged call's own config and split count: a page smaller than the large tile takes the
                # small config; equality is checked against the contiguous cache with that config and count)
                paged64 = None
                for ps in args.pages if L == args.seq[min(1, len(args.seq) - 1)] else args.pages[:1]:
                    paged = [paged_copy(kk, vv, ps, gen) for _, kk, vv in ins]
                    pcfg = decode_config_for(q, paged[0][0], paged[0][2])
                    ps_splits = choose_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=D, device=q.device,
                                                  config=pcfg)
                    out_p, _ = flash_decode_triton(q, *paged[0][:2], cache_seqlens=seqlens, block_table=paged[0][2])
                    ref_p = ref if pcfg == ccfg else flash_decode_triton(q, k, v, cache_seqlens=seqlens,
                                                                         num_splits=ps_splits, config=pcfg)[0]
                    same = bool(torch.equal(out_p, ref_p))
                    ref_p = None
                    pins = iter(paged)
                    measure(f"paged{ps}", lambda q, k, v: (lambda p=next(pins): flash_decode_triton(
                        q, p[0], p[1], cache_seqlens=seqlens, block_table=p[2])), splits=ps_splits,
                        config=list(pcfg.key), equal_to_contiguous=same)
                    if ps == args.pages[0]:
                        paged64 = paged
                    paged = pins = None
                # -- the split sweep (GPU time, the call's config): measured best vs the models' picks; two
                # passes (up, then down), the lesser time of each S (noise only ever adds time)
                sweep = {}
                todo = [S for S in sorted(set(args.splits) | {s_wave}) if S == s_wave or not (
                    S > max(1, L // ccfg.block_n) or (B * Hkv * S > 8 * sms and S > 1))]
                for S in todo + todo[::-1]:
                    ms = graph_ms([lambda q=q, k=k, v=v, S=S: flash_decode_triton(
                        q, k, v, cache_seqlens=seqlens, num_splits=S) for q, k, v in ins], device)
                    sweep[S] = min(ms, sweep.get(S, ms))
                best = min(sweep, key=sweep.get)
                wave_pred = {S: decode_split_time(batch=B, heads=Hkv, seq=L, head_dim=D, splits=S, gpu=gpu,
                                                  merge_launch=False) * 1e3 for S in sweep}
                result["sweeps"].append(dict(shape, times_ms=sweep, wave_model_ms=wave_pred, best=best,
                                             wave_pick=s_wave, wave_pick_ms=sweep[s_wave], best_ms=sweep[best],
                                             config=list(ccfg.key)))
                # -- the config sweep: every candidate config, contiguous and paged, at its own split count
                if args.config_sweep:
                    config_sweep(result, shape, ins, paged64, seqlens, nbytes, sms, device, gpu_name, best)
                paged64 = None
                ins = q = k = v = ref = None
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
                print(f"done B={B} H={H} Hkv={Hkv} L={L} in {time.time() - t0:.1f}s", flush=True)
                if args.json:  # after every shape: a run cut short still leaves its data
                    Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return result


RUN1_LABELS = {"attnlab": "attnlab, merge kernel", "fused": "attnlab, in-kernel merge (default now)"}
def _config_of(result, row) -> tuple:
    """The kernel config (block_n, block_d, num_warps, num_stages) of a sweep/probe/row."""
    from attnlab.cost import decode_run_config

    return decode_run_config(result, row)


def sweep_times(result, sweep) -> dict:
    """Seconds per split count of one split sweep, each the least time of that same call in the run
    (``attnlab.cost.decode_sweep_times``)."""
    from attnlab.cost import decode_sweep_times

    return decode_sweep_times(result, sweep)


def split_table(result, cals=None):
    """Per shape: the run's pick, the calibrated model's pick and the measured best (GPU time, each
    split count's least time in the run: ``sweep_times``). ``cals``: {config: DecodeCalibration} to
    judge (default: each config's calibration fitted to this run alone, ``fit_decode_calibration``).
    Returns ({config: cal}, rows)."""
    from attnlab.cost import calibrated_num_splits, fit_decode_calibration

    sms = result["environment"].get("sms", 132)
    cals, rows = dict(cals or {}), []
    for s in result["sweeps"]:
        key = _config_of(result, s)
        if key not in cals:
            cals[key] = fit_decode_calibration(result, key)
        cal = cals[key]
        times = sweep_times(result, s)
        best = min(times, key=times.get)
        s_cal = calibrated_num_splits(batch=s["B"], kv_heads=s["Hkv"], seq=s["L"], head_dim=s["D"], sms=sms, cal=cal,
                                      min_split_len=key[0])
        # the lecture's pure wave model (attnlab.cost.decode_split_time) over the swept counts
        lecture = {int(S): t for S, t in (s.get("wave_model_ms") or {}).items() if int(S) in times}
        s_lec = min(lecture, key=lecture.get) if lecture else None
        rows.append(dict(B=s["B"], H=s["H"], Hkv=s["Hkv"], L=s["L"], config=key, wave=s["wave_pick"], cal=s_cal,
                         best=best, wave_ratio=times[s["wave_pick"]] / times[best],
                         cal_ratio=times[s_cal] / times[best] if s_cal in times else None, best_ms=times[best] * 1e3,
                         lecture=s_lec, lecture_ratio=times[s_lec] / times[best] if s_lec else None))
    return cals, rows


def _shapes(result):
    keys = []
    for r in result["rows"]:
        key = (r["B"], r["H"], r["Hkv"], r["L"])
        if key not in keys:
            keys.append(key)
    return keys


def _providers(result):
    provs = []
    for r in result["rows"]:
        if r["provider"] not in provs:
            provs.append(r["provider"])
    return provs


ROOF_KEYS = {"tb_per_s": "of_roofline", "graph_tb_per_s": "graph_of_roofline"}  # bandwidth -> its roofline share


def with_roofline(result, gpu):
    """Every row of ``result`` with ``roofline_ms`` (``decode_roofline`` of its shape on ``gpu``) and, where
    timed, ``of_roofline`` (do_bench) and ``graph_of_roofline`` (CUDA graph); ``gpu`` None: unchanged."""
    if gpu is not None:
        for r in result["rows"]:
            add_fraction(r, decode_roofline_ms(batch=r["B"], heads=r["H"], kv_heads=r["Hkv"], seq=r["L"],
                                               head_dim=r["D"], gpu=gpu),
                         measured=(("ms", "of_roofline"), ("graph_ms", "graph_of_roofline")))
        result["roofline_gpu"] = gpu.name
    return result


def summary_rows(result, key="tb_per_s"):
    """One dict per shape: TB/s per provider (do_bench ``tb_per_s`` or CUDA-graph ``graph_tb_per_s``),
    attnlab over the best SDPA backend, attnlab over the copy ceiling; where the rows carry it
    (``with_roofline``), the shape's ``roofline_ms`` and each provider's share of it (``<provider>:roof``)."""
    ceiling = result.get("copy", {}).get("tb_per_s")
    out = []
    for shape in _shapes(result):
        rows = {r["provider"]: r for r in result["rows"] if (r["B"], r["H"], r["Hkv"], r["L"]) == shape}
        d = dict(zip(("B", "H", "Hkv", "L"), shape), gib=rows["attnlab"]["cache_gib"])
        for p, r in rows.items():
            d[p] = r.get(key)
            if r.get("gqa") == "expand":
                d[p + ":expand"] = True
            if "roofline_ms" in r:
                d["roofline_ms"] = r["roofline_ms"]
                d[p + ":roof"] = r.get(ROOF_KEYS[key])
        sdpa = [r[key] for p, r in rows.items() if p.startswith("sdpa") and key in r]
        # the shipped default: in-kernel merge ("fused" in runs that predate it being the default)
        mine = rows.get("fused", rows["attnlab"])[key] if "kernel_config" not in result else rows["attnlab"][key]
        d["vs_sdpa"] = mine / max(sdpa) if sdpa else None
        d["vs_ceiling"] = mine / ceiling if ceiling else None
        out.append(d)
    return out


def table(result, console=None):
    """The rich tables printed last: TB/s per provider (do_bench and CUDA graph), then the splits."""
    from rich.table import Table

    from attnlab._console import make_console

    console = console or make_console()
    ceiling = result.get("copy", {}).get("tb_per_s")
    provs = _providers(result)
    roof = any("roofline_ms" in r for r in result["rows"])
    for key, title in (("tb_per_s", "do_bench median"), ("graph_tb_per_s", "CUDA graph, GPU time only")):
        t = Table(title=f"decode KV read TB/s, {title} (copy ceiling {ceiling or float('nan'):.2f} TB/s)"
                        + (f"; beside each, its share of the {result.get('roofline_gpu')} roofline" if roof else ""))
        for c in ["B", "H/Hkv", "L", "GiB", *provs, "vs SDPA", "% ceil"] + (["roofline µs"] if roof else []):
            t.add_column(c, justify="right")
        for d in summary_rows(result, key):  # one cell per provider, TB/s and (roofline) its share: fits 200 columns
            cells = [str(d["B"]), f"{d['H']}/{d['Hkv']}", f"{d['L'] // 1024}K", f"{d['gib']:.2f}"]
            cells += ["-" if d.get(p) is None else f"{d[p]:.2f}" + ("*" if d.get(p + ":expand") else "")
                      + (f" {percent(d.get(p + ':roof'))}" if roof else "") for p in provs]
            cells += ["-" if d["vs_sdpa"] is None else f"{d['vs_sdpa']:.2f}x",
                      "-" if d["vs_ceiling"] is None else f"{100 * d['vs_ceiling']:.0f}%"]
            if roof:
                cells.append(_roof_us(d))
            t.add_row(*cells)
        console.print(t)
    if result.get("sweeps"):
        cals, rows = split_table(result)
        for cal in cals.values():
            console.print(f"calibration {cal}")
        t = Table(title="splits (GPU time): the chooser's pick in the run vs the calibrated model vs the measured best")
        for c in ["B", "H/Hkv", "L", "config", "S run", "S cal", "S best", "best µs", "run/best", "cal/best"]:
            t.add_column(c, justify="right")
        for r in rows:
            t.add_row(str(r["B"]), f"{r['H']}/{r['Hkv']}", f"{r['L'] // 1024}K", "/".join(map(str, r["config"])),
                      str(r["wave"]), str(r["cal"]), str(r["best"]), f"{r['best_ms'] * 1e3:.1f}",
                      f"{r['wave_ratio']:.3f}", "-" if r["cal_ratio"] is None else f"{r['cal_ratio']:.3f}")
        console.print(t)
    if any("layout" in c for c in result.get("configs", [])):
        t = Table(title="config sweep, CUDA graph TB/s (BLOCK_N/BLOCK_D/warps/stages, split count in brackets: "
                        "the calibrated pick, then the split sweep's best)")
        cfgs, cells = config_table(result)
        for c in ["B", "H/Hkv", "L", "layout", *cfgs]:
            t.add_column(c, justify="right")
        for row in cells:
            t.add_row(*row)
        console.print(t)


def _roof_us(d) -> str:
    return "-" if d.get("roofline_ms") is None else f"{d['roofline_ms'] * 1e3:.1f}"


def config_table(result):
    """The config sweep as (config names, rows of cells): TB/s and split count per config."""
    runs = [c for c in result.get("configs", []) if "layout" in c]
    cfgs = []
    for c in runs:
        name = "/".join(map(str, c["config"]))
        if name not in cfgs:
            cfgs.append(name)
    keys = []
    for c in runs:
        k = (c["B"], c["H"], c["Hkv"], c["L"], c["layout"])
        if k not in keys:
            keys.append(k)
    rows = []
    for k in keys:
        here = [c for c in runs if (c["B"], c["H"], c["Hkv"], c["L"], c["layout"]) == k]
        cells = [str(k[0]), f"{k[1]}/{k[2]}", f"{k[3] // 1024}K", k[4]]
        for name in cfgs:  # the calibrated pick first, then the split sweep's best S where it differs
            cs = sorted((c for c in here if "/".join(map(str, c["config"])) == name), key=lambda c: not c.get("pick", True))
            cells.append(", ".join(f"{c['graph_tb_per_s']:.2f} ({c['splits']})" for c in cs if "graph_tb_per_s" in c)
                         or "-")
        rows.append(cells)
    return cfgs, rows


def markdown(result) -> str:
    """The RESULTS.md section, rendered from the JSON of one run."""
    env = result["environment"]
    ceiling = result.get("copy", {}).get("tb_per_s", float("nan"))
    provs = _providers(result)
    bn, _, warps, stages = _config_of(result, {})  # the run's config
    per_shape = sorted({tuple(r["config"]) for r in result["rows"] if r.get("config")})
    if len(per_shape) > 1:  # the config is chosen per call: list what the attnlab rows ran
        cfg_text = ("kernel config chosen per call (BLOCK_N/BLOCK_D/warps/stages: "
                    + ", ".join("/".join(map(str, c)) for c in per_shape) + "; the split table names each shape's)")
    else:
        cfg_text = f"kernel config BLOCK_N {bn}, {warps} warps, {stages} stages"
    head_dims = "/".join(str(d) for d in sorted({r["D"] for r in result["rows"]}))
    lines = [f"Date {env['date']}, {env.get('gpu')} ({env.get('sms')} SMs), torch {env['torch']}, triton {env['triton']}, "
             f"CUDA {env.get('cuda')}. bf16, D = {head_dims}, one query token, full caches, {cfg_text}. "
             f"KV read bandwidth = 2·B·Hkv·L·D·2 bytes / time. Copy ceiling (4 GiB device-to-device copy, "
             f"read + write) in the same run: **{ceiling:.2f} TB/s**. `*`: SDPA ran on K/V expanded to H heads "
             f"(it refused `enable_gqa`); otherwise GQA used `enable_gqa=True`.", ""]
    labels = RUN1_LABELS if "kernel_config" not in result else {}
    roof = any("roofline_ms" in r for r in result["rows"])
    if roof:
        lines[0] += (" Last columns: the roofline of each shape (`attnlab.cost.decode.decode_roofline` on "
                     f"{preset_text(get_gpu(result['roofline_gpu']))}: K/V, q and o moved once) and each provider's "
                     "share of it (roofline time / measured time).")
    for key, title in (("tb_per_s", "`triton.testing.do_bench` median (L2 flushed; CPU launch overhead "
                                    "included where a call's CPU time exceeds its GPU time)"),
                       ("graph_tb_per_s", "CUDA-graph replay, GPU time only (inputs rotated over copies "
                                          "≥ 3× L2)")):
        if not any(key in r for r in result["rows"]):
            continue
        lines += [f"**{title}**, TB/s:", ""]
        lines.append("| B | H/Hkv | L | cache GiB | " + " | ".join(labels.get(p, p) for p in provs)
                     + " | attnlab / best SDPA | attnlab / copy |"
                     + (" roofline µs | " + " | ".join(f"{labels.get(p, p)} %" for p in provs) + " |" if roof else ""))
        lines.append("|" + "---|" * (len(provs) + 6 + (len(provs) + 1 if roof else 0)))
        for d in summary_rows(result, key):
            cells = [str(d["B"]), f"{d['H']}/{d['Hkv']}", f"{d['L'] // 1024}K", f"{d['gib']:.3f}"]
            cells += ["–" if d.get(p) is None else f"{d[p]:.2f}" + ("*" if d.get(p + ":expand") else "") for p in provs]
            cells += ["–" if d["vs_sdpa"] is None else f"{d['vs_sdpa']:.2f}×",
                      "–" if d["vs_ceiling"] is None else f"{100 * d['vs_ceiling']:.0f}%"]
            if roof:
                cells += [_roof_us(d).replace("-", "–"), *(percent(d.get(p + ":roof"), "–") for p in provs)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if result.get("sweeps"):
        cals, rows = split_table(result)
        timing = "CUDA-graph time" if "kernel_config" in result else "do_bench median, merge kernel"
        lines += [f"**Split count** ({timing}; sweep S = 1…64): the run's pick, the calibrated model's pick "
                  "(`calibrated_num_splits`, calibration of the shape's config derived from this run) and the "
                  "measured best; last, the lecture's pure wave model (`attnlab.cost.decode_split_time`, "
                  "every program at bw/SMs) and its pick's time. Calibrations: " + "; ".join(
                      f"{'/'.join(map(str, k))}: bw {c.bw / 1e12:.2f} TB/s, one program {c.program_bw / 1e9:.1f} GB/s, "
                      f"{c.programs_per_sm}/SM, k {c.k:.2f}, fixed {c.fixed * 1e6:.1f} µs, per split "
                      f"{c.per_split * 1e6:.2f} µs, per wave {c.per_wave * 1e6:.2f} µs" for k, c in cals.items()), "",
                  "| B | H/Hkv | L | config | S run | S calibrated | S best | best µs | t(S run)/t(best) | t(S cal)/t(best) "
                  "| S lecture | t(S lecture)/t(best) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L'] // 1024}K | {'/'.join(map(str, r['config']))} | "
                         f"{r['wave']} | {r['cal']} | {r['best']} | {r['best_ms'] * 1e3:.1f} | {r['wave_ratio']:.3f} | "
                         + ("–" if r["cal_ratio"] is None else f"{r['cal_ratio']:.3f}") + " | "
                         + ("–" if r["lecture"] is None else f"{r['lecture']} | {r['lecture_ratio']:.3f}") + " |")
        lines.append("")
    cfgs, cells = config_table(result)
    if cells:
        lines += ["**Config sweep** (CUDA-graph TB/s; BLOCK_N/BLOCK_D/warps/stages; the split count in brackets):", "",
                  "| B | H/Hkv | L | layout | " + " | ".join(cfgs) + " |", "|" + "---|" * (4 + len(cfgs))]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write all results as JSON here")
    p.add_argument("--report", default=None, metavar="JSON", help="print the markdown table of a saved run and exit")
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--copy-gib", type=float, default=4.0)
    p.add_argument("--config-sweep", action="store_true",
                   help="also time every config of CONFIGS on every shape, contiguous and paged (GPU time)")
    p.add_argument("--gpu", type=str.upper, choices=list(GPUS), default=None,
                   help="the attnlab.cost preset of the roofline columns (default: the one the device's name, or "
                        "the report's JSON, names; none on the CPU)")
    p.add_argument("--split-order", choices=["strided", "chunks"], default=None,
                   help="how the kernel deals a call's tiles to its splits (attnlab.gpu.decode_plan.SPLIT_ORDER; "
                        "default: the library's)")
    p.add_argument("--graph-merge", choices=["auto", "kernel"], default=None,
                   help="how CUDA graphs of large calls merge the splits: in the split kernel (auto, the library's "
                        "default: attnlab.gpu.decode_plan.GRAPH_FUSED_FROM_US) or by the merge kernel (kernel)")
    p.add_argument("--gluon-split", action="store_true",
                   help="contiguous caches take the Gluon split kernel (attnlab.gpu.decode_config.GLUON_SPLIT; "
                        "default: the library's), its split sweeps included")
    p.add_argument("--compare", nargs=2, default=None, metavar=("A", "B"),
                   help="print attnlab's CUDA-graph TB/s of two saved runs side by side, row by row, and exit")
    args = p.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(x).read_text()) for x in args.compare)
        print(compare_markdown(a, b, *(Path(x).name for x in args.compare)))
        return 0
    if args.gluon_split:
        from attnlab.gpu import decode_config

        decode_config.GLUON_SPLIT = True
    if args.split_order or args.graph_merge == "kernel":
        from attnlab.gpu import decode_plan

        if args.split_order:
            decode_plan.SPLIT_ORDER = args.split_order
        if args.graph_merge == "kernel":
            decode_plan.GRAPH_FUSED_FROM_US = float("inf")
    if args.report:
        result = json.loads(Path(args.report).read_text())
        gpu = preset_for(result["environment"].get("gpu"), args.gpu or result.get("roofline_gpu"))
        print(markdown(with_roofline(result, gpu)))
        return 0
    args.head_dim = 128
    if args.quick:
        args.config_sweep = True
        if not torch.cuda.is_available():  # the kernels run in Triton's CPU interpreter (set before importing them)
            import os

            os.environ["TRITON_INTERPRET"] = "1"
        args.batch, args.heads, args.seq, args.pages, args.head_dim = [2], [(4, 4), (4, 1)], [128], [16], 64
        args.probe_seq = 256
        args.splits = (1, 2)
    else:
        args.batch, args.heads, args.seq = [1, 16], [(32, 32), (32, 8)], [4096, 32768, 131072]
        args.pages, args.probe_seq = [64, 16, 256], 262144
        from attnlab.cost import SPLIT_CANDIDATES

        args.splits = SPLIT_CANDIDATES
    result = with_roofline(run(args), preset_for(torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                                                 args.gpu))
    from attnlab.gpu import decode_plan

    result["split_order"] = decode_plan.SPLIT_ORDER
    result["graph_merge"] = "kernel" if decode_plan.GRAPH_FUSED_FROM_US == float("inf") else "auto"
    from attnlab.gpu import decode_config

    result["gluon_split"] = decode_config.GLUON_SPLIT
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {args.json}")
    table(result)
    return 0


OWN = ("attnlab", "merge-kernel", "paged16", "paged64", "paged256")


def compare_markdown(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> str:
    """attnlab's rows (its default call, the merge kernel, the paged caches) of two runs side by side: CUDA-graph
    TB/s in each and their ratio (B over A), with cuDNN's TB/s of run B beside them."""
    def keyed(result):
        return {(r["B"], r["H"], r["Hkv"], r["L"], r["provider"]): r for r in result["rows"] if "graph_tb_per_s" in r}

    ra, rb = keyed(a), keyed(b)
    def named(r):  # the split order, and how graphs merged where the run says
        order = r.get("split_order") or ("the configurations' order" if "split_order" in r else "?")
        return ", ".join([order] + ([f"graphs' merge: {r['graph_merge']}"] if r.get("graph_merge") else [])
                         + (["the Gluon split kernel"] if r.get("gluon_split") else []))

    lines = [f"CUDA-graph TB/s; A = {name_a} ({named(a)}), B = {name_b} ({named(b)})",
             "", "| B | H/Hkv | L | call | A | B | B / A | cuDNN (B) |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in ra if k in rb and k[4] in OWN):
        x, y = ra[key]["graph_tb_per_s"], rb[key]["graph_tb_per_s"]
        c = rb.get((*key[:4], "sdpa-cudnn"))
        lines.append(f"| {key[0]} | {key[1]}/{key[2]} | {key[3]} | {key[4]} | {x:.2f} | {y:.2f} | {y / x:.3f} | "
                     f"{c['graph_tb_per_s']:.2f} |" if c else
                     f"| {key[0]} | {key[1]}/{key[2]} | {key[3]} | {key[4]} | {x:.2f} | {y:.2f} | {y / x:.3f} | — |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
