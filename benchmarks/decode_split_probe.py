"""A workload for a profiler: one decode shape called eagerly many times with the Triton or the Gluon split kernel
(``decode_config.GLUON_SPLIT``) and the merge kernel on every call, so that the two split kernels do the same work
and a profiler catching ``_decode_split`` sees only the kernel that differs. ``benchmarks/device_ncu_decode.sh``
runs it under ncu for both kernels.

    python benchmarks/decode_split_probe.py --kernel gluon --shape 1 64 8 8192 128 --calls 30
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("triton", "gluon"), default="triton")
    ap.add_argument("--shape", type=int, nargs=5, metavar=("B", "H", "HKV", "L", "D"), default=(1, 64, 8, 8192, 128))
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("decode_split_probe.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    import attnlab
    from attnlab.gpu import decode, decode_config, decode_plan

    B, H, Hkv, L, D = args.shape
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    decode_config.GLUON_SPLIT = args.kernel == "gluon"
    decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = 0, math.inf  # the merge kernel every call
    decode.clear_plans()
    for _ in range(args.calls):
        out = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.synchronize()
    plan = next(iter(decode_plan._PLANS.values()))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    print(f"kernel {plan.cfg.kernel}, {plan.num_splits} splits, max err {(out[0].float() - ref).abs().max().item():.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
