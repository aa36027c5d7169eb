"""Code 01: attention in a tiny transformer, and why attention is slow (lecture §2.2, §3.1–§3.2).

1. LikesWorld (§2.2): the 2-layer, 4-head model answers held-out questions; the "random item of the
   context" baseline, computed on the same sequences.
2. Two-step lookup (§2.2): the owner head (an item looks two tokens back, at its owner) and the
   lookup heads (the questioned name looks at that person's item), found automatically from the
   attention maps, with their average weights; heatmaps of both saved as PNGs.
3. Head ablation (§2.2): accuracy with each head's output zeroed.
4. The 7B layer's FLOPs and the size of S (§3.1–§3.2), from ``attnlab.cost``.

The first run trains the model (about a minute, cached afterwards). Every number printed is computed
here and returned.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab.model import (
    LikesWorld,
    ablation,
    accuracy,
    attention_maps,
    baseline_accuracy,
    detokenize,
    get_model,
    head_roles,
    plot_attention_panels,
)
from attnlab.model.train import cpu_threads

PROBE_SEQUENCES = 250  # head scores and ablation: 500 answers
LAYER_7B = dict(d_model=4096, heads=32, ffn_dim=11008, causal=True, gpu="H100")  # §3.1


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def accuracy_vs_baseline(console, tm, test) -> dict:
    cfg = tm.model_config
    acc = accuracy(tm.model, test)
    base = baseline_accuracy(test)
    n_ans = int(test.answer_mask.sum())
    console.print(f"[b]1 · LikesWorld[/b] (§2.2): {cfg.n_layers} layers, {cfg.n_heads} heads × {cfg.head_dim} dims, "
                  f"{tm.model.num_parameters():,} parameters, trained {tm.metrics['seconds']:.0f} s "
                  f"({tm.train_config.steps} steps, seed {tm.metrics['seed']})")
    console.print(f"   example: {detokenize(test.tokens[0])}")
    console.print(f"   test accuracy [b]{_pct(acc)}[/b] on {n_ans:,} answers of {len(test):,} held-out sequences; "
                  f"random item of the context: {_pct(base)}")
    return {"parameters": tm.model.num_parameters(), "test_accuracy": acc, "baseline": base,
            "test_sequences": len(test), "answers": n_ans, "train_seconds": tm.metrics["seconds"]}


def roles(console, tm, probe, out_dir) -> dict:
    from rich.table import Table

    r = head_roles(tm.model, probe)
    (ol, oh, ow) = r.owner
    table = Table(title="2 · what each head attends to (§2.2), average weight")
    table.add_column("head")
    table.add_column("item → its owner (2 back)", justify="right")
    table.add_column("questioned name → correct item", justify="right")
    table.add_column("role")
    lookup_set = {(l, h) for l, h, _ in r.lookup}
    L, H = r.scores["owner"].shape
    for l in range(L):
        for h in range(H):
            role = "owner" if (l, h) == (ol, oh) else ("lookup" if (l, h) in lookup_set else "")
            table.add_row(f"L{l}H{h}", _pct(r.scores["owner"][l, h]), _pct(r.scores["lookup"][l, h]), role)
    console.print(table)
    (ll, lh, lw) = r.lookup[0]
    console.print(f"   owner head [b]L{ol}H{oh}[/b]: at each fact's item, {_pct(ow)} of its weight on the owner "
                  f"two tokens back — the item's vector now 'remembers' its owner")
    console.print(f"   lookup head [b]L{ll}H{lh}[/b]: at the questioned name, {_pct(lw)} on the correct item"
                  + "".join(f"; L{l}H{h} also looks up ({_pct(w)})" for l, h, w in r.lookup[1:]))
    out = {"owner": {"layer": ol, "head": oh, "weight": ow},
           "lookup": [{"layer": l, "head": h, "weight": w} for l, h, w in r.lookup],
           "scores": {k: v.tolist() for k, v in r.scores.items()}, "plots": []}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        row = int(torch.nonzero(probe.n_facts == 4)[0]) if (probe.n_facts == 4).any() else 0
        n = int(probe.lengths[row])
        tokens = detokenize(probe.tokens[row, :n]).split()
        maps = attention_maps(tm.model, probe.tokens[row : row + 1, :n])
        b, item, name = probe.owner_pairs()
        owner_cells = [(i, j) for bb, i, j in zip(b.tolist(), item.tolist(), name.tolist()) if bb == row]
        qb, qpos, target = probe.lookup_triples()
        lookup_cells = [(q, t) for bb, q, t in zip(qb.tolist(), qpos.tolist(), target.tolist()) if bb == row]
        path = plot_attention_panels(
            [(maps[ol][0, oh], f"owner head L{ol}H{oh}: items look 2 back (avg {_pct(ow)})", owner_cells),
             (maps[ll][0, lh], f"lookup head L{ll}H{lh}: questioned name → its item (avg {_pct(lw)})",
              lookup_cells)],
            tokens, out_dir / "demo01_owner_and_lookup_heads.png")
        out["plots"] = [str(path)]
        console.print(f"   heatmaps of the two heads: {path}")
    return out


def ablate(console, tm, probe, found) -> dict:
    from rich.table import Table

    ab = ablation(tm.model, probe)
    owner = (found["owner"]["layer"], found["owner"]["head"])
    lookups = {(x["layer"], x["head"]) for x in found["lookup"]}
    table = Table(title=f"3 · accuracy with one head zeroed (§2.2); all heads: {_pct(ab['full'])}")
    table.add_column("head zeroed")
    table.add_column("accuracy", justify="right")
    table.add_column("role")
    for (l, h), acc in ab["heads"].items():
        role = "owner" if (l, h) == owner else ("lookup" if (l, h) in lookups else "")
        table.add_row(f"L{l}H{h}", _pct(acc), role)
    console.print(table)
    spare = sum(acc >= 0.99 for acc in ab["heads"].values())
    console.print(f"   {spare} of {len(ab['heads'])} heads can go with accuracy still ≥ 99%; the owner head "
                  f"L{owner[0]}H{owner[1]} cannot ({_pct(ab['heads'][owner])}, baseline "
                  f"{_pct(baseline_accuracy(probe))})")
    return {"full": ab["full"], "heads": {f"L{l}H{h}": a for (l, h), a in ab["heads"].items()},
            "heads_above_99": spare, "baseline": baseline_accuracy(probe)}


def flops_7b(console) -> dict:
    from attnlab.cost import layer_flops_table, render_table

    c = LAYER_7B
    rows = layer_flops_table(**c)
    console.print(render_table(rows, title=f"4 · one 7B layer (d_model {c['d_model']}, {c['heads']} × "
                                           f"{c['d_model'] // c['heads']}, FFN {c['ffn_dim']}, "
                                           f"{'causal' if c['causal'] else 'no mask'}) on {c['gpu']} (§3.1–3.2)"))
    last, k32 = rows[-1], next(r for r in rows if r.seq == 32768)
    console.print(f"   attention is {_pct(rows[0].attention_share)} of the FLOPs at N = {rows[0].seq:,} and "
                  f"{_pct(last.attention_share)} at {last.seq:,}; at 32K, S for all heads takes "
                  f"{k32.scores_bytes / 2**30:.0f} GiB ({_pct(k32.scores_share_of_memory)} of HBM), and moving it "
                  f"costs {k32.traffic_time * 1e3:.0f} ms against {k32.math_time * 1e3:.0f} ms of matmul")
    return {"rows": [r.to_dict() for r in rows]}


def run(out_dir=None, console=None) -> dict:
    """Run the four demonstrations of code 01; return every number printed."""
    from attnlab._console import make_console

    console = console or make_console()
    out_dir = Path(out_dir) if out_dir is not None else None
    with cpu_threads():
        tm = get_model(console=console, attention="sdpa")  # same weights; the fused kernel evaluates faster
        world = tm.train_config.world()
        test = world.test_set(tm.train_config.test_size)
        probe = LikesWorld(world.min_facts, world.max_facts, world.n_questions, world.question_format).test_set(
            PROBE_SEQUENCES, seed=7)
        out = {"accuracy": accuracy_vs_baseline(console, tm, test)}
        out["roles"] = roles(console, tm, probe, out_dir)
        out["ablation"] = ablate(console, tm, probe, out["roles"])
        out["flops_7b"] = flops_7b(console)
    return out
