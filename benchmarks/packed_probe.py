"""Which part of the Gluon backward's packed-batch build fails on a GPU: each case in a process of its own (an
illegal instruction ends the CUDA context), against the Triton kernels' gradients of the same call.

    python benchmarks/packed_probe.py            # every case, 40 s each
    python benchmarks/packed_probe.py --case one-sequence-whole-blocks
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
    grads = {}
    for packed in (False, True):
        gb.PACKED = packed
        grads[packed] = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=D ** -0.5, cu_seqlens=(cu, cu),
                                         max_seqlen=ms, config=cfg)
        torch.cuda.synchronize()
    rel = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(grads[True], grads[False])]
    print(f"{name}: ran; max rel. diff to the Triton kernels (dq, dk, dv) {[f'{r:.1e}' for r in rel]}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=list(CASES))
    ap.add_argument("--timeout", type=float, default=40.0)
    args = ap.parse_args(argv)
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
