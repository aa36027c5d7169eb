"""Which part of the Gluon backward's packed-batch build fails on a GPU: each case in a process of its own (an
illegal instruction ends the CUDA context), against the Triton kernels' gradients of the same call.

    python benchmarks/packed_probe.py            # every case, 40 s each
    python benchmarks/packed_probe.py --case one-sequence-whole-blocks
    python benchmarks/packed_probe.py --timing --json out.json   # where the packed build's time goes
    python benchmarks/packed_probe.py --report out.json          # its table again
    python benchmarks/packed_probe.py --det --json out.json      # where the deterministic build's time goes

``--timing`` times the backward alone (do_bench medians, bf16, H·D = 2048, causal and not) on the same work
laid out four ways: dense (16, H, 1024, D) on the Gluon kernel as shipped; the same with L₂, Dᵢ loaded by the
consumers and dQ in row order (the packed build's first version); the same in a model's (B, N, H, D) layout
(rows H·D apart, as in packed tensors); 16 packed sequences of 1,024 on the packed build
and on the Triton kernels; and a mixed packed batch (256–1,792) on both.

``--det`` times the backward alone (CUDA-graph replays, so no host time; bf16, causal, H·D = 2048) of a packed
batch of 16K tokens in documents of 256–1,792 (the variants benchmark's) on the Gluon backward's packed build,
taking apart what separates its deterministic build from the default one: the default (each key block's walk
from its first query block; the dense calls' walks start staggered, ``rotate``), with staggered walks, unstaggered,
the same with each sequence's key blocks last first (the deterministic build's launch order), the deterministic
build, the same with its dQ writer warp at 48 registers (as it was: the first consumer warp group then gets fewer),
with its writer waiting for a step's turns before the tiles are staged (``DET_EARLY_TURN``), with its writer adding each tile without waiting for its turn (measurement only: right gradients in no fixed order),
with the staggered walks and turns in arrival order (``PACKED_DET_ROTATE``), and the deterministic Triton kernels;
besides, the default with ``ZERO_PAST`` on. ``--skip`` leaves variants out (run 1 predates the first, second and
sixth names and the change of the default's walks, run 2 the seventh: its "default" is the staggered one). The variants take turns, ``--rounds`` times; the table gives each one's
median over the rounds and the deterministic build's counters (``sem_stats``: waits that polled, their polls).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CASES = {  # name: (lengths, head dim, config keywords, causal)
    "one-sequence-whole-blocks": ([1024], 128, dict(dq_shared=True), True),
    "two-sequences-whole-blocks": ([512, 1024], 128, dict(dq_shared=True), True),
    "partial-last-block": ([1000], 128, dict(dq_shared=True), True),
    "d64-whole-blocks": ([512, 1024], 64, {}, True),
    "d128-not-shared-whole-blocks": ([512, 1024], 128, {}, True),
    "non-causal-whole-blocks": ([512, 1024], 128, dict(dq_shared=True), False),
    "mixed": ([1000, 257, 1792, 63, 700, 1], 128, dict(dq_shared=True), True),
}


def run_case(name: str) -> None:
    import torch

    from attnlab.gpu import BwdConfig, prefill_backward, prefill_forward
    from attnlab.gpu import prefill_gluon_bwd as gb
    from attnlab.variants import Mask

    lens, D, kw, causal = CASES[name]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(sum(lens), 2048 // D, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(4))
    mask, ms = Mask(-1, 0 if causal else -1), (max(lens), max(lens))
    out, lse = prefill_forward(q, k, v, mask=mask, scale=D ** -0.5, cu_seqlens=(cu, cu), max_seqlen=ms)
    cfg = BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True, **kw)
    grads, kept = {}, gb.PACKED
    for packed in (False, True):
        gb.PACKED = packed
        grads[packed] = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=D ** -0.5, cu_seqlens=(cu, cu),
                                         max_seqlen=ms, config=cfg)
        torch.cuda.synchronize()
    gb.PACKED = kept
    rel = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(grads[True], grads[False])]
    print(f"{name}: ran; max rel. diff to the Triton kernels (dq, dk, dv) {[f'{r:.1e}' for r in rel]}", flush=True)


MIXED = [1000, 257, 1792, 63, 700, 1, 1500, 900, 1200, 400, 1024, 1100, 800, 600, 1300, 1280]


def timing(D: int, causal: bool) -> list[dict]:
    """The backward's time on one head dim and mask, every layout of the module docstring."""
    import time
    from functools import partial

    import torch
    import triton

    from attnlab.gpu import prefill_backward, prefill_forward
    from attnlab.gpu import prefill_gluon_bwd as gb
    from attnlab.gpu.config import default_bwd_config
    from attnlab.variants import Mask

    H, scale, mask = 2048 // D, D ** -0.5, Mask(-1, 0 if causal else -1)
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []

    def bench(name, call, flops):
        call()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(call, warmup=10, rep=80)
        # the host's time per call: 20 calls queued without waiting (a host slower than the GPU shows here, and
        # in do_bench's time too)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            call()
        host = (time.perf_counter() - t0) / 20 * 1e3
        torch.cuda.synchronize()
        rows.append(dict(D=D, causal=causal, layout=name, ms=ms, tflops=flops / ms * 1e-9, host_ms=host))
        print(f"| {D} | {causal} | {name} | {ms:.3f} | {rows[-1]['tflops']:.0f} | {host:.3f} |", flush=True)

    def pairs(lens):  # visible (row, key) pairs, causal bottom-right
        return sum(n * (n + 1) // 2 if causal else n * n for n in lens)

    dense = [torch.randn(16, H, 1024, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4)]
    q, k, v, do = dense
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
    cfg = default_bwd_config(D, causal, q.device, 1024)
    flops = 2.5 * 4 * pairs([1024] * 16) * D * H
    keep, kept_packed = (gb.LSE_BY_TMA, gb.DQ_PERMUTED), gb.PACKED
    for name, lse_tma, perm in (("dense, as shipped", True, True), ("dense, L2 loaded, dQ rows", False, False)):
        gb.LSE_BY_TMA, gb.DQ_PERMUTED = lse_tma, perm
        bench(name, partial(prefill_backward, do, q, k, v, out, lse, mask=mask, scale=scale, config=cfg), flops)
    gb.LSE_BY_TMA, gb.DQ_PERMUTED = keep
    # the same dense call on a model's (B, N, H, D) projections, strided as packed tensors are (rows H·D apart)
    q, k, v, do = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in dense)
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
    bench("dense, model layout", partial(prefill_backward, do, q, k, v, out, lse, mask=mask, scale=scale, config=cfg),
          flops)
    for label, lens in (("16 x 1024", [1024] * 16), ("mixed", MIXED)):
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        q, k, v, do = (torch.randn(sum(lens), H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                       for _ in range(4))
        ms_ = (max(lens), max(lens))
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=(cu, cu), max_seqlen=ms_)
        grads = {}
        for kernel, packed in (("packed Gluon", True), ("Triton kernels", False)):
            gb.PACKED = packed
            call = partial(prefill_backward, do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=(cu, cu),
                           max_seqlen=ms_)
            ran, real = [], gb.gluon_backward
            gb.gluon_backward = lambda *a, _ran=ran, _real=real, **kw: _ran.append(1) or _real(*a, **kw)
            grads[packed] = call()
            gb.gluon_backward = real
            bench(f"{label}, {kernel}", call, 2.5 * 4 * pairs(lens) * D * H)
            rows[-1]["gluon_ran"] = bool(ran)
        rows[-2]["max_rel_diff"] = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                                       for a, b in zip(grads[True], grads[False]))
        print(f"  ({label}: the Gluon kernel ran {rows[-2]['gluon_ran']}, the Triton row's {rows[-1]['gluon_ran']}; "
              f"max rel. diff of the gradients {rows[-2]['max_rel_diff']:.1e})", flush=True)
    gb.PACKED = kept_packed  # (the module's switch as it was)
    return rows


DET_VARIANTS = (  # name: (deterministic, gluon_backward keywords, module switches)
    ("default", False, {}, {}),
    ("default, staggered walks", False, dict(rotate=True), {}),
    ("default, unstaggered walks", False, dict(rotate=False), {}),
    ("default, unstaggered, last first", False, dict(rotate=False, _last_first=True), {}),
    ("deterministic", True, {}, {}),
    ("deterministic, writer at 48 registers", True, {}, dict(DET_WRITER_REGS=48)),
    ("deterministic, turns waited for first", True, {}, dict(DET_EARLY_TURN=True)),
    ("deterministic, no turns (measurement)", True, dict(_ablate=8), {}),
    ("deterministic, staggered walks, turns in arrival order", True, {}, dict(PACKED_DET_ROTATE=True)),
    ("deterministic, Triton kernels", True, {}, dict(PACKED_DET=())),
    ("default, ZERO_PAST on", False, {}, dict(ZERO_PAST=True)))


def det_timing(D: int, rounds: int, skip: tuple[str, ...] = ()) -> list[dict]:
    """The deterministic packed backward taken apart (the module docstring's --det), but the variants whose names
    hold one of ``skip``."""
    import statistics
    from functools import partial

    import torch
    import triton

    from attnlab.gpu import prefill_backward, prefill_bwd, prefill_forward
    from attnlab.gpu import prefill_gluon_bwd as gb
    from attnlab.variants import Mask

    H, scale, mask = 2048 // D, D ** -0.5, Mask(-1, 0)
    from variants import doc_lengths  # (this folder's benchmark: its packed batch)

    lens = doc_lengths(16384)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(2)
    q, k, v, do = (torch.randn(sum(lens), H, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    ms_ = (max(lens), max(lens))
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=(cu, cu), max_seqlen=ms_)
    flops = 2.5 * 4 * sum(n * (n + 1) // 2 for n in lens) * D * H
    real = gb.gluon_backward
    variants = [v for v in DET_VARIANTS if not any(x in v[0] for x in skip)]
    times = {name: [] for name, *_ in variants}
    extra = {}

    def call(det):
        return prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=(cu, cu), max_seqlen=ms_,
                                deterministic=det)

    for r in range(rounds):
        for name, det, kw, switches in variants:
            kept = {n: getattr(gb, n) for n in switches}
            ran = []
            gb.gluon_backward = lambda *a, _kw=kw, _ran=ran, **k_: _ran.append(1) or real(*a, **(k_ | _kw))
            for n, val in switches.items():
                setattr(gb, n, val)
            prefill_bwd._CALL_PLANS.clear(), gb._PLANS.clear()
            try:
                grads = call(det)
                torch.cuda.synchronize()
                try:  # GPU time only: the call replayed from a CUDA graph
                    ms = triton.testing.do_bench_cudagraph(partial(call, det), rep=60)
                    how = "graph"
                except Exception:  # (a call that cannot be captured: timed as called)
                    torch.cuda.synchronize()
                    ms = triton.testing.do_bench(partial(call, det), warmup=10, rep=60)
                    how = "eager"
                times[name].append(ms)
                if r == 0:
                    ref = extra.setdefault("_ref", grads)
                    extra[name] = dict(gluon_ran=bool(ran), timed=how, max_rel_diff=max(
                        ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                        for a, b in zip(grads, ref)))
                    if det and bool(ran) and not kw:  # the ordered build's counters, one untimed call
                        sem = []
                        prefill_bwd._CALL_PLANS.clear(), gb._PLANS.clear()  # (through gluon_backward, not a plan)
                        gb.gluon_backward = lambda *a, _sem=sem, **k_: real(*a, **(k_ | dict(_sem_out=_sem)))
                        call(det)
                        torch.cuda.synchronize()
                        extra[name]["sem"] = gb.sem_stats(sem[0])
                        again = call(det)
                        extra[name]["bit_identical"] = all(torch.equal(a, b) for a, b in zip(grads, again))
            finally:
                gb.gluon_backward = real
                for n, val in kept.items():
                    setattr(gb, n, val)
                prefill_bwd._CALL_PLANS.clear(), gb._PLANS.clear()
            print(f"  round {r + 1}: {name}: {times[name][-1]:.3f} ms", flush=True)
    rows = []
    base = statistics.median(times["default"])
    for name, *_ in variants:
        ms = statistics.median(times[name])
        rows.append(dict(D=D, variant=name, ms=ms, ms_rounds=times[name], tflops=flops / ms * 1e-9,
                         x_default=base / ms, **extra.get(name, {})))
    return rows


def det_report(rows: list[dict]) -> str:
    """The --det table of recorded rows."""
    lines = ["| D | variant | backward ms (median) | rounds | TFLOP/s | × default | Gluon ran | timed | max rel. diff | "
             "counters |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sem = r.get("sem")
        sem = f"{sem['waits']} waits, {sem['polls']} polls, {sem['given_up']} given up" if sem else ""
        if "bit_identical" in r:
            sem += f"; bit-identical {r['bit_identical']}"
        lines.append(f"| {r['D']} | {r['variant']} | {r['ms']:.3f} | {' / '.join(f'{t:.3f}' for t in r['ms_rounds'])} "
                     f"| {r['tflops']:.0f} | {r['x_default']:.3f} | {r.get('gluon_ran', '')} | {r.get('timed', '')} "
                     f"| {r.get('max_rel_diff', float('nan')):.1e} | {sem} |")
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    """The --timing table of recorded rows (the host column where the run measured it)."""
    host = any("host_ms" in r for r in rows)
    lines = ["| D | causal | layout | backward ms | TFLOP/s |" + (" host ms per call |" if host else ""),
             "|---|---|---|---|---|" + ("---|" if host else "")]
    for r in rows:
        line = f"| {r['D']} | {r['causal']} | {r['layout']} | {r['ms']:.3f} | {r['tflops']:.0f} |"
        lines.append(line + (f" {r['host_ms']:.3f} |" if host else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=list(CASES))
    ap.add_argument("--timeout", type=float, default=40.0)
    ap.add_argument("--timing", action="store_true", help="time the layouts of the module docstring")
    ap.add_argument("--D", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--json", help="write the --timing rows here")
    ap.add_argument("--report", metavar="JSON", help="print the table of a recorded --timing or --det run")
    ap.add_argument("--det", action="store_true", help="take the deterministic packed backward apart (docstring)")
    ap.add_argument("--rounds", type=int, default=3, help="--det: rounds of every variant in turn")
    ap.add_argument("--skip", nargs="*", default=[], help="--det: leave out the variants whose names hold these")
    args = ap.parse_args(argv)
    if args.report:
        import json

        with open(args.report) as f:
            rows = json.load(f)
        print(det_report(rows) if rows and "variant" in rows[0] else report(rows))
        return 0
    if args.det:
        import json

        rows = [r for D in args.D for r in det_timing(D, args.rounds, tuple(args.skip))]
        print(det_report(rows), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.timing:
        import json

        print("| D | causal | layout | backward ms | TFLOP/s | host ms per call |\n|---|---|---|---|---|---|", flush=True)
        rows = [r for D in args.D for causal in (True, False) for r in timing(D, causal)]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.case:
        run_case(args.case)
        return 0
    for name in CASES:
        try:
            res = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True,
                                 timeout=args.timeout)
            line = res.stdout.strip().splitlines()[-1:] or [f"{name}: failed: " + res.stderr.strip().splitlines()[-1]]
            print(line[0], flush=True)
        except subprocess.TimeoutExpired:
            print(f"{name}: no answer in {args.timeout:.0f} s (a hang?)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
