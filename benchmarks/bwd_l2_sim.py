"""The causal Gluon backward's HBM traffic by program order, simulated (no GPU): how much of its Q, dO and dQ traffic
an L2 of the GPU preset's size catches when the programs run in the library's order (below ``HEADS_FIRST_WAVES``
programs per SM GQA calls key blocks first in the chunks of ``prefill_gluon_bwd.L2_CHUNKS``, whose rows fit in L2, and
multi-head calls heads first; above, key blocks first in chunks of heads), in the order before ``L2_CHUNKS`` (heads first
below that many programs per SM), with ``L2_CHUNKS``' chunks for multi-head calls too, key blocks first in chunks of a
given size, or with each K/V head's query heads split over several programs (``kv_split``). The model behind
NOTES-prefill v52's L2 prediction.

Model: ``sms`` SMs, one program each, the next program in launch order to whichever SM frees first; every step (a
64-row query block of one query head against the program's 128 keys) takes one unit of time on every SM, the SMs'
steps of one unit in SM order. A step reads its query block's Q and dO (64 × D × 2 bytes each) and adds into its dQ
tile (64 × D float32, a read-modify-write in L2: the TMA reduction). Programs walk their query heads one after another
and, within a head, the query blocks from the causal diagonal's on, starting at the key block's own rotation
(``rot = n mod n_m``, as ``_bwd_tile_of``). The L2 is one LRU cache of the preset's size over whole tiles: a Q or dO
miss reads the tile from HBM, a dQ miss reads it and evicting a dQ tile writes it back. K and V (each program's, once)
are not cached. What it leaves out: L2's two partitions and its hashing, the TMA's prefetch into L2, and time (a step
that misses takes as long as one that hits).

    python benchmarks/bwd_l2_sim.py [--rows gqa-8k causal8k] [--D 128] [--json out.json]
    python benchmarks/bwd_l2_sim.py --fit benchmarks/data/bwd-gluon-ablation-h200-run5.json \\
        --fit-chunks benchmarks/data/bwd-block-m-h200-run13.json --predict benchmarks/data/prefill-h200-run36.json

``--fit`` puts a time on the model's bytes: a run that timed shapes both ways gives, shape by shape, the time a GB of
traffic costs (β) beside the balance's; ``--fit-chunks`` fits one β to a run of the chunks-of-heads arms (every row at
once, a T0 per row); ``--predict`` then says what the candidate numbering would make of a prefill run's causal GQA
rows, with each β.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # (bwd_block_m's arms and det_order_sim's list schedule,
# also when loaded as a module)

BLOCK_M, BLOCK_N, SMS = 64, 128, 132
SHAPES = {  # row: (B, H, Hkv, N) at D = 64, causal (bwd_block_m.py's rows of the same names); H·D = 2048
    "causal": (4, 32, 32, 4096),
    "causal8k": (2, 32, 32, 8192),
    "long": (1, 32, 32, 16384),
    "causal1": (1, 32, 32, 4096),
    "gqa": (1, 32, 8, 8192),
    "gqa-4k": (4, 32, 8, 4096),
    "gqa-8k": (2, 32, 8, 8192),
    "gqa-16k": (1, 32, 8, 16384),
}
ORDERS = ("table", "nol2", "l2", "kfirst", "hfirst", "kv2", "kv4", "kf1", "kf2", "kf4", "kf8")
DEFAULT_ORDERS = ("table", "nol2", "l2", "kfirst", "hfirst", "kv2", "kv4")


def head_chunk(units: int, group: int, n: int, D: int) -> int | None:
    """The library's chunk of K/V heads (``prefill_gluon_bwd.head_chunk``) at D ≥ its ``HEAD_CHUNK_FROM_D``."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    return gb.head_chunk(units, group, n, n, D) if D >= gb.HEAD_CHUNK_FROM_D else None


def programs(B: int, H: int, Hkv: int, N: int, D: int, order: str, sms: int = SMS) -> list[tuple[int, int, int]]:
    """(first query head, query heads, key block) of every program, in launch order. Orders: ``table`` the library's
    numbering, ``nol2`` the library's with ``prefill_gluon_bwd.L2_CHUNKS`` off (heads first below
    ``HEADS_FIRST_WAVES`` programs per SM: the numbering before it), ``l2`` the library's with ``L2_CHUNKS``' chunks
    for multi-head calls too (``L2_CHUNKS_MIN_GROUP`` 1), ``kfirst`` key blocks first (in the library's chunks of
    units), ``hfirst`` heads first, ``kv2`` and ``kv4`` ``nol2``'s numbering of a call split that many ways per K/V
    head, ``kfC`` key blocks first in chunks of C units (batch · K/V head)."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    split = {"kv2": 2, "kv4": 4}.get(order, 1)
    G = H // Hkv
    if G % split:
        split = 1
    units, per = B * Hkv * split, G // split  # (batch, K/V head, part) and its query heads
    n_kb = -(-N // BLOCK_N)
    count = units * n_kb
    chunk = None
    if order.startswith("kf") and order[2:].isdigit():  # key blocks first in chunks of so many units
        heads_first, chunk = False, int(order[2:])
    elif order == "kfirst":
        heads_first = False
    elif order == "hfirst":
        heads_first = True
    else:
        heads_first = gb.heads_first_default(True, count, sms)
        if heads_first and order not in ("nol2", "kv2", "kv4"):  # (``L2_CHUNKS``: key blocks first in chunks)
            if order == "l2":
                chunk = gb.l2_chunk(units, per, N, N, D, sms) if gb.L2_CHUNKS else None
            else:
                chunk = gb.l2_numbering(units, per, N, N, D, sms, 0, None)
            heads_first = chunk is None
    if heads_first:  # grid (units, key blocks): the unit fastest
        pairs = [(u, n) for n in range(n_kb) for u in range(units)]
    else:  # key blocks first, in chunks of units where the library takes them
        chunk = chunk or head_chunk(units, per, N, D) or 1
        pairs = [(u, n) for c in range(0, units, chunk) for n in range(n_kb) for u in range(c, min(c + chunk, units))]
    return [(u * per, per, n) for u, n in pairs]


def walk(first: int, heads: int, n: int, N: int):
    """A program's steps: (query head, query block) over its heads, one after another, from the diagonal's block."""
    n_qb = -(-N // BLOCK_M)
    lo = (n * BLOCK_N) // BLOCK_M
    n_m = n_qb - lo
    rot = n % max(n_m, 1)
    for h in range(first, first + heads):
        for i in range(n_m):
            yield h, lo + (i + rot) % n_m


def balance(progs: list[tuple[int, int, int]], N: int, sms: int = SMS) -> float:
    """The list schedule's makespan over a perfect balance, a program's time its steps (``det_order_sim``'s model)."""
    from det_order_sim import list_schedule

    n_qb = -(-N // BLOCK_M)
    sizes = [per * (n_qb - (n * BLOCK_N) // BLOCK_M) for _, per, n in progs]
    return list_schedule(sizes, sms) * sms / sum(sizes)


def simulate(B: int, H: int, Hkv: int, N: int, D: int, order: str, l2_bytes: int, sms: int = SMS) -> dict:
    """HBM bytes of Q, dO and dQ (and K, V) for one backward in ``order``, against the bytes every tile moved once."""
    progs = programs(B, H, Hkv, N, D, order, sms)
    qb, dqb = BLOCK_M * D * 2, BLOCK_M * D * 4
    cache: OrderedDict = OrderedDict()
    used = 0
    read = written = 0
    steps = 0

    def touch(key, size, dirty):
        nonlocal used, read, written
        if key in cache:
            cache.move_to_end(key)
            if dirty:
                cache[key] = (size, True)
            return
        read += size
        cache[key] = (size, dirty)
        used += size
        while used > l2_bytes:
            _, (s, d) = cache.popitem(last=False)
            used -= s
            written += s if d else 0

    nxt = 0
    running: list = [None] * sms
    for s in range(sms):
        if nxt < len(progs):
            first, heads, n = progs[nxt]
            running[s] = walk(first, heads, n, N)
            nxt += 1
    while any(r is not None for r in running):
        for s in range(sms):
            while running[s] is not None:
                step = next(running[s], None)
                if step is not None:
                    break
                running[s] = None
                if nxt < len(progs):
                    first, heads, n = progs[nxt]
                    running[s] = walk(first, heads, n, N)
                    nxt += 1
            if running[s] is None:
                continue
            h, m = step
            b_h = h  # (batch · query head: the heads of one batch are consecutive)
            touch(("q", b_h, m), qb, False)
            touch(("do", b_h, m), qb, False)
            touch(("dq", b_h, m), dqb, True)
            steps += 1
    written += sum(s for s, d in cache.values() if d)
    n_qb = -(-N // BLOCK_M)
    once = B * H * n_qb * (2 * qb + 2 * dqb)  # Q and dO read once, dQ read and written once
    kv = len(progs) * 2 * BLOCK_N * D * 2
    return dict(B=B, H=H, Hkv=Hkv, N=N, D=D, order=order, programs=len(progs), steps=steps,
                balance=balance(progs, N, sms),
                hbm_gb=(read + written + kv) / 1e9, once_gb=(once + kv) / 1e9,
                over_once=(read + written + kv) / (once + kv))


def fit(ablation: list[dict], gpu: str = "H200") -> dict:
    """The model's time per GB of traffic, fitted to measured pairs of numberings: the rows of a
    ``bwd_gluon_ablation.py`` run that timed one shape heads first and key blocks first (variants "table's, heads
    first" and "table's, key blocks first"). Each multi-head shape's two times t = T0 · balance + β · GB (T0 the
    shape's time at a perfect balance with no traffic beyond its tiles' once) give its β; ``beta_ms_per_gb`` is their
    mean (GQA shapes, whose two numberings differ mostly in balance, are listed, not fitted)."""
    from attnlab.cost import get_gpu

    l2 = get_gpu(gpu).l2_bytes
    by = {(r["B"], r["H"], r["Hkv"], r["D"], r["N"], r["variant"]): r["ms"] for r in ablation if r.get("causal")}
    rows = []
    for key in sorted({k[:5] for k in by}):
        hf, kf = (by.get(key + (v,)) for v in ("table's, heads first", "table's, key blocks first"))
        if hf is None or kf is None:
            continue
        B, H, Hkv, D, N = key
        a, b = simulate(B, H, Hkv, N, D, "hfirst", l2), simulate(B, H, Hkv, N, D, "kf1", l2)
        det = a["balance"] * b["hbm_gb"] - b["balance"] * a["hbm_gb"]
        beta = (a["balance"] * kf - b["balance"] * hf) / det
        rows.append(dict(B=B, H=H, Hkv=Hkv, D=D, N=N, heads_first_ms=hf, key_blocks_first_ms=kf,
                         heads_first_gb=a["hbm_gb"], key_blocks_first_gb=b["hbm_gb"],
                         heads_first_balance=a["balance"], key_blocks_first_balance=b["balance"], beta_ms_per_gb=beta))
    mha = [r["beta_ms_per_gb"] for r in rows if r["H"] == r["Hkv"]]
    return dict(rows=rows, beta_ms_per_gb=sum(mha) / len(mha) if mha else None)


def fit_chunks(rows: list[dict], gpu: str = "H200") -> dict:
    """β fitted to a ``bwd_block_m.py`` run's arms of chunks of heads (``CHUNK_ARMS``: hc0, hc16, ..., hcall — each a
    numbering the model knows, whatever the library's table then was), by least squares over every row at once: one
    T0 per row and head dim, one β. Returns β and each arm's measured and fitted time."""
    import numpy as np
    from bwd_block_m import CHUNK_ARMS

    from attnlab.cost import get_gpu
    from attnlab.gpu import prefill_gluon_bwd as gb

    l2 = get_gpu(gpu).l2_bytes
    points = []
    for r in rows:
        if r.get("arm") not in CHUNK_ARMS or r.get("row") not in SHAPES or "ms" not in r:
            continue
        B, H, Hkv, N = SHAPES[r["row"]]
        D = r["D"]
        h, hkv = H * 64 // D, Hkv * 64 // D
        budget = CHUNK_ARMS[r["arm"]]
        chunk = (gb.head_chunk(B * hkv, h // hkv, N, N, D, budget_mb=budget) if budget else None) or 1
        m = simulate(B, h, hkv, N, D, f"kf{chunk}", l2)
        points.append(dict(row=r["row"], D=D, arm=r["arm"], chunk=chunk, ms=r["ms"], balance=m["balance"],
                           hbm_gb=m["hbm_gb"]))
    shapes = sorted({(p["row"], p["D"]) for p in points})
    if not points:
        return dict(beta_ms_per_gb=None, points=[])
    a = np.zeros((len(points), len(shapes) + 1))
    for i, p in enumerate(points):
        a[i, shapes.index((p["row"], p["D"]))] = p["balance"]
        a[i, -1] = p["hbm_gb"]
    x = np.linalg.lstsq(a, np.array([p["ms"] for p in points]), rcond=None)[0]
    for p, fitted in zip(points, a @ x):
        p["fitted_ms"] = float(fitted)
    return dict(beta_ms_per_gb=float(x[-1]), points=points)


def predict(prefill: list[dict], beta: float, order: str = "table", gpu: str = "H200", base: str = "nol2") -> list[dict]:
    """The backward of a prefill run's causal GQA rows in ``order`` against ``base``, the numbering the run measured
    (``nol2``: runs before ``L2_CHUNKS``), by the fitted model: the backward's time is the row's forward+backward
    median less its forward median; T0 from it at ``base``'s balance and traffic, then T0 · balance + β · GB in
    ``order``."""
    from attnlab.cost import get_gpu

    l2 = get_gpu(gpu).l2_bytes
    ms = {(r["D"], r["N"], r["B"], r["H"], r["Hkv"], r["pass_"]): r["ms"] for r in prefill
          if r["provider"] == "attnlab" and r["causal"] and r["H"] != r["Hkv"] and "ms" in r}
    out = []
    for (D, N, B, H, Hkv, p), both in sorted(ms.items()):
        fwd = ms.get((D, N, B, H, Hkv, "fwd"))
        if p != "fwd_bwd" or fwd is None:
            continue
        bwd = both - fwd
        t, c = simulate(B, H, Hkv, N, D, base, l2), simulate(B, H, Hkv, N, D, order, l2)
        t0 = (bwd - beta * t["hbm_gb"]) / t["balance"]
        new = t0 * c["balance"] + beta * c["hbm_gb"]
        out.append(dict(D=D, N=N, B=B, H=H, Hkv=Hkv, bwd_ms=bwd, predicted_ms=new, speedup=bwd / new,
                        fwd_bwd_ms=both, predicted_fwd_bwd_ms=both - bwd + new, fwd_bwd_speedup=both / (both - bwd + new)))
    return out


def run(rows, Ds, orders, gpu: str = "H200") -> list[dict]:
    from attnlab.cost import get_gpu

    l2 = get_gpu(gpu).l2_bytes
    out = []
    for row in rows:
        B, H, Hkv, N = SHAPES[row]
        for D in Ds:
            h, hkv = H * 64 // D, Hkv * 64 // D
            for order in orders:
                if order in ("kv2", "kv4") and h == hkv:
                    continue
                out.append(dict(row=row, **simulate(B, h, hkv, N, D, order, l2), l2_mb=l2 / 2**20))
    return out


def table(rows: list[dict]) -> str:
    lines = ["| row | D | order | programs | balance | HBM GB (Q, dO, dQ, K, V) | each tile once, GB | × once |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['D']} | {r['order']} | {r['programs']} | {r['balance']:.3f} | "
                     f"{r['hbm_gb']:.2f} | {r['once_gb']:.2f} | {r['over_once']:.2f} |")
    return "\n".join(lines) + "\n"


def fit_table(fitted: dict) -> str:
    lines = ["| B | H/Hkv | N | D | heads first ms | GB | balance | key blocks first ms | GB | balance | β µs/GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in fitted["rows"]:
        lines.append(f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['N']} | {r['D']} | {r['heads_first_ms']:.3f} | "
                     f"{r['heads_first_gb']:.2f} | {r['heads_first_balance']:.3f} | {r['key_blocks_first_ms']:.3f} | "
                     f"{r['key_blocks_first_gb']:.2f} | {r['key_blocks_first_balance']:.3f} | "
                     f"{1000 * r['beta_ms_per_gb']:.1f} |")
    return "\n".join(lines) + f"\n\nβ (the multi-head rows' mean): {1000 * fitted['beta_ms_per_gb']:.1f} µs a GB\n"


def fit_chunks_table(fitted: dict) -> str:
    lines = ["| row | D | arm | chunk | balance | GB | measured ms | fitted ms |", "|---|---|---|---|---|---|---|---|"]
    for p in fitted["points"]:
        lines.append(f"| {p['row']} | {p['D']} | {p['arm']} | {p['chunk']} | {p['balance']:.3f} | {p['hbm_gb']:.2f} | "
                     f"{p['ms']:.3f} | {p['fitted_ms']:.3f} |")
    beta = fitted["beta_ms_per_gb"]
    return "\n".join(lines) + ("\n\nβ (one for every row): " + (f"{1000 * beta:.1f} µs a GB" if beta is not None
                                                                   else "none (no chunk arms)") + "\n")


def predict_table(rows: list[dict]) -> str:
    lines = ["| D | B | H/Hkv | N | backward ms (measured) | predicted | × | forward+backward ms | predicted | × |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['D']} | {r['B']} | {r['H']}/{r['Hkv']} | {r['N']} | {r['bwd_ms']:.3f} | "
                     f"{r['predicted_ms']:.3f} | {r['speedup']:.3f} | {r['fwd_bwd_ms']:.3f} | "
                     f"{r['predicted_fwd_bwd_ms']:.3f} | {r['fwd_bwd_speedup']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", choices=list(SHAPES), default=["gqa-8k", "causal8k"])
    ap.add_argument("--D", type=int, nargs="+", choices=[64, 128], default=[128])
    ap.add_argument("--orders", nargs="+", choices=ORDERS, default=list(DEFAULT_ORDERS))
    ap.add_argument("--gpu", default="H200", help="the attnlab.cost preset whose L2 size the model takes")
    ap.add_argument("--fit", type=Path, metavar="JSON",
                    help="a bwd_gluon_ablation.py run timing shapes heads first and key blocks first: fit the time a GB "
                         "of traffic costs")
    ap.add_argument("--fit-chunks", type=Path, metavar="JSON",
                    help="a bwd_block_m.py run with arms of chunks of heads (hc0 ... hcall): fit the time a GB of "
                         "traffic costs over all its rows at once")
    ap.add_argument("--predict", type=Path, metavar="JSON",
                    help="with --fit and/or --fit-chunks: a prefill.py bench run; predict its causal GQA rows' backward "
                         "in the library's numbering against the one before L2_CHUNKS, once per fit")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists: not overwritten")
    if args.predict and not (args.fit or args.fit_chunks):
        ap.error("--predict needs --fit or --fit-chunks")
    for path in (args.fit, args.fit_chunks, args.predict):
        if path is not None and not path.is_file():
            ap.error(f"no such file: {path}")
    if args.fit or args.fit_chunks:
        out, betas = {}, []
        if args.fit:
            out["fit"] = fitted = fit(json.loads(args.fit.read_text())["rows"], args.gpu)
            print(fit_table(fitted), end="")
            betas.append((args.fit.name, fitted["beta_ms_per_gb"]))
        if args.fit_chunks:
            out["fit_chunks"] = fitted = fit_chunks(json.loads(args.fit_chunks.read_text())["rows"], args.gpu)
            print(("\n" if args.fit else "") + fit_chunks_table(fitted), end="")
            betas.append((args.fit_chunks.name, fitted["beta_ms_per_gb"]))
        if args.predict:
            rows = json.loads(args.predict.read_text())["rows"]
            out["predict"] = {}
            for name, beta in betas:
                if beta is None or beta <= 0:
                    print(f"\n{name}: no positive β fitted; no prediction from it")
                    continue
                out["predict"][name] = pred = predict(rows, beta, gpu=args.gpu)
                print(f"\nWith β = {1000 * beta:.1f} µs a GB ({name}):\n\n" + predict_table(pred), end="")
    else:
        out = run(args.rows, args.D, args.orders, args.gpu)
        print(table(out), end="")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
