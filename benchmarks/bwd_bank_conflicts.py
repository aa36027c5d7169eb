"""Shared-memory bank conflicts of the Gluon backward's per-step stores, computed by the compiler (no GPU).

Gluon's ``gl.bank_conflicts(register type, shared type)`` gives, for a store of a register tensor into a
shared-memory tile, the excess accesses per wavefront. This script asks it for the stores the backward
makes every step: the dSᵀ tile (bf16, Sᵀ's accumulator layout, 128-byte swizzle), the float32 dQ tile
(the dQ product's accumulator layout) row-major under each swizzle its TMA reduction could use and in
register order (the kernel's default), and the epilogue's dK/dV tiles. Builds for sm_90 with the
installed triton (Gluon needed; no GPU).

    python benchmarks/bwd_bank_conflicts.py
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon._runtime import GluonASTSource
    except ImportError as e:
        print(f"bwd_bank_conflicts: this triton has no Gluon ({e})", file=sys.stderr)
        return 2

    @gluon.jit
    def probe(N: gl.constexpr, SW: gl.constexpr, BITS: gl.constexpr, CASE: gl.constexpr, PERM: gl.constexpr):
        acc: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
        dtype: gl.constexpr = gl.float32 if BITS == 32 else gl.bfloat16
        x = gl.zeros([64, N], dtype, layout=acc)
        if PERM:  # the kernel's register-order tile (prefill_gluon_bwd.DQ_PERMUTED): rows of 32 floats
            y = x.reshape([4, 2, 8, N // 8, 4, 2]).permute((3, 0, 2, 4, 1, 5)).reshape([2 * N, 32])
            sm = gl.allocate_shared_memory(dtype, [2 * N, 32],
                                           gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=BITS, rank=2))
            gl.static_print("@", CASE, gl.bank_conflicts(y.type, sm.type))
        else:
            sm = gl.allocate_shared_memory(dtype, [64, N], gl.NVMMASharedLayout(swizzle_byte_width=SW,
                                                                                element_bitwidth=BITS, rank=2))
            gl.static_print("@", CASE, gl.bank_conflicts(x.type, sm.type))

    cases = [("dSᵀ tile (64 keys × 64 rows, bf16)", 64, 128, 16),
             ("dK/dV epilogue (64 × 64, bf16)", 64, 128, 16), ("dK/dV epilogue (64 × 128, bf16)", 128, 128, 16)]
    cases = [c + (False,) for c in cases]
    cases += [(f"dQ tile (64 × {n}, float32), {sw}-byte swizzle", n, sw, 32, False) for n in (32, 64)
              for sw in (128, 64, 32, 0)]
    cases += [(f"dQ tile (64 × {n}, float32) in register order, rows of 32, 128-byte swizzle (the default)", n, 128, 32,
               True) for n in (32, 64)]
    print("| store | excess accesses per wavefront |")
    print("|---|---|")
    import contextlib
    import io
    for case, (label, n, sw, bits, perm) in enumerate(cases):  # CASE: a build of its own (the cache would skip the print)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            triton.compile(GluonASTSource(probe, dict.fromkeys(("N", "SW", "BITS", "CASE", "PERM"), "constexpr"),
                                          {"N": n, "SW": sw, "BITS": bits, "CASE": case, "PERM": perm}, {}),
                           target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
        line = next((ln for ln in buf.getvalue().splitlines() if ln.startswith("@")), None)
        if line is None:  # a cached build prints nothing: say so rather than guess
            print(f"| {label} | (cached build: run with TRITON_ALWAYS_COMPILE=1) |")
            continue
        print(f"| {label} | {line.split()[-1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
