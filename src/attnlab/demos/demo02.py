"""Code 02: three softmaxes, the merge ⊕ and online attention (lecture §4.1–§4.5).

1. Overflow (§4.1): where ``exp`` leaves float32 / float16, and what naive softmax makes of it.
2. Passes and rescales (§4.2–§4.3): naive 2 passes, safe 3, online 2, counted element by element on
   4096 random numbers; the online version's rescales against their expectation Σ_{k=2}^{N} 1/k.
3. Merge orders (§4.4): four ways of combining 10,000 summaries against ``torch.logsumexp``.
4. Online attention (§4.5): one query row (d = 2) through 4 K/V blocks, state (m, ℓ, o) after each.

Uses attnlab's public API only; every number printed is computed here and returned.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from attnlab.reference import attention_ref
from attnlab.softmax import (
    AttnState,
    SoftmaxCounts,
    Summary,
    expected_rescales,
    merge,
    merge_factors,
    naive_softmax,
    online_softmax,
    safe_softmax,
    summarize,
)

SEED = 2
SEED_ROW = 28  # an example row whose block 2 raises the running maximum, as in the lecture's
N_PASSES = 4096  # §4.2–4.3: "4096 个数"
N_MERGE = 10_000  # §4.4: "10000 个数"
N_CHUNKS = 7
N_BLOCKS, KEYS_PER_BLOCK, D_ROW = 4, 2, 2  # §4.5: one row, d = 2, 4 K/V blocks


def _fmt(xs, digits=4) -> str:
    return "[" + ", ".join(f"{float(x):.{digits}g}" for x in np.ravel(xs)) + "]"


def _pair(xs) -> str:
    return " ".join(f"{float(x):+.3f}" for x in np.ravel(xs))


# -- 1. overflow -------------------------------------------------------------------------------------


def overflow(console) -> dict:
    from rich.table import Table

    out = {}
    for dtype in (np.float32, np.float16):
        big = float(np.finfo(dtype).max)
        threshold = math.log(big)  # e^x > max  <=>  x > ln(max)
        top = math.ceil(threshold)  # the first integer past the threshold
        x = np.array([top - 10, top - 3, top], dtype=dtype)
        naive, safe, online = naive_softmax(x), safe_softmax(x), online_softmax(x)
        with np.errstate(over="ignore"):
            exp_below, exp_above = float(np.exp(dtype(threshold - 0.01))), float(np.exp(dtype(top)))
        out[np.dtype(dtype).name] = {
            "max": big, "threshold": threshold, "exp_below": exp_below, "exp_above": exp_above, "x": x.tolist(),
            "naive": naive.tolist(), "safe": safe.tolist(), "online": online.tolist(),
            "naive_has_nan": bool(np.isnan(naive).any()),
            "safe_finite": bool(np.isfinite(safe).all() and np.isfinite(online).all())}
    table = Table(title="1 · naive softmax overflows (§4.1)")
    table.add_column("")
    for name in out:
        table.add_column(name, justify="right")
    rows = [("largest finite", lambda r: f"{r['max']:.4g}"),
            ("e^x overflows past x =", lambda r: f"{r['threshold']:.2f}"),
            ("e^(ln(max) − 0.01)", lambda r: f"{r['exp_below']:.4g}"),
            ("row x", lambda r: _fmt(r["x"])),
            ("naive softmax", lambda r: _fmt(r["naive"], 3)),
            ("safe softmax", lambda r: _fmt(r["safe"], 3)),
            ("online softmax", lambda r: _fmt(r["online"], 3))]
    for label, f in rows:
        table.add_row(label, *[f(r) for r in out.values()])
    console.print(table)
    console.print("[dim]inf / inf = nan: one overflowing score spoils the whole row; "
                  "subtracting the maximum first keeps every exponent ≤ 0.[/dim]")
    return out


# -- 2. passes and rescales ----------------------------------------------------------------------------


def passes(console, out_dir) -> dict:
    from rich.table import Table

    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(N_PASSES, generator=g, dtype=torch.float64).numpy()
    want = torch.softmax(torch.from_numpy(x), 0).numpy()
    table = Table(title=f"2 · passes over {N_PASSES} numbers, counted element by element (§4.2–§4.3)")
    for c in ("softmax", "passes", "elements read", "exp", "rescales", "|Δ| vs torch"):
        table.add_column(c, justify="right" if c != "softmax" else "left")
    out = {"n": N_PASSES, "x": x}
    for name, f in (("naive", naive_softmax), ("safe", safe_softmax), ("online", online_softmax)):
        c = SoftmaxCounts()
        y = f(x, counts=c)
        err = float(np.abs(y - want).max())
        out[name] = {"passes": c.passes, "reads": c.reads, "exps": c.exps, "rescales": c.rescales,
                     "rescale_at": list(c.rescale_at), "max_abs_diff": err}
        table.add_row(name, str(c.passes), f"{c.reads:,}", f"{c.exps:,}",
                      str(c.rescales) if name == "online" else "—", f"{err:.1e}")
    console.print(table)
    exp_r = expected_rescales(N_PASSES)
    out["expected_rescales"] = exp_r
    out["ln_n"] = math.log(N_PASSES)
    console.print(f"online softmax re-based its sum {out['online']['rescales']} times "
                  f"(at k = {', '.join(map(str, out['online']['rescale_at']))}); "
                  f"expected Σ_{{k=2}}^{{{N_PASSES}}} 1/k = {exp_r:.1f} (ln N = {out['ln_n']:.1f})")
    if out_dir is not None:
        out["plot"] = str(_plot_rescales(out, Path(out_dir)))
        console.print(f"[dim]plot: {out['plot']}[/dim]")
    return out


def _plot_rescales(res: dict, out_dir: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no global state
    from matplotlib.figure import Figure

    n = res["n"]
    at = res["online"]["rescale_at"]
    k = np.arange(1, n + 1)
    expected = np.concatenate([[0.0], np.cumsum(1.0 / k[1:])])  # Σ_{i=2}^{k} 1/i
    fig = Figure(figsize=(7, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.step([1, *at, n], list(range(len(at) + 1)) + [len(at)], where="post", label="rescales (counted)")
    ax.plot(k, expected, "--", label="expected Σ 1/i")
    ax.scatter(at, range(1, len(at) + 1), s=12, zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("element k (new maximum at the dots)")
    ax.set_ylabel("rescales so far")
    ax.set_title(f"online softmax on {n} random numbers")
    ax.legend()
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "demo02_rescales.png"
    fig.savefig(path, dpi=120)
    return path


# -- 3. merge orders -----------------------------------------------------------------------------------


def _one_by_one(x) -> Summary:
    t = x.dtype.type
    s = Summary(t(-np.inf), t(0))
    one = t(1)
    for xj in x:
        s = merge(s, Summary(xj, one))
    return s


def _tree(x) -> tuple[Summary, int]:
    """Pairwise tree: merge neighbours level by level (a leftover odd one waits a level)."""
    s, depth = Summary(x.copy(), np.ones_like(x)), 0
    while len(s.m) > 1:
        n2 = len(s.m) // 2 * 2
        merged = merge(Summary(s.m[0:n2:2], s.l[0:n2:2]), Summary(s.m[1:n2:2], s.l[1:n2:2]))
        s = Summary(np.concatenate([merged.m, s.m[n2:]]), np.concatenate([merged.l, s.l[n2:]]))
        depth += 1
    return Summary(s.m[0], s.l[0]), depth


def _fold(parts) -> Summary:
    s = parts[0]
    for p in parts[1:]:
        s = merge(s, p)
    return s


def merge_orders(console) -> dict:
    from rich.table import Table

    g = torch.Generator().manual_seed(SEED + 1)
    x64 = (torch.randn(N_MERGE, generator=g, dtype=torch.float64) * 5).numpy()
    cuts = np.sort(torch.randperm(N_MERGE - 1, generator=g)[: N_CHUNKS - 1].numpy() + 1)
    bounds = [0, *cuts.tolist(), N_MERGE]
    order = torch.randperm(N_CHUNKS, generator=g).tolist()
    out = {"n": N_MERGE, "x": x64, "chunk_sizes": [b - a for a, b in zip(bounds[:-1], bounds[1:])], "shuffle": order}
    rows = {}
    for dtype in (np.float64, np.float32):
        x = x64.astype(dtype)
        want = float(torch.logsumexp(torch.from_numpy(x), 0))
        chunks = [summarize(x[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        tree, depth = _tree(x)
        results = {
            "one by one": _one_by_one(x),
            f"{N_CHUNKS} uneven chunks": _fold(chunks),
            "pairwise tree": tree,
            f"{N_CHUNKS} chunks, shuffled": _fold([chunks[i] for i in order]),
        }
        name = np.dtype(dtype).name
        out[name] = {"torch_logsumexp": want, "tree_depth": depth, "orders": {}}
        for label, s in results.items():
            lse = float(s.lse)
            out[name]["orders"][label] = {"lse": lse, "abs_diff": abs(lse - want)}
            rows.setdefault(label, []).extend([lse, abs(lse - want)])
        out[name]["max_abs_diff"] = max(v["abs_diff"] for v in out[name]["orders"].values())
    table = Table(title=f"3 · four merge orders of {N_MERGE:,} summaries vs torch.logsumexp (§4.4)",
                  caption=f"torch.logsumexp: {out['float64']['torch_logsumexp']:.15f} (float64), "
                          f"{out['float32']['torch_logsumexp']:.6f} (float32)")
    for c in ("order", "|Δ| float64", "lse float32", "|Δ| float32"):
        table.add_column(c, justify="right" if c != "order" else "left")
    for label, (_, d64, l32, d32) in rows.items():
        table.add_row(label + (f" ({out['float64']['tree_depth']} levels)" if label == "pairwise tree" else ""),
                      f"{d64:.1e}", f"{l32:.6f}", f"{d32:.1e}")
    console.print(table)
    console.print(f"chunk sizes {out['chunk_sizes']}, shuffled order {order}. float64: max |Δ| = "
                  f"{out['float64']['max_abs_diff']:.1e}; float32: max |Δ| = {out['float32']['max_abs_diff']:.1e} — "
                  "the same value, summed in another order, differs in the last bits.")
    return out


# -- 4. online attention -------------------------------------------------------------------------------


def online_attention(console) -> dict:
    from rich.table import Table

    g = torch.Generator().manual_seed(SEED_ROW)
    N = N_BLOCKS * KEYS_PER_BLOCK
    q = torch.randn(D_ROW, generator=g, dtype=torch.float64)
    k = torch.randn(N, D_ROW, generator=g, dtype=torch.float64)
    v = torch.randn(N, D_ROW, generator=g, dtype=torch.float64)
    s = k @ q / math.sqrt(D_ROW)  # the row of scores
    state = AttnState(torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64),
                      torch.zeros(D_ROW, dtype=torch.float64))
    table = Table(title=f"4 · one query row (d = {D_ROW}) through {N_BLOCKS} K/V blocks (§4.5)")
    for c in ("block", "scores", "rescale", "m", "ℓ", "o", "o / ℓ"):
        table.add_column(c, justify="right")
    steps = []
    for b in range(N_BLOCKS):
        sl = slice(b * KEYS_PER_BLOCK, (b + 1) * KEYS_PER_BLOCK)
        block = AttnState.from_scores(s[sl], v[sl])
        _, c_old, _ = merge_factors(state, block)  # the factor e^(m_old - m_new) applied to the old ℓ, o
        new = merge(state, block)
        step = {"scores": s[sl].tolist(), "block_max": float(block.m), "rescale": float(c_old),
                "max_grew": b > 0 and float(new.m) > float(state.m), "m": float(new.m), "l": float(new.l),
                "o": new.o.tolist(), "out": new.finish().tolist()}
        steps.append(step)
        state = new
        table.add_row(str(b + 1), _pair(step["scores"]), "—" if b == 0 else f"{step['rescale']:.3f}",
                      f"{step['m']:+.3f}", f"{step['l']:.3f}", _pair(step["o"]), _pair(step["out"]))
    console.print(table)
    ref, _ = attention_ref(q.view(1, 1, 1, D_ROW), k.view(1, 1, N, D_ROW), v.view(1, 1, N, D_ROW))
    ref = ref.view(D_ROW)
    final = state.finish()
    diff = float((final - ref).abs().max())
    grew = [(i + 1, st["rescale"]) for i, st in enumerate(steps) if st["max_grew"]]
    console.print("o = Σ e^(s−m)·v (unnormalised); rescale = e^(m_old − m), the factor on the old ℓ and o")
    console.print(f"online result {_pair(final)}, attention_ref {_pair(ref)}: max |Δ| = {diff:.1e}")
    if grew:
        console.print("the maximum grew at block " + ", ".join(f"{b} (old ℓ and o × {c:.3f})" for b, c in grew))
    return {"q": q.tolist(), "k": k.tolist(), "v": v.tolist(), "steps": steps, "out": final.tolist(),
            "reference": ref.tolist(), "max_abs_diff": diff, "max_grew_at": [b for b, _ in grew]}


def run(out_dir=None, console=None) -> dict:
    """Run the four demonstrations of code 02; return every number printed."""
    from .._console import make_console

    console = console or make_console()
    return {"overflow": overflow(console), "passes": passes(console, out_dir),
            "merge": merge_orders(console), "online_attention": online_attention(console)}
