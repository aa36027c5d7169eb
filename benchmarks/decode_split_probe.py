"""A workload for a profiler, and a quick timing of the two decode split kernels: one decode shape called with the
Triton or the Gluon split kernel (``decode_config.GLUON_SPLIT``).

Without ``--time``: ``--calls`` eager calls of one kernel with its merge kernel on every call (``--no-lengths``:
without ``cache_seqlens``), so that a profiler catching ``_decode_split`` sees the split kernel alone
(``benchmarks/device_ncu_decode.sh`` runs it under ncu for both kernels). The "+merge" arms pair each split kernel
with the merge kernel of its own kind (Triton's or Gluon's), so their difference holds both kernels'. With ``--time``: each kernel, with its
in-kernel merge and with the merge kernel ("+merge"), timed under a CUDA graph of ``--calls`` calls, the arms in turns
for ``--rounds`` rounds (order reversed every other round), each checked against SDPA's float32 math first; a table
of µs per call by round and the medians, ``--json`` writes the rows. With ``--timeline``: each arm's graph replayed
under torch.profiler, each kernel's time in the replay and the gap before it (against its time alone under ncu);
``--cross`` adds each split kernel with the other kind's merge kernel.

    python benchmarks/decode_split_probe.py --kernel gluon --shape 1 64 8 8192 128 --calls 30
    python benchmarks/decode_split_probe.py --time --shape 1 64 8 8192 128 --shape 1 28 4 20000 128
    python benchmarks/decode_split_probe.py --timeline --shape 1 64 8 8192 128
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ARMS = ("triton", "gluon", "triton+merge", "gluon+merge")
# each split kernel with the other kind's merge kernel (--cross): whether a merge kernel is slow by itself or by the
# partials its own kind's split kernel leaves it
CROSS_ARMS = ("triton+gmerge", "gluon+tmerge")


def _set_arm(arm: str) -> None:
    """The library's switches as ``arm`` asks: the Gluon split kernel or the Triton one; with a suffix, the merge
    kernel on every call, eager and in graphs ("+merge": its own kind's; "+gmerge", "+tmerge": Gluon's or Triton's
    merge kernel whichever split kernel runs, through the names the plans take them by)."""
    from attnlab.gpu import decode, decode_config, decode_gluon, decode_kernels, decode_plan

    decode_config.GLUON_SPLIT = arm.startswith("gluon")
    if "+" in arm:
        decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = 0, math.inf
    triton_merge, gluon_merge = decode_kernels._decode_merge_kernel, _GLUON_MERGE.setdefault(
        "fn", decode_gluon._decode_merge_gluon)
    decode_plan._decode_merge_kernel = gluon_merge if arm.endswith("+gmerge") else triton_merge
    decode_gluon._decode_merge_gluon = triton_merge if arm.endswith("+tmerge") else gluon_merge
    decode.clear_plans()


_GLUON_MERGE: dict = {}  # the Gluon merge kernel, kept while "+tmerge" puts the Triton one under its name


def _merges_back() -> None:
    """Each merge kernel under its own name again (after "+gmerge" or "+tmerge")."""
    from attnlab.gpu import decode_gluon, decode_kernels, decode_plan

    decode_plan._decode_merge_kernel = decode_kernels._decode_merge_kernel
    if "fn" in _GLUON_MERGE:
        decode_gluon._decode_merge_gluon = _GLUON_MERGE["fn"]


def time_arms(shapes, calls: int, rounds: int) -> list[dict]:
    import torch
    from decode_host import graph_us, inputs  # (this folder's: the decode benchmarks' CUDA-graph timing)

    import attnlab
    from attnlab.gpu import decode, decode_config, decode_plan

    saved = decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US
    rows = []
    try:
        for B, H, Hkv, L, D in shapes:
            q, k, v, lens = inputs((B, H, Hkv, L, D))
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
            for rnd in range(rounds):
                for arm in (ARMS if rnd % 2 == 0 else ARMS[::-1]):
                    decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
                    _set_arm(arm)
                    fn = lambda q=q, k=k, v=v, lens=lens: attnlab.flash_decode(q, k, v, cache_seqlens=lens)  # noqa: E731
                    err = (fn()[0].float() - ref).abs().max().item()
                    plan = next(iter(decode_plan._PLANS.values()))
                    rows.append(dict(B=B, H=H, Hkv=Hkv, L=L, D=D, arm=arm, round=rnd, kernel=plan.cfg.kernel,
                                     splits=plan.num_splits, max_err=err, graph_us=graph_us(fn, calls=calls)))
    finally:
        decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
        _merges_back()
        decode.clear_plans()
    return rows


def timeline_arms(shapes, calls: int = 50, replays: int = 4, arms=ARMS) -> list[dict]:
    """Each arm's call captured in a CUDA graph of ``calls`` calls and replayed ``replays`` times under torch.profiler,
    L2-warm (the same inputs every call) and L2-cold (the calls on ``decode_host.cache_copies`` in turn): per kernel
    (by name), the median µs it ran and the median gap from the end of the kernel before it on the GPU, and a call's
    period (one split kernel's start to the next) — whether a kernel is slower in a replay than alone (ncu's
    duration) or waits longer to start."""
    from decode_host import _decode_bench, _in_turn, _trace, cache_copies

    import attnlab
    from attnlab.gpu import decode, decode_config, decode_plan

    saved = decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US
    rows = []
    try:
        for B, H, Hkv, L, D in shapes:
            sets = cache_copies((B, H, Hkv, L, D))
            for cache, use in (("warm", sets[:1]), ("cold", sets)):
                for arm in arms:
                    decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
                    _set_arm(arm)
                    fns = [lambda q=q, k=k, v=v, lens=lens: attnlab.flash_decode(q, k, v, cache_seqlens=lens)
                           for q, k, v, lens in use]
                    g = _decode_bench().captured_graph(_in_turn(fns, calls))
                    events = _trace(g.replay, replays).get("traceEvents", [])
                    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
                    per: dict = {}
                    for a, b in zip(kernels, kernels[1:]):
                        per.setdefault(b["name"], []).append((b["dur"], b["ts"] - (a["ts"] + a["dur"])))
                    splits = [e["ts"] for e in kernels if "split" in e["name"]]
                    for name, xs in per.items():
                        rows.append(dict(B=B, H=H, Hkv=Hkv, L=L, D=D, cache=cache, copies=len(use), arm=arm,
                                         kernel=name.split("(")[0][:40], count=len(xs),
                                         us=statistics.median(d for d, _ in xs),
                                         gap_before_us=statistics.median(gap for _, gap in xs),
                                         period_us=statistics.median(b - a for a, b in zip(splits, splits[1:]))))
    finally:
        decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
        _merges_back()
        decode.clear_plans()
    return rows


def timeline_markdown(rows: list[dict]) -> str:
    out = ["| B | H/Hkv | L | D | L2 | arm | kernel | count | µs (median) | gap before µs | call period µs |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        l2 = r["cache"] if r["cache"] == "warm" else f"cold ({r['copies']} copies)"
        out.append(f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {l2} | {r['arm']} | {r['kernel']} | "
                   f"{r['count']} | {r['us']:.2f} | {r['gap_before_us']:.2f} | {r['period_us']:.2f} |")
    return "\n".join(out) + "\n"


def markdown(rows: list[dict]) -> str:
    out = ["| B | H/Hkv | L | D | arm | kernel, splits | graph µs (by round) | median | × triton | max err |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    by: dict = {}
    for r in rows:
        by.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), {}).setdefault(r["arm"], []).append(r)
    for (B, H, Hkv, L, D), arms in by.items():
        base = statistics.median(r["graph_us"] for r in arms["triton"])
        for arm in ARMS:
            rs = sorted(arms[arm], key=lambda r: r["round"])
            med = statistics.median(r["graph_us"] for r in rs)
            by_round = " / ".join(f"{r['graph_us']:.2f}" for r in rs)
            out.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {arm} | {rs[0]['kernel']}, {rs[0]['splits']} | "
                       f"{by_round} | {med:.2f} | {base / med:.3f} | "
                       f"{max(r['max_err'] for r in rs):.1e} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("triton", "gluon"), default="triton")
    ap.add_argument("--shape", type=int, nargs=5, action="append", metavar=("B", "H", "HKV", "L", "D"),
                    help="a decode shape (repeatable; default 1 64 8 8192 128)")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--no-lengths", action="store_true",
                    help="without --time: call without cache_seqlens (every sequence the cache's length)")
    ap.add_argument("--time", action="store_true", help="time the four arms under CUDA graphs instead")
    ap.add_argument("--timeline", action="store_true",
                    help="each arm's CUDA graph replayed under torch.profiler: its kernels' times and the gaps between")
    ap.add_argument("--cross", action="store_true",
                    help="with --timeline: also each split kernel with the other kind's merge kernel")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="with --time or --timeline: write the rows here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; choose another name")
    if args.calls < 1 or args.rounds < 1:
        ap.error("--calls and --rounds must be at least 1")
    import torch

    if not torch.cuda.is_available():
        print("decode_split_probe.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    shapes = [tuple(s) for s in args.shape] if args.shape else [(1, 64, 8, 8192, 128)]
    if args.time or args.timeline:
        arms = ARMS + CROSS_ARMS * args.cross
        rows = time_arms(shapes, args.calls, args.rounds) if args.time else timeline_arms(shapes, arms=arms)
        print(markdown(rows) if args.time else timeline_markdown(rows))
        if args.json is not None:
            args.json.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                                                 rows=rows), indent=1))
        return 0
    from decode_host import inputs

    import attnlab
    from attnlab.gpu import decode_plan

    q, k, v, lens = inputs(shapes[0])
    if args.no_lengths:
        lens = None
    _set_arm(args.kernel + "+merge")
    for _ in range(args.calls):
        out = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.synchronize()
    plan = next(iter(decode_plan._PLANS.values()))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    print(f"kernel {plan.cfg.kernel}{'' if lens is not None else ', no lengths'}, {plan.num_splits} splits, max err {(out[0].float() - ref).abs().max().item():.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
