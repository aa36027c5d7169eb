"""Which part of the Gluon backward's packed-batch build fails on a GPU: each case in a process of its own (an
illegal instruction ends the CUDA context), against the Triton kernels' gradients of the same call.

    python benchmarks/packed_probe.py            # every case, 40 s each
    python benchmarks/packed_probe.py --case one-sequence-whole-blocks
    python benchmarks/packed_probe.py --timing --json out.json   # where the packed build's time goes
    python benchmarks/packed_probe.py --report out.json          # its table again

``--timing`` times the backward alone (do_bench medians, bf16, H·D = 2048, causal and not) on the same work
laid out four ways: dense (16, H, 1024, D) on the Gluon kernel as shipped; the same with L₂, Dᵢ loaded by the
consumers and dQ in row order (the packed build's first version); the same in a model's (B, N, H, D) layout
(rows H·D apart, as in packed tensors); 16 packed sequences of 1,024 on the packed build
and on the Triton kernels; and a mixed packed batch (256–1,792) on both.
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
    ap.add_argument("--report", metavar="JSON", help="print the table of a recorded --timing run")
    args = ap.parse_args(argv)
    if args.report:
        import json

        with open(args.report) as f:
            print(report(json.load(f)))
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
