"""Code 03: FlashAttention forward on the GPU simulator (lecture §5.3, §5.5, §6.1–6.3).

1. Counts (§5.3): the standard forward (3 kernels) and the FlashAttention forward (1 kernel) at
   N = 256, d = 64, one head, FP32, every HBM count beside its closed form; the ratio with an
   ideal cache; shared-memory wavefronts; the error against a float64 reference.
2. H100 estimate (§5.5): N = 4096, d = 128, 32 heads, FP16 — roofline lower bounds (attnlab.cost).
3. Block sizes (§6.1): which (Br, Bc) fit H100's shared memory at d = 128, FP16 (attnlab.cost).
4. Causal skipping (§6.2) on the simulator at N = 256, B = 64 (block pairs and K/V bytes), the
   formula at T = 32; FA1 vs FA2 loop order (§6.3) simulated at N = 256 and by formula at N = 4096.

A plot compares the two designs' traffic by array. Every number printed is computed here (by a
simulation or a closed form) and returned.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from attnlab import cost
from attnlab._console import make_console
from attnlab.sim.kernels import print_simulation, reference_forward, run_flash_forward, simulate_forward

N, D, BLOCK = 256, 64, 64  # §5.3: "N = 256、d = 64、单个头、FP32"; §6.2: "N = 256、B = 64"
EST = dict(seq=4096, head_dim=128, heads=32, dtype_bytes=2, gpu="H100", block_q=128)  # §5.5
BLOCK_SIZE_D = 128  # §6.1: "代码 03 演示 3（d = 128，FP16）"
T_LARGE = 32  # §6.2: "T = 32 时比例为 51.6%"
FA1_FORMULA = dict(seq=4096, head_dim=128, block_q=128, block_k=128)  # §6.3
FLOAT_BYTES = 4
SEED = 0
PLOT_NAME = "demo03_traffic_by_array.png"


# -- 1. counts -----------------------------------------------------------------------------------


def counts(console) -> dict:
    res = simulate_forward(seq=N, head_dim=D, block=BLOCK, seed=SEED, reference="numpy")
    console.rule("[b]1 · counting the kernels (§5.3)[/b]")
    print_simulation(res, console)
    s, f = res["standard"]["totals"], res["flash"]["totals"]
    exact = all(t[k] == t[k + "_formula"] for t in (s, f)
                for k in ("read_no_cache", "read_ideal", "write_no_cache", "write_ideal"))
    console.print(f"all {'counts equal' if exact else '[red]counts do NOT all equal[/red]'} their closed forms; "
                  f"flash's HBM holds only {', '.join(res['flash']['arrays'])} — no S, no P")
    return res


# -- 2. H100 estimate ----------------------------------------------------------------------------


def h100(console) -> dict:
    from rich.table import Table

    from attnlab.cost.tables import fmt_bytes, fmt_flops, fmt_time

    est = cost.estimate_forward(**EST)
    console.rule("[b]2 · on an H100: roofline lower bounds (§5.5)[/b]")
    t = Table(title=f"N = {EST['seq']:,}, d = {EST['head_dim']}, {EST['heads']} heads, FP16, "
                    f"Br = Bc = {EST['block_q']} (attnlab.cost.estimate_forward)")
    for c in ("design", "kernel", "matmul FLOPs", "HBM bytes", "time", "bound"):
        t.add_column(c, justify="left" if c in ("design", "kernel", "bound") else "right")
    groups = (("standard", est.standard), ("flash, K/V in L2", est.flash_l2), ("flash, K/V from HBM", est.flash_hbm))
    for label, ks in groups:
        for i, k in enumerate(ks):
            t.add_row(label if i == 0 else "", k.name, fmt_flops(k.flops), fmt_bytes(k.bytes), fmt_time(k.time), k.bound)
        if len(ks) > 1:
            t.add_row("", "[b]total[/b] (incl. launches)", "", fmt_bytes(sum(k.bytes for k in ks)),
                      f"[b]{fmt_time(sum(k.time for k in ks))}[/b]", "")
        t.rows[-1].end_section = True
    console.print(t)
    console.print(f"standard {fmt_time(est.standard_time)}, flash {fmt_time(est.flash_l2_time)}: "
                  f"[b]{est.speedup_l2:.1f}×[/b] faster (lower bound); {est.speedup_hbm:.1f}× even with K/V from HBM")
    return est.to_dict()


# -- 3. block sizes ------------------------------------------------------------------------------


def block_sizes(console) -> list[dict]:
    rows = cost.block_size_table(head_dim=BLOCK_SIZE_D, dtype_bytes=2, gpu="H100")
    console.rule("[b]3 · block sizes: squeezed by SRAM (§6.1)[/b]")
    console.print(cost.render_table(rows, title=f"d = {BLOCK_SIZE_D}, FP16, K/V double-buffered, H100 "
                                                f"(attnlab.cost.block_size_table)"))
    return [r.to_dict() for r in rows]


# -- 4. causal skipping and FA1 vs FA2 -----------------------------------------------------------


def causal(console, full: dict) -> dict:
    from rich.table import Table

    rng = np.random.default_rng(SEED)
    q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
    out, _, rep = run_flash_forward(q, k, v, block_q=BLOCK, block_k=BLOCK, causal=True)
    ref, _ = reference_forward(q, k, v, causal=True)
    tile_bytes = BLOCK * D * FLOAT_BYTES
    T = -(-N // BLOCK)
    kv_full = sum(full["flash"]["arrays"][a]["read"]["requested"] for a in ("K", "V"))
    kv_causal = rep.global_bytes("K", "read", kind="requested") + rep.global_bytes("V", "read", kind="requested")
    pairs_sim = rep.global_bytes("K", "read", kind="requested") // tile_bytes  # one K tile per computed pair
    pairs_total_sim = full["flash"]["arrays"]["K"]["read"]["requested"] // tile_bytes
    f_full = cost.io_flash_forward_breakdown(seq=N, head_dim=D, block_q=BLOCK, block_k=BLOCK)
    f_causal = cost.io_flash_forward_breakdown(seq=N, head_dim=D, block_q=BLOCK, block_k=BLOCK, causal=True)
    kv_f = lambda br: FLOAT_BYTES * (br[("K", "read")] + br[("V", "read")])  # noqa: E731
    res = {
        "N": N, "block": BLOCK, "T": T,
        "pairs_simulated": int(pairs_sim), "pairs_total_simulated": int(pairs_total_sim),
        "pairs_formula": cost.causal_block_pairs(T), "pairs_total_formula": T * T,
        "kv_bytes_full": int(kv_full), "kv_bytes_causal": int(kv_causal),
        "kv_bytes_full_formula": kv_f(f_full), "kv_bytes_causal_formula": kv_f(f_causal),
        "fraction_simulated": pairs_sim / pairs_total_sim, "fraction_formula": cost.causal_fraction(T),
        "T_large": T_LARGE, "fraction_T_large_formula": cost.causal_fraction(T_LARGE),
        "pairs_T_large_formula": cost.causal_block_pairs(T_LARGE),
        "error_out": float(np.abs(out.astype(np.float64) - ref).max()),
        "barriers": rep.barriers, "barriers_full": full["flash"]["totals"]["barriers"],
    }
    console.rule("[b]4 · causal masks: skip whole blocks (§6.2)[/b]")
    t = Table(title=f"FlashAttention forward, N = {N}, Br = Bc = {BLOCK} (T = {T}), simulated vs closed form")
    for c in ("", "simulated", "formula"):
        t.add_column(c, justify="left" if not c else "right")
    t.add_row("block pairs computed", f"{res['pairs_simulated']} / {res['pairs_total_simulated']}",
              f"{res['pairs_formula']} / {res['pairs_total_formula']} = T(T+1)/2 / T²")
    t.add_row("K/V bytes read, full", f"{res['kv_bytes_full']:,}", f"{res['kv_bytes_full_formula']:,}")
    t.add_row("K/V bytes read, causal", f"{res['kv_bytes_causal']:,}", f"{res['kv_bytes_causal_formula']:,}")
    t.add_row("barriers (whole blocks skip theirs)", f"{res['barriers_full']} → {res['barriers']}", "")
    t.add_row(f"share of pairs at T = {T_LARGE}", "", f"{100 * res['fraction_T_large_formula']:.1f}% "
              f"({res['pairs_T_large_formula']:,} / {T_LARGE * T_LARGE:,})")
    console.print(t)
    console.print(f"causal flash vs float64 reference: max |error| {res['error_out']:.1e}")
    return res


def fa1_vs_fa2(console, full: dict) -> dict:
    from rich.table import Table

    from attnlab.cost.tables import fmt_count

    rng = np.random.default_rng(SEED)
    q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
    out, _, rep = run_flash_forward(q, k, v, block_q=BLOCK, block_k=BLOCK, order="fa1")
    ref, _ = reference_forward(q, k, v)
    f1 = cost.io_fa1_forward_breakdown(seq=N, head_dim=D, block_q=BLOCK, block_k=BLOCK)
    f2 = cost.io_flash_forward_breakdown(seq=N, head_dim=D, block_q=BLOCK, block_k=BLOCK)
    fa2_arrays = full["flash"]["arrays"]
    rows = []
    names = dict.fromkeys([a for a, _ in f1] + [a for a, _ in f2])
    for a in names:
        for d in ("read", "write"):
            s1 = rep.global_bytes(a, d, kind="sectors") // FLOAT_BYTES
            s2 = fa2_arrays.get(a, {}).get(d, {}).get("no_cache", 0) // FLOAT_BYTES
            if s1 or s2 or f1.get((a, d)) or f2.get((a, d)):
                rows.append({"array": a, "direction": d, "fa1_simulated": int(s1), "fa1_formula": f1.get((a, d), 0),
                             "fa2_simulated": int(s2), "fa2_formula": f2.get((a, d), 0)})
    tot = {key: sum(r[key] for r in rows) for key in ("fa1_simulated", "fa1_formula", "fa2_simulated", "fa2_formula")}
    fa1_grid = rep.kernels[0].grid[0]
    fa2_grid = full["flash"]["kernels"][0]["grid"][0]
    big = cost.forward_io_table(**FA1_FORMULA, dtype_bytes=2)
    heads = EST["heads"]
    blocks = {"fa1": heads * fa1_grid, "fa2": heads * -(-FA1_FORMULA["seq"] // FA1_FORMULA["block_q"])}
    console.rule("[b]5 · FlashAttention-1 vs -2: who is outside? (§6.3)[/b]")
    t = Table(title=f"N = {N}, d = {D}, Br = Bc = {BLOCK}: HBM elements per array, no cache (simulated | formula)")
    for c in ("array", "dir", "FA1 sim", "FA1 formula", "FA2 sim", "FA2 formula"):
        t.add_column(c, justify="left" if c in ("array", "dir") else "right")
    for r in rows:
        t.add_row(r["array"], r["direction"], f"{r['fa1_simulated']:,}", f"{r['fa1_formula']:,}",
                  f"{r['fa2_simulated']:,}", f"{r['fa2_formula']:,}")
    t.add_row("[b]total[/b]", "", f"{tot['fa1_simulated']:,}", f"{tot['fa1_formula']:,}", f"{tot['fa2_simulated']:,}",
              f"{tot['fa2_formula']:,}")
    console.print(t)
    console.print(cost.render_table(big, title=f"one head at N = {FA1_FORMULA['seq']:,}, d = {FA1_FORMULA['head_dim']}, "
                                               f"Br = Bc = {FA1_FORMULA['block_q']} (attnlab.cost.forward_io_table)"))
    console.print(f"parallelism at {heads} heads: FA1 runs {fa1_grid} block per head → {blocks['fa1']} blocks; "
                  f"FA2 one per (head, Q block) → {blocks['fa2']:,} blocks at N = {FA1_FORMULA['seq']:,} "
                  f"(the simulated FA2 kernel used {fa2_grid} per head at N = {N})")
    err = float(np.abs(out.astype(np.float64) - ref).max())
    console.print(f"FA1 order vs float64 reference: max |error| {err:.1e}; FA1 moves {fmt_count(tot['fa1_simulated'])} "
                  f"elements here against FA2's {fmt_count(tot['fa2_simulated'])}")
    return {"simulated": {"N": N, "d": D, "block": BLOCK, "rows": rows, "totals": tot, "error_out": err,
                          "fa1_blocks_per_head": fa1_grid, "fa2_blocks_per_head": fa2_grid},
            "formula": {**FA1_FORMULA, "rows": [r.to_dict() for r in big]},
            "blocks_at_32_heads": blocks}


# -- plot ----------------------------------------------------------------------------------------


def _plot(res: dict, out_dir: Path) -> Path:
    """Grouped bars: HBM bytes per array (reads + writes), standard vs flash, no cache vs ideal cache."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # the Agg backend, without pyplot's state
    from matplotlib.figure import Figure

    arrays = list(dict.fromkeys(list(res["standard"]["arrays"]) + list(res["flash"]["arrays"])))
    series = [("standard, no cache", "standard", "no_cache", "#c44e52"),
              ("standard, ideal cache", "standard", "ideal", "#e8a3a5"),
              ("flash, no cache", "flash", "no_cache", "#4c72b0"),
              ("flash, ideal cache", "flash", "ideal", "#9fb6dc")]
    x = np.arange(len(arrays))
    w = 0.2
    fig = Figure(figsize=(8, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, (label, design, kind, color) in enumerate(series):
        ys = [sum(c[kind] for c in res[design]["arrays"].get(a, {}).values()) / 1024 for a in arrays]
        ax.bar(x + (i - 1.5) * w, ys, w, label=f"{label}: {sum(ys):,.0f} KiB in all", color=color)
    ax.set_xticks(x, arrays)
    ax.set_ylabel("HBM traffic, reads + writes (KiB)")
    c = res["config"]
    ax.set_title(f"Simulated HBM traffic by array — N = {c['seq']}, d = {c['head_dim']}, one head, FP32; "
                 f"ideal cache: standard / flash = {res['ideal_ratio']:.1f}×", fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.07)  # fixed margins: one draw, not two
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / PLOT_NAME
    fig.savefig(path, dpi=100)
    return path


def run(out_dir=None, console=None) -> dict:
    """Run demo 03; print its tables, save its plot under ``out_dir`` (if given), return every number."""
    console = console or make_console()
    t0 = time.perf_counter()
    res = counts(console)
    out = {
        "counts": {k: v for k, v in res.items() if k not in ("standard", "flash")}
        | {d: {"totals": res[d]["totals"], "arrays": res[d]["arrays"], "error": res[d]["error"],
               "kernels": [{k: v for k, v in kern.items() if k != "arrays"} for kern in res[d]["kernels"]]}
           for d in ("standard", "flash")},
    }
    out["h100"] = h100(console)
    out["block_sizes"] = block_sizes(console)
    out["causal"] = causal(console, res)
    out["fa1_vs_fa2"] = fa1_vs_fa2(console, res)
    if out_dir is not None:
        path = _plot(res, Path(out_dir))
        out["plot"] = str(path)
        console.print(f"plot: {path}")
    out["seconds"] = time.perf_counter() - t0
    return out
