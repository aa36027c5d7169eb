"""The GPU test of bad packed lengths (``tests/gpu/test_prefill_variants.py::test_gpu_bad_lengths_never_crash``),
its five cases run ``--rounds`` times in a row through the library's packed forward and backward, for tools that
watch every access (``compute-sanitizer --tool memcheck``, ``--tool racecheck``) or to repeat a rare fault.

``--forward dynamic`` installs the Gluon forward's packed entry (the persistent build taking its tiles from a
counter, ``prefill_gluon.PACKED`` on); ``triton`` runs the Triton forward. Each case's outputs are checked as the
test checks them (no NaN read from the guards around the inputs, the guards around the outputs untouched); the
device is synchronised after each case, so a fault names its case.

    compute-sanitizer --tool memcheck python benchmarks/bad_lengths_probe.py --forward dynamic --rounds 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forward", choices=["dynamic", "triton"], default="dynamic")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--scale", type=int, default=64, help="the cases' lengths times this (the test's: 64)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bad_lengths_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.scale < 1:
        print("bad_lengths_probe: --rounds and --scale must be at least 1", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.gpu import test_prefill_variants as T

    from attnlab.gpu import prefill_gluon

    prefill_gluon.PACKED = args.forward == "dynamic"
    t0, sc = time.perf_counter(), args.scale
    for r in range(args.rounds):
        for i, (cu_q, cu_k, ms) in enumerate(T.BAD_CU):
            cq, ck = ([x * sc if abs(x) < 2**30 else x for x in c] for c in (cu_q, cu_k))
            T._run_bad_lengths(cq, ck, tuple(m * sc for m in ms), total_q=40 * sc, total_k=50 * sc, H=4, Hkv=2,
                               D=128, configs=(None, None), plain=True)
            torch.cuda.synchronize()
            print(f"bad_lengths_probe: {args.forward} round {r} case {i} ok ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
    print(f"bad_lengths_probe: {args.forward}: {args.rounds} rounds of {len(T.BAD_CU)} cases, no fault")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
