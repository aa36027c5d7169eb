"""The persistent warp-specialised Gluon forward's sm_90 builds, static and dynamic (tiles from a counter), and where
they spill: for each combination of head dim, rows a tile (128: two consumer warp groups; 192: three), causal or not,
dense or packed, the registers a thread, the spill stack (bytes a thread) and the spill reloads (LDL) inside each SASS
loop that holds the products, built on any machine with this triton's own ptxas and cuobjdump (no GPU). The spills
depend on the triton that builds them: run it under each triton the GPU machines use.

    python benchmarks/sm90_spills.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# (D, block_m, causal, packed): the dynamic build's CPU test's six combinations, and the two 192-row ones it leaves out
COMBOS = ((128, 128, False, False), (128, 128, True, True), (64, 128, True, False), (64, 128, False, True),
          (64, 192, True, True), (64, 192, False, False), (64, 192, True, False), (64, 192, False, True))


def report(combos=COMBOS) -> dict:
    """Each combination's static and dynamic builds: ``regs``, ``stack`` and ``loop_ldl`` (the spill reloads of each
    product loop, in address order); None for a build whose listing this triton cannot print (no cuobjdump)."""
    import torch
    import triton

    from attnlab.gpu import prefill_gluon as G

    rows = []
    for D, block_m, causal, packed in combos:
        for dynamic in (False, True):
            rep = G.sm90_report(D, causal=causal, block_m=block_m, num_warps=4, warp_spec=True, dtype=torch.bfloat16,
                                persistent=True, packed=packed, dynamic=dynamic)
            rows.append(dict(D=D, block_m=block_m, causal=causal, packed=packed, dynamic=dynamic, regs=rep.get("regs"),
                             stack=rep.get("stack"),
                             loop_ldl=[lp["local_loads"] for lp in rep["loops"]] if "loops" in rep else None))
    return {"triton_version": triton.__version__, "rows": rows}


def markdown(rep: dict) -> str:
    out = [f"triton {rep['triton_version']}, bf16, 4 warps a consumer group, persistent", "",
           "| D | rows a tile | mask | batch | tiles | registers | stack bytes | spill reloads in the product loops |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rep["rows"]:
        out.append(f"| {r['D']} | {r['block_m']} | {'causal' if r['causal'] else 'full'} | "
                   f"{'packed' if r['packed'] else 'dense'} | {'counter' if r['dynamic'] else 'static'} | {r['regs']} | "
                   f"{r['stack']} | {r['loop_ldl']} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the report here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; choose another name")
    from attnlab.gpu import prefill_gluon

    if not prefill_gluon.HAVE_GLUON:
        print("sm90_spills.py: this triton has no Gluon", file=sys.stderr)
        return 2
    rep = report()
    print(markdown(rep))
    if args.json is not None:
        args.json.write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
