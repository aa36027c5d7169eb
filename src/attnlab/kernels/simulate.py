"""Standard vs FlashAttention forward on the simulator, each count beside its closed form (§5.3–5.4, §6.2).

``simulate_forward`` runs both designs on random inputs and returns one dict with stable keys
(documented in ``docs/simulator.md``): per design, per kernel and per (array, direction) the four HBM
traffic counts in bytes — ``no_cache`` (32 × sectors) and ``ideal`` (first touch), for reads and
writes — next to ``attnlab.cost``'s closed forms, plus sectors, shared-memory wavefronts, barriers,
atomics and the error against a float64 reference. ``print_simulation`` renders it with rich;
``attnlab simulate`` is the two together.
"""

from __future__ import annotations

import numpy as np

from .api import reference_forward, run_flash_forward, run_standard_forward

FLOAT_BYTES = 4  # the kernels compute in float32
_DIRS = ("read", "write")


def _formulas(design: str, N: int, D: int, block: int, tile: int, causal: bool):
    """Per-kernel closed forms (elements) from attnlab.cost: [(no-cache io, ideal io)] in kernel order."""
    from .. import cost

    if design == "standard":
        # the standard forward computes (and writes) all N² scores even when causal: same traffic
        raw = cost.standard_forward_kernels(N, D, ideal_cache=False, tile=tile)
        ideal = cost.standard_forward_kernels(N, D, ideal_cache=True)
    else:
        raw = cost.flash_forward_kernels(N, D, block, causal=causal, block_k=block)
        ideal = cost.flash_forward_kernels(N, D, block, kv_in_l2=True, causal=causal, block_k=block)
    return [(r.io, i.io) for r, i in zip(raw, ideal)]


def _design_dict(design, report, formulas, errors) -> dict:
    kernels, totals = [], {f"{d}_{k}": 0 for d in _DIRS for k in ("no_cache", "ideal")}
    ftot = dict(totals)
    arrays: dict = {}
    for ks, (f_raw, f_ideal) in zip(report.kernels, formulas):
        rows = {}
        names = dict.fromkeys([a for a, _ in ks.global_] + [a for a, _ in f_raw])
        for a in names:
            rows[a] = {}
            for d in _DIRS:
                c = ks.global_.get((a, d))
                sim_raw = 32 * c["sectors"] if c else 0
                sim_ideal = c["first_touch_bytes"] if c else 0
                f_r = FLOAT_BYTES * f_raw.get((a, d), 0)
                f_i = FLOAT_BYTES * f_ideal.get((a, d), 0)
                if not (sim_raw or f_r or sim_ideal or f_i):
                    continue
                rows[a][d] = {
                    "no_cache": sim_raw, "no_cache_formula": f_r,
                    "ideal": sim_ideal, "ideal_formula": f_i,
                    "requested": c["requested_bytes"] if c else 0,
                    "sectors": c["sectors"] if c else 0,
                    "instructions": c["instructions"] if c else 0,
                }
                for k, v in (("no_cache", sim_raw), ("ideal", sim_ideal)):
                    totals[f"{d}_{k}"] += v
                ftot[f"{d}_no_cache"] += f_r
                ftot[f"{d}_ideal"] += f_i
                acc = arrays.setdefault(a, {}).setdefault(d, dict.fromkeys(rows[a][d], 0))
                for k, v in rows[a][d].items():
                    acc[k] += v
        kernels.append({
            "name": ks.name,
            "grid": list(ks.grid),
            "block": list(ks.block),
            "shared_bytes_per_block": ks.shared_bytes_per_block,
            "shared_wavefronts": sum(c["wavefronts"] for c in ks.shared.values()),
            "bank_conflicts": sum(c["wavefronts"] - c["ideal_wavefronts"] for c in ks.shared.values()),
            "barriers": ks.barriers,
            "atomics": sum(c["requests"] for (_, d), c in ks.global_.items() if d == "atomic"),
            "warp_instructions": ks.warp_instructions,
            "hazards": ks.hazards,
            "arrays": {a: r for a, r in rows.items() if r},
        })
    totals.update({f"{k}_formula": v for k, v in ftot.items()})
    totals["total_no_cache"] = totals["read_no_cache"] + totals["write_no_cache"]
    totals["total_ideal"] = totals["read_ideal"] + totals["write_ideal"]
    totals["total_no_cache_formula"] = ftot["read_no_cache"] + ftot["write_no_cache"]
    totals["total_ideal_formula"] = ftot["read_ideal"] + ftot["write_ideal"]
    totals["shared_wavefronts"] = report.wavefronts()
    totals["barriers"] = report.barriers
    totals["atomics"] = report.atomics
    totals["launches"] = report.launches
    totals["hazards"] = report.hazards
    return {"kernels": kernels, "arrays": arrays, "totals": totals, "error": errors, "report": report.to_dict()}


def simulate_forward(seq: int = 256, head_dim: int = 64, block: int = 64, *, causal: bool = False, tile: int = 16,
                     seed: int = 0, reference: str = "torch") -> dict:
    """Run the standard (3 kernels) and flash (1 kernel, Br = Bc = ``block``) forwards on one random
    head of ``seq`` × ``head_dim`` and return every count beside its closed form (bytes, float32).

    ``reference``: "torch" compares with ``attnlab.attention_ref`` in float64; "numpy" with
    ``reference_forward`` (the same definition in numpy float64, no torch import).
    """
    from .api import _pos_int

    N, D, B = _pos_int(seq, "seq"), _pos_int(head_dim, "head_dim"), _pos_int(block, "block")
    tile = _pos_int(tile, "tile")
    if B > 1024:
        raise ValueError(f"block is the number of threads per flash block and must be <= 1024, got {B}")
    if reference not in ("torch", "numpy"):
        raise ValueError(f"reference must be 'torch' or 'numpy', got {reference!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
    out_s, rep_s = run_standard_forward(q, k, v, tile=tile, causal=causal)
    out_f, lse_f, rep_f = run_flash_forward(q, k, v, block_q=B, block_k=B, causal=causal)
    if reference == "torch":
        import torch

        from ..reference import attention_ref

        t = [torch.from_numpy(x.astype(np.float64))[None, None] for x in (q, k, v)]
        o, lse = attention_ref(*t, causal=causal)
        ref_out, ref_lse = o[0, 0].numpy(), lse[0, 0].numpy()
    else:
        ref_out, ref_lse = reference_forward(q, k, v, causal=causal)
    err = lambda a, b: float(np.max(np.abs(a.astype(np.float64) - b)))  # noqa: E731
    fin = np.isfinite(ref_lse)
    std = _design_dict("standard", rep_s, _formulas("standard", N, D, B, tile, causal), {"out": err(out_s, ref_out)})
    fl = _design_dict("flash", rep_f, _formulas("flash", N, D, B, tile, causal),
                      {"out": err(out_f, ref_out), "lse": err(lse_f[fin], ref_lse[fin])})
    return {
        "config": {"seq": N, "head_dim": D, "block_q": B, "block_k": B, "tile": tile, "causal": causal,
                   "dtype": "float32", "seed": seed, "reference": reference},
        "standard": std,
        "flash": fl,
        "ideal_ratio": std["totals"]["total_ideal"] / fl["totals"]["total_ideal"],
        "no_cache_ratio": std["totals"]["total_no_cache"] / fl["totals"]["total_no_cache"],
        "wavefront_ratio": std["totals"]["shared_wavefronts"] / fl["totals"]["shared_wavefronts"],
    }


# ---------------------------------------------------------------- printing


def _cell(sim: int, formula: int) -> str:
    """A count with its closed form underneath (= when they agree)."""
    mark = "[green]=[/green]" if sim == formula else "[red]≠[/red]"
    return f"{sim:,}\n[dim]{mark} {formula:,}[/dim]"


def traffic_table(design: dict, title: str):
    """Per kernel and array: the four HBM counts (bytes), each over its closed form, and sectors."""
    from rich.table import Table

    t = Table(title=title, header_style="bold", caption="each cell: simulated bytes over the closed form of "
              "attnlab.cost (× 4 bytes)", caption_justify="left")
    t.add_column("kernel", no_wrap=True)
    t.add_column("array", min_width=5, no_wrap=True)
    for h in ("read\nno cache", "read\nideal cache", "write\nno cache", "write\nideal cache", "sectors"):
        t.add_column(h, justify="right", no_wrap=True)
    for kern in design["kernels"]:
        first = True
        for a, dirs in kern["arrays"].items():
            cells = []
            for d in _DIRS:
                c = dirs.get(d)
                cells += ["", ""] if c is None else [_cell(c["no_cache"], c["no_cache_formula"]),
                                                     _cell(c["ideal"], c["ideal_formula"])]
            sectors = sum(c["sectors"] for c in dirs.values())
            t.add_row(kern["name"] if first else "", a, *cells, f"{sectors:,}")
            first = False
        t.rows[-1].end_section = True
    tot = design["totals"]
    t.add_row("[b]total[/b]", "", _cell(tot["read_no_cache"], tot["read_no_cache_formula"]),
              _cell(tot["read_ideal"], tot["read_ideal_formula"]),
              _cell(tot["write_no_cache"], tot["write_no_cache_formula"]),
              _cell(tot["write_ideal"], tot["write_ideal_formula"]), "")
    return t


def kernel_table(result: dict, title: str = "kernels: shared memory, barriers, atomics"):
    from rich.table import Table

    t = Table(title=title, header_style="bold")
    for h in ("kernel", "grid", "block", "smem/block\nbytes", "shared\nwavefronts", "bank\nconflicts", "barriers",
              "atomics"):
        t.add_column(h, justify="left" if h == "kernel" else "right", no_wrap=True)
    for design in ("standard", "flash"):
        for k in result[design]["kernels"]:
            dim = lambda d: "×".join(str(x) for x in (d[:2] if d[1] > 1 else d[:1]))  # noqa: E731
            t.add_row(k["name"], dim(k["grid"]), dim(k["block"]), f"{k['shared_bytes_per_block']:,}",
                      f"{k['shared_wavefronts']:,}", f"{k['bank_conflicts']:,}", f"{k['barriers']:,}",
                      f"{k['atomics']:,}")
        t.rows[-1].end_section = True
    return t


def print_simulation(result: dict, console=None) -> None:
    """Print ``simulate_forward``'s result: traffic tables, kernel table, totals and errors."""
    if console is None:
        from rich.console import Console

        console = Console()
    c = result["config"]
    shape = (f"N = {c['seq']}, d = {c['head_dim']}, one head, float32"
             f"{', causal' if c['causal'] else ''}; tiles {c['tile']}×{c['tile']}, Br = Bc = {c['block_q']}")
    console.print(traffic_table(result["standard"], f"standard forward (3 kernels), HBM bytes — {shape}"))
    console.print(traffic_table(result["flash"], f"FlashAttention forward (1 kernel), HBM bytes — {shape}"))
    console.print(kernel_table(result))
    s, f = result["standard"]["totals"], result["flash"]["totals"]
    console.print(
        f"ideal cache: standard {s['total_ideal']:,} B vs flash {f['total_ideal']:,} B → "
        f"[b]{result['ideal_ratio']:.1f}×[/b]; no cache: {s['total_no_cache']:,} B vs {f['total_no_cache']:,} B → "
        f"{result['no_cache_ratio']:.1f}×; shared wavefronts {s['shared_wavefronts']:,} vs {f['shared_wavefronts']:,}")
    ref = "attention_ref (float64)" if c["reference"] == "torch" else "float64 reference"
    console.print(f"max |error| vs {ref}: standard out {result['standard']['error']['out']:.1e}; flash out "
                  f"{result['flash']['error']['out']:.1e}, lse {result['flash']['error']['lse']:.1e}")
