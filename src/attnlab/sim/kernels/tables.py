"""Rich tables of ``simulate_forward``'s result: per kernel and array the HBM counts, each over its
closed form; per kernel shared memory, barriers and atomics (lecture §5.3–5.4, §6.2).
``attnlab simulate`` and demo 03 print with ``print_simulation``.
"""

from __future__ import annotations

from attnlab._console import make_console

from .simulate import FLOAT_BYTES

_DIRS = ("read", "write")


def _cell(sim: int, formula: int) -> str:
    """A count with its closed form underneath (= when they agree)."""
    mark = "[green]=[/green]" if sim == formula else "[red]≠[/red]"
    return f"{sim:,}\n[dim]{mark} {formula:,}[/dim]"


def traffic_table(design: dict, title: str):
    """Per kernel and array: the four HBM counts (bytes), each over its closed form, and sectors."""
    from rich.table import Table

    t = Table(title=title, header_style="bold", caption="each cell: simulated bytes over the closed form of "
              f"attnlab.cost (× {FLOAT_BYTES} bytes)", caption_justify="left")
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
        console = make_console()
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
