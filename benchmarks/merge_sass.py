"""The decode merge kernels' sm_90 builds side by side: Triton's ``_decode_merge_kernel`` and Gluon's
``_decode_merge_gluon``, built on any machine (Triton's own ptxas and cuobjdump, no GPU) for one shape of a plan's merge
(``--rows`` query rows a program, ``--splits``, ``--head-dim``, bf16, 4 warps), their integer arguments specialised as
a call's are (D, the split count, H and the row count divisible by 16), and each build's make-up counted off its SASS:
instructions, global loads (scalar and 128-bit), stores, shared loads and stores, barriers, shuffles, the MUFU
(exponentials and logarithms) and the float multiplies and adds.

    python benchmarks/merge_sass.py [--rows 8] [--splits 16] [--head-dim 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

COUNTED = ("LDG", "STG", "LDS", "STS", "BAR", "SHFL", "LDL", "STL", "MUFU", "FFMA", "FMUL", "FADD")


def sass_counts(sass: str) -> dict:
    """The make-up of one SASS listing: ``instructions``, each class of ``COUNTED`` (the opcode before its first dot),
    and the global loads by width (``ldg_scalar``: 32-bit, ``ldg_128``)."""
    ops = re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T\d]\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M)
    by = collections.Counter(o.split(".")[0] for o in ops)
    ldg = [o for o in ops if o.startswith("LDG")]
    return {"instructions": len(ops), **{c: by[c] for c in COUNTED},
            "ldg_128": sum(".128" in o for o in ldg),
            "ldg_scalar": sum(not re.search(r"\.(64|128|U8|S8|U16|S16)\b", o) for o in ldg)}


def build(kernel: str, *, rows: int, splits: int, head_dim: int):
    """The sm_90 build of the ``kernel`` ("triton" or "gluon") merge kernel at one shape."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from attnlab.gpu import decode_gluon, decode_kernels

    const = dict(NQ=1, BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=triton.next_power_of_2(head_dim), PDL=False,
                 ROWS=rows, stride_od=1)
    ptrs = dict(O_PART="*fp32", LSE_PART="*fp32", OUT="*bf16", LSE="*fp32")
    if kernel == "gluon":
        from triton.experimental.gluon._runtime import GluonASTSource as Source
        fn = decode_gluon._decode_merge_gluon
    else:
        Source, fn = ASTSource, decode_kernels._decode_merge_kernel
    sig, const, attrs = decode_kernels.sm90_signature(fn, const, ptrs)
    for i, name in enumerate(fn.arg_names):  # (what Triton's specialisation finds of a 64/8-head call's integers)
        if name in ("D", "NUM_SPLITS", "H", "NUM_ROWS"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(Source(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def report(*, rows: int = 8, splits: int = 16, head_dim: int = 128) -> dict:
    """Both merge kernels' ``sass_counts`` at one shape, with the triton version; None for a kernel whose listing this
    triton cannot print (no cuobjdump)."""
    import triton

    from attnlab.gpu.prefill_gluon import cuobjdump

    out = {"triton_version": triton.__version__, "rows": rows, "splits": splits, "head_dim": head_dim}
    for kernel in ("triton", "gluon"):
        sass = cuobjdump(build(kernel, rows=rows, splits=splits, head_dim=head_dim), "-sass")
        out[kernel] = sass_counts(sass) if sass else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--splits", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--json", type=Path, help="write the report here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; choose another name")
    if min(args.rows, args.splits, args.head_dim) < 1:
        ap.error("--rows, --splits and --head-dim must be at least 1")
    from attnlab.gpu import decode_gluon

    if not decode_gluon.HAVE_GLUON:
        print("merge_sass.py: this triton has no Gluon", file=sys.stderr)
        return 2
    rep = report(rows=args.rows, splits=args.splits, head_dim=args.head_dim)
    keys = ["instructions", *COUNTED, "ldg_scalar", "ldg_128"]
    print("| kernel | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for kernel in ("triton", "gluon"):
        c = rep[kernel]
        print(f"| {kernel} | " + (" | ".join(str(c[k]) for k in keys) if c else "no cuobjdump") + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
