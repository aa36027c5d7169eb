"""The Gluon backward with its float32 dQ staging tile in other shared-memory swizzles (H200).

``ncu`` on transformers' training-step shape (benchmarks/device_ncu_bwd.sh) counted 17.6 M shared-store
bank conflicts in attnlab's Gluon backward against 1.3 M in cuDNN's, for the same 70 M store wavefronts.
The dQ tile is staged in shared memory once per step before its TMA reduction; this script builds the
kernel with that tile (and its descriptor) swizzled on 128 bytes (Triton's default), 64, 32 or not at all
(``prefill_gluon_bwd.DQ_SWIZZLE``), checks the gradients against the default build's, and times the
backward (``torch.autograd.grad`` of one ``flash_attention`` call, ``do_bench`` median) on the step's shape
(GQA 32/8, D = 64, causal, 8K tokens, the model's layout) and at D = 128 (16 heads, 16K, causal).

    python benchmarks/bwd_dq_layout.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

SHAPES = [  # (B, H, Hkv, N, D, model layout)
    (1, 32, 8, 8192, 64, True),
    (1, 16, 16, 16384, 128, False),
]
SWIZZLES = (None, 64, 32, 0)


def inputs(B, H, Hkv, N, D, model_layout, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(heads):
        if model_layout:  # (B, N, heads, D) seen as (B, heads, N, D)
            return torch.randn(B, N, heads, D, generator=g, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(B, heads, N, D, generator=g, device="cuda", dtype=torch.bfloat16)

    q, k, v = (make(n).requires_grad_() for n in (H, Hkv, Hkv))
    return q, k, v, make(H)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if not torch.cuda.is_available():
        print("bwd_dq_layout: needs a CUDA GPU (sm_90)", file=sys.stderr)
        return 2
    import triton

    import attnlab
    from attnlab.gpu import prefill_gluon_bwd as gb

    rows = []
    for shape in SHAPES:
        q, k, v, do = inputs(*shape)
        B, H, Hkv, N, D, _ = shape
        flops = 2.5 * 4 * B * H * D * N * (N + 1) / 2  # the backward's standard count, causal
        ref = None
        for sw in SWIZZLES:
            gb.DQ_SWIZZLE = sw
            try:
                out = attnlab.flash_attention(q, k, v, causal=True)

                def bwd(out=out, q=q, k=k, v=v, do=do):
                    return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

                grads = bwd()
                if ref is None:
                    ref = grads
                err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(grads, ref))
                ms = triton.testing.do_bench(bwd, warmup=25, rep=200)
                row = dict(B=B, H=H, Hkv=Hkv, N=N, D=D, swizzle=sw, ms=ms, tflops=flops / ms / 1e9, rel_diff=err)
            except Exception as e:  # a build the descriptor or the compiler refuses
                row = dict(B=B, H=H, Hkv=Hkv, N=N, D=D, swizzle=sw, error=f"{type(e).__name__}: {str(e)[:200]}")
            finally:
                gb.DQ_SWIZZLE = None
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("| D | H/Hkv | N | dQ swizzle | backward ms | TFLOP/s | rel. diff to default |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        sw = "default (128)" if r["swizzle"] is None else r["swizzle"]
        if "ms" in r:
            print(f"| {r['D']} | {r['H']}/{r['Hkv']} | {r['N']} | {sw} | {r['ms']:.3f} | {r['tflops']:.0f} | {r['rel_diff']:.1e} |")
        else:
            print(f"| {r['D']} | {r['H']}/{r['Hkv']} | {r['N']} | {sw} | {r['error']} | | |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
