"""Where a backward call's host time goes: cProfile over repeated calls of ``prefill_backward`` on one shape
(the GPU work queues behind; the profile is the host's), the top entries by own time.

    python benchmarks/host_profile.py --D 128 --packed gluon     # the mixed packed batch of packed_probe.py
    python benchmarks/host_profile.py --D 128 --dense            # (16, H, 1024, D), the same work dense
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main(argv=None) -> int:
    import torch

    from attnlab.gpu import prefill_backward, prefill_forward
    from attnlab.gpu import prefill_gluon_bwd as gb
    from attnlab.variants import Mask

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--packed", choices=["gluon", "triton"], default="gluon")
    ap.add_argument("--dense", action="store_true")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    from packed_probe import MIXED

    D, H = args.D, 2048 // args.D
    mask, scale = Mask(-1, 0), args.D ** -0.5
    if args.dense:
        q, k, v, do = (torch.randn(16, H, 1024, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        kw = {}
    else:
        cu = torch.tensor([0] + torch.tensor(MIXED).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        q, k, v, do = (torch.randn(sum(MIXED), H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        kw = dict(cu_seqlens=(cu, cu), max_seqlen=(max(MIXED), max(MIXED)))
        gb.PACKED = args.packed == "gluon"
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, **kw)

    def call():
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, **kw)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.calls):
        call()
    host = (time.perf_counter() - t0) / args.calls * 1e3
    torch.cuda.synchronize()
    print(f"host ms per call, unprofiled: {host:.3f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
