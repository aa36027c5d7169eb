"""The Gluon backward's float32 dQ staging tile in other orders and swizzles, against cuDNN (H200).

``ncu`` on transformers' training-step shape (benchmarks/device_ncu_bwd.sh) counted 17.6 M shared-store
bank conflicts in attnlab's Gluon backward against 1.3 M in cuDNN's, for the same 70 M store wavefronts,
and 8.5 M shared-store instructions against 4.8 M. The dQ tile is staged in shared memory once per step
before its TMA reduction. Layouts timed here:

* ``default``: the library's build — the tile in the accumulator's register order
  (``prefill_gluon_bwd.DQ_PERMUTED``: each thread stores 16 contiguous bytes at a time, no bank
  conflicts, one TMA reduction per tile), and each step's rows of L₂ and Dᵢ brought by the loader's TMA
  (``LSE_BY_TMA``);
* ``tiles``: the same tile, L₂ and Dᵢ loaded by the consumers from global memory;
* ``rows`` (row-major, 128-byte swizzle, L₂ and Dᵢ loaded: the build before both) and ``rows-32``
  (row-major, 32-byte swizzle: conflict-free, narrower TMA boxes; ``prefill_gluon_bwd.DQ_SWIZZLE``; not in
  the default list);
* ``det-gluon`` / ``det-triton`` (not in the default list): ``deterministic=True`` calls, on the Gluon
  kernel's ordered dQ additions (``prefill_gluon_bwd.DETERMINISTIC`` on) or on the Triton kernels;
  ``det-gluon-hf`` / ``det-gluon-hm``: det-gluon with the programs numbered head first (a wave holds every
  head's key blocks) or head by head, whichever the library would pick; ``det-gluon-lpt``: head by head with
  causal key blocks launched first first (the longest walks first; a turn may then wait for a program
  launched after it: measurement only, on shapes whose key blocks of one head fit on the GPU at once);
  ``default-hm`` / ``default-hf``: the default build numbered head by head or head first; ``default-kv2`` /
  ``default-kv4``: the default build with each K/V head read by 2 or 4 programs (GQA shapes only);
  ``det-gluon-kv1`` / ``kv2`` / ``kv4``: det-gluon with each K/V head read by 1, 2 or 4 programs (``kv_split``:
  fewer query heads per program, their dK, dV summed; GQA shapes only; ``det-gluon`` is the library's pick);
* ``cudnn``: SDPA's cuDNN backward of the same call, the peer.

Each build's gradients are compared with the default build's; the backward (``torch.autograd.grad`` of one
call, ``do_bench`` median) is timed in ``--rounds`` alternating rounds on transformers' step shape (GQA 32/8,
D = 64, causal, 8K tokens, the model's layout) and at 16K tokens with D = 64 and 128, causal and not.

    python benchmarks/bwd_dq_layout.py [--rounds 2] [--json out.json]
    python benchmarks/bwd_dq_layout.py --report benchmarks/data/bwd-dq-layout-h200-run3.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

SHAPES = [  # (B, H, Hkv, N, D, causal, model layout)
    (1, 32, 8, 8192, 64, True, True),
    (1, 32, 32, 16384, 64, True, False),
    (1, 32, 32, 16384, 64, False, False),
    (1, 16, 16, 16384, 128, True, False),
    (1, 16, 16, 16384, 128, False, False),
]
# (DQ_PERMUTED, DQ_SWIZZLE, LSE_BY_TMA)
LAYOUTS = {"default": (True, None, True), "tiles": (True, None, False), "rows": (False, None, False),
           "rows-32": (False, 32, False)}
# deterministic calls: the Gluon kernel's ordered dQ additions (DETERMINISTIC on), or the Triton kernels
DETERMINISTIC = {"det-gluon": True, "det-triton": False, "det-gluon-hf": True, "det-gluon-hm": True,
                 "det-gluon-lpt": True, "det-gluon-kv1": True, "det-gluon-kv2": True, "det-gluon-kv4": True}
# the Gluon kernel's programs numbered head first or head by head, whatever the library picks; det-gluon-lpt:
# head by head with causal key blocks launched first first (longest walks first; measurement only)
GLUON_ARGS = {"det-gluon-hf": dict(heads_first=True), "det-gluon-hm": dict(heads_first=False),
              "det-gluon-lpt": dict(heads_first=False, _det_last_first=False),
              "det-gluon-kv1": dict(kv_split=1), "det-gluon-kv2": dict(kv_split=2), "det-gluon-kv4": dict(kv_split=4),
              "default-hm": dict(heads_first=False), "default-hf": dict(heads_first=True),
              "default-kv2": dict(kv_split=2), "default-kv4": dict(kv_split=4)}


def inputs(B, H, Hkv, N, D, model_layout, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(heads):
        if model_layout:  # (B, N, heads, D) seen as (B, heads, N, D)
            return torch.randn(B, N, heads, D, generator=g, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(B, heads, N, D, generator=g, device="cuda", dtype=torch.bfloat16)

    q, k, v = (make(n).requires_grad_() for n in (H, Hkv, Hkv))
    return q, k, v, make(H)


def _backward(q, k, v, do, causal, provider):
    import attnlab
    from attnlab.gpu import prefill_gluon_bwd as gb

    if provider == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                   enable_gqa=q.shape[1] != k.shape[1])
    else:
        out = attnlab.flash_attention(q, k, v, causal=causal, deterministic=provider in DETERMINISTIC)

    def bwd():
        before, kernel = gb.DETERMINISTIC, gb.gluon_backward
        if provider in DETERMINISTIC:  # (the switch is read as the backward runs)
            gb.DETERMINISTIC = DETERMINISTIC[provider]
        if provider in GLUON_ARGS:
            gb.gluon_backward = lambda *a, **kw: kernel(*a, **{**kw, **GLUON_ARGS[provider]})
        try:
            return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        finally:
            gb.DETERMINISTIC, gb.gluon_backward = before, kernel

    return bwd


def _wait_stats(bwd) -> dict:
    """One more backward of a det-gluon call with the ordered waits' counters read back
    (``prefill_gluon_bwd.sem_stats``): additions, waits that polled, their polls, waits given up."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    sems, kernel = [], gb.gluon_backward
    gb.gluon_backward = lambda *a, **kw: kernel(*a, **kw, _sem_out=sems)
    try:
        bwd()
    finally:
        gb.gluon_backward = kernel
    return gb.sem_stats(sems[0]) if sems else {}


def wait_table(rows: list[dict]) -> list[str]:
    """The ordered waits of the det-gluon rows that read them (one per shape and layout: the first round's)."""
    out = ["| D | H/Hkv | N | causal | layout | dQ tile additions | waits that polled | polls | polls per addition "
           "| given up |", "|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        if "additions" not in r:
            continue
        key = (r["D"], r["H"], r["Hkv"], r["N"], r["causal"], r["layout"])
        if key in seen:
            continue
        seen.add(key)
        per = r["polls"] / r["additions"] if r["additions"] else 0.0
        out.append(f"| {r['D']} | {r['H']}/{r['Hkv']} | {r['N']} | {r['causal']} | {r['layout']} | {r['additions']} | "
                   f"{r['waits']} | {r['polls']} | {per:.2f} | {r['given_up']} |")
    return out if len(out) > 2 else []


def table(rows: list[dict]) -> list[str]:
    """The markdown table of a run's rows: per shape and layout, the backward's ms in each round, the best
    round's TFLOP/s and the largest relative difference of the gradients to the default build's."""
    out = ["| D | H/Hkv | N | causal | layout | backward ms by round | TFLOP/s (best) | rel. diff to default |",
           "|---|---|---|---|---|---|---|---|"]
    # (run 1's rows: causal only, one row-major tile per swizzle)
    rows = [r if "layout" in r else dict(r, causal=True, layout="rows" if r.get("swizzle") is None
                                         else f"rows-{r['swizzle']}") for r in rows]
    keys = []
    for r in rows:
        key = (r["D"], r["H"], r["Hkv"], r["N"], r["causal"], r["layout"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        rs = [r for r in rows if (r["D"], r["H"], r["Hkv"], r["N"], r["causal"], r["layout"]) == key]
        ok = [r for r in rs if "ms" in r]
        D, H, Hkv, N, causal, name = key
        if not ok:
            out.append(f"| {D} | {H}/{Hkv} | {N} | {causal} | {name} | {rs[0]['error']} | | |")
            continue
        diff = max((r["rel_diff"] for r in ok if r["rel_diff"] is not None), default=None)
        times = " / ".join(f"{r['ms']:.3f}" for r in ok)
        diff = "—" if diff is None or name == "cudnn" else f"{diff:.1e}"
        out.append(f"| {D} | {H}/{Hkv} | {N} | {causal} | {name} | {times} | {max(r['tflops'] for r in ok):.0f} | {diff} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of every layout (default 2)")
    ap.add_argument("--layouts", nargs="+", default=["default", "tiles", "rows", "cudnn"],
                    choices=[*LAYOUTS, *DETERMINISTIC, *GLUON_ARGS, "cudnn"])
    ap.add_argument("--shapes", nargs="+", type=int, metavar="I",
                    help=f"only these of the shapes, by index (0-{len(SHAPES) - 1}; default all): {SHAPES}")
    ap.add_argument("--report", type=Path, help="print the table of a run's JSON (no GPU needed)")
    args = ap.parse_args(argv)
    if args.shapes is not None and any(not 0 <= i < len(SHAPES) for i in args.shapes):
        ap.error(f"--shapes takes indices 0-{len(SHAPES) - 1}, got {args.shapes}")
    if args.report is not None:
        try:
            data = json.loads(args.report.read_text())
            lines = table(data["rows"] if isinstance(data, dict) else data)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"bwd_dq_layout: cannot read {args.report}: {e}", file=sys.stderr)
            return 2
        if isinstance(data, dict):
            print(f"{data.get('date')}, {data.get('gpu')}, torch {data.get('torch')}, triton {data.get('triton')}")
        print("\n".join(lines))
        waits = wait_table(data["rows"] if isinstance(data, dict) else data)
        if waits:
            print("\n" + "\n".join(waits))
        return 0
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not torch.cuda.is_available():
        print("bwd_dq_layout: needs a CUDA GPU (sm_90)", file=sys.stderr)
        return 2
    import datetime

    import triton

    from attnlab.gpu import prefill_gluon_bwd as gb

    rows = []
    for shape in (SHAPES if args.shapes is None else [SHAPES[i] for i in args.shapes]):
        B, H, Hkv, N, D, causal, model = shape
        q, k, v, do = inputs(B, H, Hkv, N, D, model)
        flops = 2.5 * 4 * B * H * D * N * N * (0.5 if causal else 1.0)  # the backward's standard count
        ref = None
        for rnd in range(args.rounds):
            for name in args.layouts:
                perm, sw, lse = LAYOUTS.get(name, (True, None, True))
                gb.DQ_PERMUTED, gb.DQ_SWIZZLE, gb.LSE_BY_TMA = perm, sw, lse
                try:
                    bwd = _backward(q, k, v, do, causal, name)
                    grads = bwd()
                    if ref is None and name == "default":
                        ref = grads
                    err = None if ref is None else max(
                        ((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(grads, ref))
                    ms = triton.testing.do_bench(bwd, warmup=25, rep=200)
                    row = dict(B=B, H=H, Hkv=Hkv, N=N, D=D, causal=causal, layout=name, round=rnd, ms=ms,
                               tflops=flops / ms / 1e9, rel_diff=err)
                    if name.startswith("det-gluon") and rnd == 0:  # where the ordered additions waited, and how long
                        row.update(_wait_stats(bwd))
                except Exception as e:  # a build the descriptor or the compiler refuses
                    row = dict(B=B, H=H, Hkv=Hkv, N=N, D=D, causal=causal, layout=name, round=rnd,
                               error=f"{type(e).__name__}: {str(e)[:200]}")
                finally:
                    gb.DQ_PERMUTED, gb.DQ_SWIZZLE, gb.LSE_BY_TMA = True, None, True
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n".join(table(rows)))
    print("\n".join(wait_table(rows)))
    if args.json:
        args.json.write_text(json.dumps(dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(),
                                             torch=torch.__version__, triton=triton.__version__, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
