"""Where a dense prefill forward+backward's time goes, attnlab's and a peer's, kernel by kernel.

The prefill table (``benchmarks/prefill.py``) times ``torch.autograd.grad(f(q, k, v), (q, k, v), do)`` eagerly with
``triton.testing.do_bench``. This script times the same call of each provider three ways, in one process, the
providers taking turns in each of ``--rounds`` rounds (the order reversed every other round):

* ``eager``: do_bench's median, as the table;
* ``graph``: the call captured once in a CUDA graph and replayed (GPU time, no host in between);
* ``kernels``: torch.profiler over 10 calls (after the rounds): each kernel's GPU time per call, and their sum.

The kernels say what each side spends besides its attention kernels (attnlab: the backward's preprocessing, the
float32 dQ buffer's zeroing and its store into dq; a peer: whatever its library launches), and eager against graph
whether the host shows in the table's times.

    python benchmarks/prefill_profile.py [--D 64 128] [--N 4096 16384] [--causal no yes] [--rounds 3] [--json out.json]
    python benchmarks/prefill_profile.py --report benchmarks/data/prefill-profile-h200-run1.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOKENS, WIDTH = 16384, 2048  # B·N and H·D, as the prefill table
PEERS = ("attnlab", "sdpa-cudnn")


def shape(D: int, N: int, causal: bool, gqa: int = 1) -> dict:
    H = WIDTH // D
    return dict(D=D, causal=causal, N=N, pass_="fwd_bwd", B=TOKENS // N, H=H, Hkv=H // gqa)


def kernel_times(fn, calls: int = 10) -> dict[str, float]:
    """GPU µs per call of each kernel ``fn`` launches (torch.profiler over ``calls`` calls)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        us = getattr(ev, "self_device_time_total", None)
        if us is None:
            us = getattr(ev, "self_cuda_time_total", 0.0)
        if us > 0:
            out[ev.key] = out.get(ev.key, 0.0) + us / calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def graphed(fn):
    """``fn`` captured in a CUDA graph (after three calls on a side stream): its replay, or None where the call
    cannot be captured (the reason printed)."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g.replay
    except Exception as e:  # (reported, not fatal: the eager and kernel times still stand)
        print(f"prefill_profile: no CUDA graph ({type(e).__name__}: {str(e).splitlines()[0][:120]})", file=sys.stderr)
        return None


def measure(cfg: dict, names=PEERS, rounds: int = 3) -> list[dict]:
    """One shape's rows, a row per provider: eager and graph ms by round (providers in turns), their medians, and
    the kernels' µs per call."""
    import triton
    from prefill import providers

    makers = providers("cuda", list(names))
    fns = {n: makers[n](cfg) for n in names}
    for fn in fns.values():  # compiled and warm before any timing
        fn()
    graphs = {n: graphed(fn) for n, fn in fns.items()}
    eager = {n: [] for n in names}
    graph = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            eager[n].append(triton.testing.do_bench(fns[n], warmup=25, rep=100, return_mode="median"))
            if graphs[n] is not None:
                graph[n].append(triton.testing.do_bench(graphs[n], warmup=25, rep=100, return_mode="median"))
    rows = []
    for n in names:
        k = kernel_times(fns[n])
        rows.append(dict(cfg, provider=n, eager_ms=statistics.median(eager[n]), eager_rounds=eager[n],
                         graph_ms=statistics.median(graph[n]) if graph[n] else None, graph_rounds=graph[n],
                         kernels_ms=sum(k.values()) / 1e3, kernels={name: round(us, 2) for name, us in k.items()}))
    return rows


def _shape_text(r: dict) -> str:
    heads = f"{r['H']}" + (f"/{r['Hkv']}" if r.get("Hkv", r["H"]) != r["H"] else "")
    return f"D {r['D']}, {'causal' if r['causal'] else 'dense'}, {r['B']} × {r['N'] // 1024}K, {heads} heads"


def table(rows: list[dict], top: int = 8) -> list[str]:
    out = ["| shape | provider | eager ms | graph ms | kernels ms (sum) | eager − graph | peer ÷ attnlab, eager | "
           "peer ÷ attnlab, graph |", "|---|---|---|---|---|---|---|---|"]
    base = {}
    for r in rows:
        key = _shape_text(r)
        if r["provider"] == "attnlab":
            base[key] = r
        a = base.get(key)
        g = "—" if r["graph_ms"] is None else f"{r['graph_ms']:.3f}"
        diff = "—" if r["graph_ms"] is None else f"{r['eager_ms'] - r['graph_ms']:+.3f}"
        ratio_e = ratio_g = "—"
        if a is not None and r is not a:
            ratio_e = f"{r['eager_ms'] / a['eager_ms']:.3f}"
            if r["graph_ms"] and a["graph_ms"]:
                ratio_g = f"{r['graph_ms'] / a['graph_ms']:.3f}"
        out.append(f"| {key} | {r['provider']} | {r['eager_ms']:.3f} | {g} | {r['kernels_ms']:.3f} | {diff} | "
                   f"{ratio_e} | {ratio_g} |")
    for r in rows:
        out += ["", f"{_shape_text(r)}, {r['provider']}: GPU µs per forward+backward call by kernel "
                f"(the {top} largest; all of them in the JSON):", "", "| kernel | µs |", "|---|---|"]
        items = list(r["kernels"].items())
        out += [f"| {name[:100]} | {us:.1f} |" for name, us in items[:top]]
        if len(items) > top:
            out.append(f"| ({len(items) - top} more) | {sum(us for _, us in items[top:]):.1f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--N", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--causal", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    ap.add_argument("--gqa", type=int, default=1, metavar="G", help="G query heads per K/V head")
    ap.add_argument("--providers", nargs="+", default=list(PEERS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--report", type=Path, nargs="+", help="print the tables of runs' JSON files")
    args = ap.parse_args(argv)
    if args.report:
        for path in args.report:
            print(f"== {path.name}")
            print("\n".join(table(json.loads(path.read_text())["rows"])))
        return 0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists: give a new path (runs are kept, not overwritten)")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this script times GPU kernels)")
    from attnlab.bench import environment

    rows = []
    for D in args.D:
        for causal in args.causal:
            for N in args.N:
                rows += measure(shape(D, N, causal == "yes", args.gqa), tuple(args.providers), args.rounds)
                print("\n".join(table(rows[-len(args.providers):], top=6)), flush=True)
    print("\n".join(table(rows)))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "environment": environment(), "rows": rows},
                                        indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
