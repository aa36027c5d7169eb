"""Where a backward call's host time goes: cProfile over repeated calls of ``prefill_backward`` on one shape
(the GPU work queues behind; the profile is the host's), the top entries by own time.

    python benchmarks/host_profile.py --D 128 --packed gluon     # the mixed packed batch of packed_probe.py
    python benchmarks/host_profile.py --D 128 --dense            # (16, H, 1024, D), the same work dense
    python benchmarks/host_profile.py --stub [--packed gluon]    # any machine: the Gluon path's Python alone

``--stub`` runs the Gluon backward's host path on small CPU tensors with every kernel launch replaced by a
no-op and the GPU checks answered yes (in a process without TRITON_INTERPRET, with a triton that has Gluon):
what the Python around the launches costs, which a GPU host pays on top of the launches themselves.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def stub_run(args) -> None:
    """The Gluon backward's host path with the launches stubbed (see the module docstring)."""
    import torch

    import attnlab.gpu.config as C
    import attnlab.gpu.decode_config as DC
    import attnlab.gpu.prefill_bwd as PB
    import attnlab.gpu.prefill_gluon as G
    import attnlab.gpu.prefill_gluon_bwd as GB
    from attnlab.variants import Mask

    torch.set_num_threads(1)
    PB.launch_kept = GB.launch_kept = GB.store_dq_tiles = lambda *a, **kw: None
    GB.HAVE_TMA_REDUCE = True
    G.gluon_supported = PB.tma_ok = lambda *a: True
    DC._sms = lambda index: 132
    D, H, N = args.D, 2, 256
    cfg = C._GLUON_BWD_128 if D == 128 else C._GLUON_BWD_64
    if args.dense:
        q, k, v, do, out = (torch.randn(1, H, N, D, dtype=torch.bfloat16) for _ in range(5))
        lse, kw = torch.randn(1, H, N), {}
    else:
        cu = torch.tensor([0, 100, N], dtype=torch.int32)
        q, k, v, do, out = (torch.randn(N, H, D, dtype=torch.bfloat16) for _ in range(5))
        lse, kw = torch.randn(H, N), dict(cu_seqlens=(cu, cu), max_seqlen=(156, 156))
        GB.PACKED = True

    def call():
        PB.prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=D ** -0.5, config=cfg, **kw)

    for _ in range(5):
        call()
    t0 = time.perf_counter()
    for _ in range(args.calls * 10):
        call()
    print(f"host µs per call, launches stubbed: {(time.perf_counter() - t0) / (args.calls * 10) * 1e6:.1f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls * 4):
        call()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumtime").print_stats(args.top)


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
    ap.add_argument("--stub", action="store_true", help="the Python alone, on the CPU (module docstring)")
    args = ap.parse_args(argv)
    if args.stub:
        stub_run(args)
        return 0
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
