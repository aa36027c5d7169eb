"""Block-size sweep of the Triton prefill kernels under the variants (window, ALiBi, softcap) on a GPU.

The configuration tables of ``attnlab.gpu.config`` were swept on dense and causal calls. A window
changes the work per query block (W/Bc key blocks with two masked edges instead of a triangle), and
a score modification adds registers, so the best blocks may differ. For each variant, head dim and
pass, every candidate configuration is installed with ``attnlab.gpu.config.set_config`` and timed
on the shapes of ``benchmarks/variants.py`` (16K tokens, H·D = 2048, causal, bf16); TFLOP/s over the
visible pairs. The table's current choice is marked; ``--json`` keeps every row. A window's forward also
times the table's Gluon entry as a grid and as a persistent kernel, its tiles dealt out or taken from a
counter, on 128- and 192-row tiles (``GLUON_WINDOW_FWD_CANDIDATES``), and at D = 64 on 128 × 256 tiles
(``GLUON_LONG_KEYS_WINDOW``).

    python benchmarks/variants_sweep.py [--D 64 128] [--variants window alibi varlen] [--passes fwd fwd_bwd] [--json out.json]

``varlen`` sweeps the packed batch's own table entry (its longest document sets the length class);
``--packed-gluon`` sweeps instead the Gluon forward's packed entries (``GLUON_PACKED_FWD_CANDIDATES``: grid or
persistent, its tiles dealt out or taken from a counter, key blocks, ring depth) beside the Triton kernel's entry,
the forward only.

    python benchmarks/variants_sweep.py --variants varlen --passes fwd --packed-gluon --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

FWD_CANDIDATES = [  # (block_m, block_n, num_warps, num_stages, tma, warp_spec, maxnreg)
    (128, 64, 8, 3, False, False, None),
    (128, 128, 8, 3, False, False, None),
    (128, 64, 4, 3, False, False, None),
    (64, 64, 4, 3, False, False, None),
    (128, 64, 8, 3, True, False, None),
    (128, 128, 8, 3, True, False, None),
    (128, 64, 8, 2, True, True, None),
    (64, 128, 4, 3, False, False, None),
]
VARLEN_FWD_EXTRA = [  # short documents: smaller tiles, deeper pipelines (block_m, block_n, num_warps, num_stages)
    (64, 64, 4, 4),
    (64, 32, 4, 3),
    (64, 64, 8, 3),
    (128, 32, 8, 3),
]
VARLEN_BWD_EXTRA = [  # dQ by float32 atomics inside the dK/dV kernel: one kernel, 5 products per block pair, not 7
    (64, 128, 8, 3, 128, 64, 8, 3, True),
    (64, 64, 4, 3, 64, 64, 4, 3, True),
    (32, 128, 4, 3, 128, 32, 4, 3, True),
    (64, 128, 8, 2, 128, 64, 8, 2, True),
]
GLUON_PACKED_FWD_CANDIDATES = [  # (block_m, block_n, stages, persistent, dynamic): the Gluon forward of a packed
    (128, 128, 2, False, False),  # batch; dynamic: the persistent kernel taking its tiles from a counter
    (128, 128, 2, True, False),
    (128, 128, 2, True, True),
    (128, 64, 2, True, True),
    (128, 64, 3, True, True),
    (192, 128, 2, True, True),
    (192, 64, 2, True, True),
]
GLUON_WINDOW_FWD_CANDIDATES = [  # (block_m, persistent, dynamic): the table's Gluon entry for window forwards with
    (128, False, False),  # these tiles, as a grid, a persistent kernel with its tiles dealt out, or taken from a
    (192, False, False),  # counter (a window's walks are all about as long: W / block_n key blocks)
    (128, True, False),
    (192, True, False),
    (128, True, True),
    (192, True, True),
]
GLUON_LONG_KEYS_WINDOW = [  # (persistent, dynamic): at D = 64, the table's window entry on 128 × 256 tiles (two
    (False, False),  # consumer warp groups, 256-key blocks: prefill_gluon.LONG_KEYS)
    (True, False),
    (True, True),
]
BWD_CANDIDATES = [  # (block_m1, block_n1, warps1, stages1, block_m2, block_n2, warps2, stages2)
    (64, 64, 4, 3, 64, 64, 4, 3),
    (64, 128, 8, 3, 128, 64, 8, 3),
    (64, 128, 8, 4, 128, 64, 8, 4),
    (32, 128, 4, 3, 128, 32, 4, 3),
    (64, 64, 4, 2, 64, 64, 4, 2),
    (32, 64, 4, 3, 64, 64, 4, 3),
]


def _variants_module():
    spec = importlib.util.spec_from_file_location("variants_bench", Path(__file__).with_name("variants.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sweep(Ds, variants, passes, packed_gluon: bool = False) -> list[dict]:

    from attnlab.gpu import config as gc

    vb = _variants_module()
    rows = []
    for D in Ds:
        H = vb.WIDTH // D
        for variant in variants:
            if variant == "varlen":
                rows += _sweep_packed_gluon(vb, D) if packed_gluon else _sweep_varlen(vb, D, passes)
                continue
            for pass_ in passes:
                cfg = dict(variant=variant, H=H, N=vb.TOKENS, D=D, dtype=torch.bfloat16, pass_=pass_)
                flops = 4 * H * vb.visible_pairs(variant, vb.TOKENS) * D * (3.5 if pass_ == "fwd_bwd" else 1.0)
                fwd0 = gc.default_fwd_config(D, True, torch.device("cuda"))
                fwd0_triton = gc.default_fwd_config(D, True, torch.device("cuda"), gluon=False)
                bwd0 = gc.default_bwd_config(D, True, torch.device("cuda"))
                if pass_ == "fwd":
                    cands = [("fwd", gc.FwdConfig(bm, bn, w, s, tma=t, warp_spec=ws, maxnreg=mr))
                             for bm, bn, w, s, t, ws, mr in FWD_CANDIDATES]
                    if variant in ("window", "alibi"):  # the warp-specialised Gluon forward takes these
                        cands.append(("fwd", gc.FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)))
                    if variant == "window" and fwd0.gluon:
                        cands += [("fwd", dataclasses.replace(fwd0, block_m=bm, persistent=p, dynamic=d))
                                  for bm, p, d in GLUON_WINDOW_FWD_CANDIDATES]
                        if D == 64:
                            cands += [("fwd", dataclasses.replace(fwd0, block_m=128, block_n=256, num_stages=2,
                                                                  persistent=p, dynamic=d))
                                      for p, d in GLUON_LONG_KEYS_WINDOW]
                    # what the table's entry runs as (an ALiBi call takes two consumer warp groups, not three)
                    ran = gc.gluon_alibi_config(fwd0) if variant == "alibi" else fwd0
                    if not any(c == ran for _, c in cands):
                        cands.insert(0, ("fwd", ran))
                else:
                    cands = [("bwd", gc.BwdConfig(*c)) for c in BWD_CANDIDATES]
                    if not any(c == bwd0 for _, c in cands):
                        cands.insert(0, ("bwd", bwd0))
                for kind, c in cands:
                    gc.set_config(D, True, length="long", **{kind: c})
                    rows.append(_time_row(vb, cfg, flops, dict(D=D, variant=variant, pass_=pass_, config=str(c),
                                                               current=c == (ran if kind == "fwd" else bwd0))))
                gc.set_config(D, True, length="long", fwd=fwd0_triton, bwd=bwd0)  # both tables as they were
                gc.set_config(D, True, length="long", fwd=fwd0)
    return rows


def _time_row(vb, cfg, flops, row) -> dict:
    """``row`` with attnlab's time for ``cfg`` under the installed table entries (``do_bench`` median) and
    TFLOP/s over ``flops``, or the error of a configuration that does not compile or fit; printed as JSON."""
    import triton

    t0 = time.perf_counter()
    try:
        fn = vb.provider_attnlab(cfg, "cuda")
        ms = triton.testing.do_bench(fn, warmup=25, rep=100)
        row.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
    except Exception as e:  # a configuration that does not compile or fit
        row.update(error=f"{type(e).__name__}: {str(e)[:120]}")
    row["seconds"] = time.perf_counter() - t0
    print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()
    return row


def _sweep_varlen(vb, D: int, passes) -> list[dict]:
    """The packed batch of ``benchmarks/variants.py`` (16K tokens of documents of 256–1792, causal): its
    calls take the packed table's entry for their longest document (the "short" class below 2,048 keys),
    else the dense table's as the Triton kernels run it (no tensor descriptors, and at D > 64 at most 64
    keys per step: ``variant_fwd_config``); every distinct such forward of the candidates, then every backward
    candidate under the table's forward. The tables are put back as they were, Gluon entries included."""
    from attnlab.gpu import config as gc

    dev = torch.device("cuda")
    H = vb.WIDTH // D
    lengths = vb.doc_lengths(vb.TOKENS)
    n_keys = max(lengths)
    length = gc.length_class(n_keys)
    key = (64 if D <= 64 else 128, True, length)
    tables = (gc._FWD_TABLE, gc._BWD_TABLE, gc._GLUON_FWD_TABLE, gc._GLUON_BWD_TABLE, gc._PACKED_FWD_TABLE)
    saved = tuple(t.get(key) for t in tables)
    fwd0 = gc.packed_fwd_config(D, True, dev, n_keys) or gc.variant_fwd_config(
        gc.default_fwd_config(D, True, dev, n_keys, gluon=False), D, packed=True, score_mod=False)
    bwd0 = gc.default_bwd_config(D, True, dev, n_keys, gluon=False)
    rows = []
    try:
        for pass_ in passes:
            cfg = dict(variant="varlen", H=H, N=vb.TOKENS, D=D, dtype=torch.bfloat16, pass_=pass_, lengths=lengths)
            flops = 4 * H * vb.visible_pairs("varlen", vb.TOKENS, lengths) * D * (3.5 if pass_ == "fwd_bwd" else 1.0)
            if pass_ == "fwd":
                cands = [fwd0]
                grid = [(bm, bn, w, st) for bm, bn, w, st, *_ in FWD_CANDIDATES] + VARLEN_FWD_EXTRA
                for bm, bn, w, st in grid:
                    c = gc.variant_fwd_config(gc.FwdConfig(bm, bn, w, st), D, packed=True, score_mod=False)
                    if c not in cands:
                        cands.append(c)
                for c in cands:
                    gc.set_config(D, True, length=length, fwd=c, bwd=bwd0)
                    gc._PACKED_FWD_TABLE[key] = c  # what a plain packed call runs
                    rows.append(_time_row(vb, cfg, flops, dict(D=D, variant="varlen", pass_=pass_, config=str(c),
                                                               current=c == fwd0)))
            else:
                cands = [bwd0] + [c for c in (gc.BwdConfig(*b) for b in BWD_CANDIDATES + VARLEN_BWD_EXTRA) if c != bwd0]
                for c in cands:
                    gc.set_config(D, True, length=length, fwd=fwd0, bwd=c)
                    gc._PACKED_FWD_TABLE[key] = fwd0
                    rows.append(_time_row(vb, cfg, flops, dict(D=D, variant="varlen", pass_=pass_, config=str(c),
                                                               current=c == bwd0)))
    finally:
        for table, entry in zip(tables, saved):
            if entry is None:
                table.pop(key, None)
            else:
                table[key] = entry
    return rows


def _sweep_packed_gluon(vb, D: int) -> list[dict]:
    """The packed batch's forward on the Gluon kernel, each of ``GLUON_PACKED_FWD_CANDIDATES`` installed as the
    head dim's entry (``config._GLUON_PACKED_FWD``), beside the Triton kernel's entry (``prefill_gluon.PACKED``
    off). The entry and the switch are put back as they were."""
    from attnlab.gpu import config as gc
    from attnlab.gpu import prefill_gluon

    dev = torch.device("cuda")
    H = vb.WIDTH // D
    lengths = vb.doc_lengths(vb.TOKENS)
    cfg = dict(variant="varlen", H=H, N=vb.TOKENS, D=D, dtype=torch.bfloat16, pass_="fwd", lengths=lengths)
    flops = 4 * H * vb.visible_pairs("varlen", vb.TOKENS, lengths) * D
    saved, switch = gc._GLUON_PACKED_FWD.get(D), prefill_gluon.PACKED
    triton_fwd = gc.packed_fwd_config(D, True, dev, max(lengths)) or gc.variant_fwd_config(
        gc.default_fwd_config(D, True, dev, max(lengths), gluon=False), D, packed=True, score_mod=False)
    rows = []
    try:
        prefill_gluon.PACKED = False
        rows.append(_time_row(vb, cfg, flops, dict(D=D, variant="varlen", pass_="fwd", config=str(triton_fwd),
                                                   kernel="triton", current=saved is None or not switch)))
        prefill_gluon.PACKED = True
        for bm, bn, st, pers, dyn in GLUON_PACKED_FWD_CANDIDATES:
            c = gc.FwdConfig(bm, bn, 4, st, tma=True, warp_spec=True, gluon=True, persistent=pers, dynamic=dyn)
            gc._GLUON_PACKED_FWD[D] = c
            rows.append(_time_row(vb, cfg, flops, dict(D=D, variant="varlen", pass_="fwd", config=str(c),
                                                       kernel="gluon", current=switch and c == saved)))
    finally:
        prefill_gluon.PACKED = switch
        if saved is None:
            gc._GLUON_PACKED_FWD.pop(D, None)
        else:
            gc._GLUON_PACKED_FWD[D] = saved
    return rows


def markdown(rows) -> str:
    lines = ["| D | variant | pass | config | TFLOP/s |", "|---|---|---|---|---|"]
    for r in rows:
        mark = " (table)" if r["current"] else ""
        val = f"{r['tflops']:.0f}" if "tflops" in r else r.get("error", "?")
        lines.append(f"| {r['D']} | {r['variant']} | {r['pass_']} | {r['config']}{mark} | {val} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--variants", nargs="+", default=["window", "alibi"],
                    choices=["window", "alibi", "softcap", "varlen"])
    ap.add_argument("--passes", nargs="+", default=["fwd", "fwd_bwd"], choices=["fwd", "fwd_bwd"])
    ap.add_argument("--json", type=Path, help="write every row here (refuses an existing file)")
    ap.add_argument("--packed-gluon", action="store_true",
                    help="varlen: sweep the Gluon forward's packed entries beside the Triton kernel's (forward only)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if not torch.cuda.is_available():
        print("variants_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = sweep(args.D, args.variants, args.passes, args.packed_gluon)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
