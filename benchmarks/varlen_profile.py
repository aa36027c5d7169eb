"""Where a packed (varlen) forward+backward's time goes: the GPU's kernels, or the host between them.

The variants benchmark (``benchmarks/variants.py``) times ``flash_attention_varlen`` forward+backward on 16K tokens
of documents of 256–1792 (causal inside each, bfloat16, H·D = 2048) with ``triton.testing.do_bench``: the time
from an event before the call to one after it, so a host that issues the kernels more slowly than the GPU runs
them shows up in it. This script times the same call four ways, in one process:

* ``eager``: do_bench's median, as the variants table;
* ``graph``: the same call captured once in a CUDA graph and replayed (GPU time with no host in between);
* ``host``: 20 calls issued back to back, timed on the host without waiting for the GPU (the host's time per call,
  as long as the GPU's queue does not fill);
* ``kernels``: torch.profiler over 10 calls: each kernel's GPU time per call, and their sum;
* ``steps`` (``--steps``): the host's inclusive time in each of the library's steps (``STEPS``: the entry points,
  the launchers, the checks, the allocations), per call: each step wrapped in a timer (a fraction of a µs each,
  far less than cProfile adds to every Python call), over 20 calls issued back to back.

If ``eager`` is close to ``kernels`` and ``graph``, the kernels set the pace; if it is close to ``host``, the host does.

    python benchmarks/varlen_profile.py [--D 64 128] [--packed library gluon triton] [--top 25] [--steps] [--json out.json]
    python benchmarks/varlen_profile.py --report benchmarks/data/varlen-profile-h200-run1.json
    python benchmarks/varlen_profile.py --report benchmarks/data/varlen-profile-h200-run{3,4,5,6}.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


# the steps ``--steps`` times: (module, attribute) — a function (replaced wherever an attnlab module holds it) or
# "Class.method"
STEPS = (
    ("attnlab.api", "flash_attention_varlen"),
    ("torch.Tensor", "backward"),
    ("attnlab._checks", "check_varlen"),
    ("attnlab.gpu.prefill", "unsupported"),
    ("attnlab.gpu.prefill", "_forward"),
    ("attnlab.gpu.prefill", "_backward_kernels"),
    ("attnlab.gpu.prefill_fwd", "prefill_forward"),
    ("attnlab.gpu.prefill_bwd", "prefill_backward"),
    ("attnlab.gpu.prefill_gluon_bwd", "gluon_backward"),
    ("attnlab.gpu.prefill_fwd", "_FwdPlan.run"),
    ("attnlab.gpu.prefill_bwd", "_CallPlan.run"),
    ("attnlab.gpu.prefill_gluon_bwd", "_BwdPlan.run"),
    ("attnlab.gpu.launch", "KeptLaunch.run"),
    ("attnlab.gpu.prefill_gluon", "gluon_supported"),
    ("attnlab.gpu.config", "tma_ok"),
    ("attnlab.gpu.config", "default_fwd_config"),
    ("attnlab.gpu.config", "default_bwd_config"),
    ("attnlab.gpu.layout", "store_dq_tiles"),
    ("attnlab.gpu.layout", "empty_like_layout"),
    ("attnlab.gpu.layout", "packed_rows"),
    ("attnlab.gpu.launch", "launch_kept"),
    ("attnlab.gpu.launch", "Launcher.__call__"),
    ("attnlab.gpu.launch", "Launcher.launch"),
    ("attnlab.gpu.launch", "_specialisation"),
    ("attnlab.gpu.launch", "hooks_set"),
    ("attnlab.gpu.launch", "current_stream"),
    ("torch", "empty"),
    ("torch", "zeros"),
    ("torch.cuda", "get_device_capability"),
    ("torch.cuda", "get_device_properties"),
    ("triton.experimental.gluon.nvidia.hopper", "TensorDescriptor.__init__"),
)


def _wrapped_steps(acc: dict):
    """Wrap each of ``STEPS`` in a timer adding (ns, calls) into ``acc``; returns the undo list."""
    import importlib

    undo = []
    for mod_name, attr in STEPS:
        try:
            owner = importlib.import_module(mod_name) if mod_name != "torch.Tensor" else torch.Tensor
        except ImportError:
            continue
        cls_name, _, name = attr.rpartition(".")
        if cls_name:
            owner = getattr(owner, cls_name, None)
        orig = getattr(owner, name, None) if owner is not None else None
        if orig is None:
            continue
        label = f"{mod_name.rsplit('.', 1)[-1]}.{attr}"
        acc.setdefault(label, [0, 0])
        cell = acc[label]

        def timed(*a, _orig=orig, _cell=cell, **k):
            t0 = time.perf_counter_ns()
            try:
                return _orig(*a, **k)
            finally:
                _cell[0] += time.perf_counter_ns() - t0
                _cell[1] += 1

        targets = [owner] if cls_name or not mod_name.startswith("attnlab") else [
            m for n, m in list(sys.modules.items()) if n.startswith("attnlab") and m is not None]
        for t in targets:
            if getattr(t, name, None) is orig:
                setattr(t, name, timed)
                undo.append((t, name, orig))
    return undo


def measure(D: int, packed: str = "library", top: int = 0, steps: bool = False, packed_fwd: str = "library") -> dict:
    """One D's row: eager, graph, host and kernel times of the varlen forward+backward; ``packed``: the backward
    of packed batches (the library's choice, or ``gluon`` / ``triton``, ``prefill_gluon_bwd.PACKED``),
    ``packed_fwd`` their forward (``prefill_gluon.PACKED``); ``top``: also cProfile's top entries by own time
    over 20 calls (µs per call; the profiler's own cost included)."""
    from attnlab.gpu import prefill_gluon, prefill_gluon_bwd

    kept = prefill_gluon_bwd.PACKED, prefill_gluon.PACKED
    if packed != "library":
        prefill_gluon_bwd.PACKED = packed == "gluon"
    if packed_fwd != "library":
        prefill_gluon.PACKED = packed_fwd == "gluon"
    try:
        row = _measure(D, packed, top, steps)
        row["packed_fwd"] = packed_fwd
        return row
    finally:
        prefill_gluon_bwd.PACKED, prefill_gluon.PACKED = kept


def _measure(D: int, packed: str, top: int, steps: bool) -> dict:
    import cProfile
    import pstats

    import triton
    from variants import TOKENS, WIDTH, doc_lengths, provider_attnlab

    cfg = dict(variant="varlen", H=WIDTH // D, N=TOKENS, D=D, dtype=torch.bfloat16, pass_="fwd_bwd",
               lengths=doc_lengths(TOKENS))
    fn = provider_attnlab(cfg, "cuda")
    fn()
    torch.cuda.synchronize()
    eager = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    host = (time.perf_counter() - t0) / 20 * 1e3
    torch.cuda.synchronize()

    from prefill_profile import graphed, kernel_times

    kernels = kernel_times(fn)
    replay = graphed(fn)  # (None, the reason printed, where the call cannot be captured)
    graph = None if replay is None else triton.testing.do_bench(replay, warmup=25, rep=200, return_mode="median")

    hot = []
    if top:
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        st = pstats.Stats(prof)
        entries = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]  # (file, line, name): (cc, nc, tt, ct, _)
        hot = [dict(fn=f"{Path(f).name}:{line}({name})", calls=nc / 20, own_us=tt / 20 * 1e6, cum_us=ct / 20 * 1e6)
               for (f, line, name), (cc, nc, tt, ct, _) in entries]
    step_us = {}
    if steps:
        acc: dict = {}
        undo = _wrapped_steps(acc)
        try:
            fn()  # (one call outside the count: the wrappers' first calls)
            for cell in acc.values():
                cell[:] = [0, 0]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            wrapped = (time.perf_counter() - t0) / 20 * 1e6
            torch.cuda.synchronize()
        finally:
            for owner, name, orig in reversed(undo):
                setattr(owner, name, orig)
        step_us = {"(the call, steps wrapped)": [wrapped, 1.0]}
        step_us |= {k: [ns / 20 / 1e3, n / 20] for k, (ns, n) in acc.items() if n}
    return dict(D=D, H=cfg["H"], packed=packed, lengths=cfg["lengths"], eager_ms=eager, graph_ms=graph, host_ms=host,
                hot=hot, steps=step_us,
                kernels_ms=sum(kernels.values()) / 1e3,
                kernels={k: round(v, 2) for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])})


def _route(r: dict) -> str:
    """A row's kernels: the packed backward's (the library's, gluon, triton), and the forward's where it was set."""
    fwd = r.get("packed_fwd", "library")
    return r.get("packed", "library") + ("" if fwd == "library" else f", forward {fwd}")


def table(rows: list[dict]) -> list[str]:
    out = ["| D | backward | eager ms (do_bench) | graph ms | host ms per call | kernels ms (sum) | eager − kernels |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        graph = "—" if r["graph_ms"] is None else f"{r['graph_ms']:.3f}"
        out.append(f"| {r['D']} | {_route(r)} | {r['eager_ms']:.3f} | {graph} | {r['host_ms']:.3f} | "
                   f"{r['kernels_ms']:.3f} | {r['eager_ms'] - r['kernels_ms']:.3f} |")
    for r in rows:
        out += ["", f"D = {r['D']}, backward {_route(r)}, GPU µs per call by kernel:", "",
                "| kernel | µs |", "|---|---|"]
        out += [f"| {k[:90]} | {v:.1f} |" for k, v in r["kernels"].items()]
        if r.get("hot"):
            out += ["", f"D = {r['D']}, backward {_route(r)}, host: cProfile's top entries by own "
                    "time (µs per call, profiled):", "", "| function | calls | own µs | cumulative µs |",
                    "|---|---|---|---|"]
            out += [f"| {h['fn'][:80]} | {h['calls']:.0f} | {h['own_us']:.1f} | {h['cum_us']:.1f} |" for h in r["hot"]]
        if r.get("steps"):
            out += ["", f"D = {r['D']}, backward {_route(r)}, host: each step's inclusive time "
                    "(µs per forward+backward call, steps wrapped in timers):", "", "| step | calls | µs |", "|---|---|---|"]
            out += [f"| {k} | {n:g} | {us:.1f} |" for k, (us, n) in r["steps"].items()]
    return out


def compare(runs: dict) -> list[str]:
    """Several runs side by side (``runs``: run number -> its rows): every row's times with its run, then, for each
    backward, each step's inclusive host µs per call by run (— where a run did not time the step)."""
    out = ["| run | D | backward | eager ms (do_bench) | graph ms | host ms per call | kernels ms (sum) | eager − kernels |",
           "|---|---|---|---|---|---|---|---|"]
    for n, rows in runs.items():
        for r in rows:
            graph = "—" if r["graph_ms"] is None else f"{r['graph_ms']:.3f}"
            out.append(f"| {n} | {r['D']} | {_route(r)} | {r['eager_ms']:.3f} | {graph} | "
                       f"{r['host_ms']:.3f} | {r['kernels_ms']:.3f} | {r['eager_ms'] - r['kernels_ms']:.3f} |")
    backwards = dict.fromkeys((r["D"], _route(r)) for rows in runs.values() for r in rows
                              if r.get("steps"))
    for D, packed in backwards:
        steps = {n: next((r["steps"] for r in rows if (r["D"], _route(r)) == (D, packed)
                          and r.get("steps")), {}) for n, rows in runs.items()}
        names = dict.fromkeys(k for st in steps.values() for k in st)
        out += ["", f"D = {D}, backward {packed}: each step's inclusive host µs per forward+backward call, by run:", "",
                "| step | " + " | ".join(f"run {n}" for n in steps) + " |", "|---|" + "---|" * len(steps)]
        for name in names:
            out.append(f"| {name} | " + " | ".join("—" if name not in st else f"{st[name][0]:.1f}"
                                                   for st in steps.values()) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--packed", nargs="+", default=["library"], choices=["library", "gluon", "triton"],
                    help="the packed backward(s) to time: the library's choice, the Gluon kernel, the Triton kernels")
    ap.add_argument("--packed-fwd", nargs="+", default=["library"], choices=["library", "gluon", "triton"],
                    help="the packed forward(s) to time with each backward: the library's choice, the Gluon kernel, "
                         "the Triton kernel")
    ap.add_argument("--top", type=int, default=0, help="also cProfile's top N host entries by own time")
    ap.add_argument("--steps", action="store_true", help="also the host's inclusive time in each step (STEPS)")
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--report", type=Path, nargs="+", help="print the tables of a run's JSON, or several runs' "
                    "side by side (files named ...-runN.json; no GPU needed)")
    args = ap.parse_args(argv)
    if args.report is not None:
        if len(args.report) == 1:
            print("\n".join(table(json.loads(args.report[0].read_text())["rows"])))
        else:
            print("\n".join(compare({int(f.stem.rsplit("run", 1)[-1]): json.loads(f.read_text())["rows"]
                                     for f in args.report})))
        return 0
    if args.json is not None and args.json.exists():
        print(f"varlen_profile: {args.json} exists; not overwriting it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("varlen_profile: needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    rows = [measure(D, packed, args.top, args.steps, fwd) for D in args.D for packed in args.packed
            for fwd in args.packed_fwd]
    print("\n".join(table(rows)))
    if args.json is not None:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                                         "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
