"""Code 04: the backward pass with recomputation (lecture §7.1–§7.7).

1. flash_backward against autograd through the standard attention (float64, N = 300, d = 32,
   Br = 64, Bc = 48), without and with the causal mask (§7.4).
2. The identity D_i = rowsum(dO_i ∘ O_i) = rowsum(P_i ∘ dP_i) that makes the softmax backward
   blockwise (§7.3).
3. dQ's atomic adds, counted by ``IOStats`` and by the closed form ⌈N/Bc⌉·N·d (§7.4).
4. Cost tables from ``attnlab.cost``: storing P vs storing L (§7.1–7.2), the backward estimate on
   H100 (§7.5), and d / ridge across GPUs (§7.6).
5. The tiny transformer trained 30 steps from one initialisation with "standard" and with "flash"
   attention (§7.7), flash with Br = Bc = 8 (5 blocks per sequence) and one block covering the sequence: the losses and
   parameters differ only by float32 rounding. The blocks per sequence are counted by ``IOStats``.

Every number printed is computed here and returned.
"""

from __future__ import annotations

import math

import torch

from attnlab import IOStats, attention_ref, flash_backward, flash_forward
from attnlab.model import ModelConfig, TrainConfig, Transformer, train_steps
from attnlab.model.train import cpu_threads

N, D, BR, BC = 300, 32, 64, 48  # §7.4
TRAIN_STEPS, TRAIN_BATCH, TRAIN_SEED = 30, 8, 0  # §7.7
P_VS_L = dict(heads=32, dtype_bytes=2)  # §7.1–7.2
BACKWARD_H100 = dict(seq=4096, head_dim=128, heads=32, dtype_bytes=2, gpu="H100")  # §7.5
RECOMPUTE = dict(head_dim=128, dtype_bytes=2)  # §7.6
TRAIN_BLOCKS = (8,)  # Br = Bc of the flash runs, besides one block covering the whole sequence


def _inputs(seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(1, 1, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    return q, k, v, do


def backward_check(console) -> dict:
    from rich.table import Table

    q, k, v, do = _inputs()
    table = Table(title=f"1 · flash_backward vs autograd through attention_ref (float64, N={N}, d={D}, "
                        f"Br={BR}, Bc={BC}) (§7.4)")
    for col in ("mask", "max |ΔdQ|", "max |ΔdK|", "max |ΔdV|"):
        table.add_column(col, justify="right")
    out = {}
    for causal in (False, True):
        qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
        o_ref, _ = attention_ref(qr, kr, vr, causal=causal)
        (o_ref * do).sum().backward()  # = o_ref.backward(do), without the sympy import that costs seconds
        o, lse = flash_forward(q, k, v, causal=causal, block_q=BR, block_k=BC)
        dq, dk, dv = flash_backward(q, k, v, o, lse, do, causal=causal, block_q=BR, block_k=BC)
        diffs = [float((a - b.grad).abs().max()) for a, b in ((dq, qr), (dk, kr), (dv, vr))]
        name = "causal" if causal else "none"
        out[name] = dict(zip(("dq", "dk", "dv"), diffs))
        table.add_row(name, *(f"{x:.1e}" for x in diffs))
    console.print(table)
    return out


def d_identity(console) -> dict:
    q, k, v, do = _inputs()
    o, _, p = attention_ref(q, k, v, return_probs=True)  # P (1, 1, N, N)
    dp = do @ v.transpose(-1, -2)  # dP = dO Vᵀ
    d_flash = (do * o).sum(-1)  # rowsum(dO ∘ O): N·d work, no P needed
    d_full = (p * dp).sum(-1)  # rowsum(P ∘ dP): needs the whole row of P
    diff = float((d_flash - d_full).abs().max())
    console.print(f"[b]2 · D_i[/b] (§7.3): rowsum(dO∘O) vs rowsum(P∘dP) over {N} rows: max difference {diff:.1e} "
                  f"(|D_i| up to {float(d_full.abs().max()):.2f})")
    return {"max_diff": diff, "max_abs": float(d_full.abs().max())}


def atomics(console) -> dict:
    from attnlab.cost import dq_atomic_elements

    q, k, v, do = _inputs()
    o, lse = flash_forward(q, k, v, block_q=BR, block_k=BC)
    st = IOStats()
    flash_backward(q, k, v, o, lse, do, block_q=BR, block_k=BC, stats=st)
    counted = st.atomic_adds.get("dQ", 0)
    formula = dq_atomic_elements(seq=N, head_dim=D, block_k=BC, block_q=BR)
    kv_blocks = -(-N // BC)
    console.print(f"[b]3 · dQ atomic adds[/b] (§7.4): counted {counted:,}; ⌈N/Bc⌉·N·d = {kv_blocks} × {N} × {D} = "
                  f"{kv_blocks * N * D:,}; attnlab.cost: {formula:,}")
    return {"counted": counted, "formula": kv_blocks * N * D, "cost_model": formula, "kv_blocks": kv_blocks}


def cost_tables(console) -> dict:
    from rich.table import Table

    from attnlab.cost import estimate_backward, p_vs_l_table, recompute_table, render_table
    from attnlab.cost.tables import fmt_bytes, fmt_flops, fmt_time

    a, b, c = P_VS_L, BACKWARD_H100, RECOMPUTE
    pl = p_vs_l_table(**a)
    console.print(render_table(pl, title=f"4a · one layer, {a['heads']} heads, {8 * a['dtype_bytes']}-bit: keep P "
                                         f"(standard) or L (flash)? (§7.1–7.2)"))
    est = estimate_backward(**b)
    t = Table(title=f"4b · attention backward on {b['gpu']}, N {b['seq']}, d {b['head_dim']}, {b['heads']} heads, "
                    f"{8 * b['dtype_bytes']}-bit: roofline lower bound (§7.5)")
    for col in ("algorithm", "kernels", "matmul FLOPs", "HBM bytes", "time"):
        t.add_column(col, justify="right")
    for name, ks in (("standard (stores P)", est.standard), ("flash (recomputes P)", est.flash_l2)):
        t.add_row(name, str(len(ks)), fmt_flops(sum(k.flops for k in ks)), fmt_bytes(sum(k.bytes for k in ks)),
                  fmt_time(sum(k.time for k in ks)))
    console.print(t)
    console.print(f"   flash: {100 * (est.flops_ratio - 1):+.0f}% FLOPs, 1/{est.traffic_ratio:.0f} of the traffic, "
                  f"{est.speedup:.1f}× faster")
    rc = recompute_table(**c)
    console.print(render_table(rc, title=f"4c · recompute S (2d FLOP) or read P back ({c['dtype_bytes']} bytes)? "
                                         f"d / ridge, d = {c['head_dim']} (§7.6)"))
    return {"p_vs_l": [r.to_dict() for r in pl],
            "backward": {"flops_ratio": est.flops_ratio, "traffic_ratio": est.traffic_ratio, "speedup": est.speedup,
                         "standard_time": est.standard_time, "flash_time": est.flash_time},
            "recompute": [dict(r.to_dict(), recompute_cheaper=r.recompute_cheaper) for r in rc]}


def _block_pairs(seq: int, block: int) -> dict:
    """How the causal blockwise forward tiles one sequence of ``seq`` tokens with Br = Bc = ``block``:
    counted by ``IOStats`` on one (batch, head), not computed from a formula."""
    st = IOStats()
    x = torch.zeros(1, 1, seq, 8)
    flash_forward(x, x, x, causal=True, block_q=block, block_k=block, stats=st)
    pairs = st.pairs_computed + st.pairs_skipped  # every (Q block, K/V block) pair: T × T
    return {"blocks": math.isqrt(pairs), "pairs_computed": st.pairs_computed, "pairs_skipped": st.pairs_skipped}


def _train(cfg, tc, init_state, seqs=None) -> tuple[Transformer, list[float]]:
    """TRAIN_STEPS steps from ``init_state``; ``seqs`` collects the sequence length of every forward."""
    model = Transformer(cfg)
    model.load_state_dict(init_state)  # one initialisation for every run
    hook = None
    if seqs is not None:
        hook = model.layers[0].attn.register_forward_hook(lambda mod, args, out: seqs.add(args[0].shape[1]))
    losses = train_steps(model, tc, seed=TRAIN_SEED)
    if hook is not None:
        hook.remove()
    return model, losses


def _max_param_diff(a: Transformer, b: Transformer) -> float:
    return max(float((x - y).detach().abs().max()) for x, y in zip(a.parameters(), b.parameters()))


def train_standard_vs_flash(console) -> dict:
    from rich.table import Table

    cfg = ModelConfig.from_name("likesworld")
    tc = TrainConfig(steps=TRAIN_STEPS, warmup=5, batch_size=TRAIN_BATCH)
    whole = tc.world().max_len - 1  # the longest model input: a sequence less its last token
    torch.manual_seed(TRAIN_SEED)
    init = Transformer(cfg).state_dict()
    seqs: set[int] = set()
    std, l_std = _train(cfg.replace(attention="standard"), tc, init, seqs)
    seq = max(seqs)
    runs = {}
    for block in (*TRAIN_BLOCKS, whole):
        fl, l_fl = _train(cfg.replace(attention="flash", flash_block=block), tc, init)
        runs[block] = {"model": fl, "max_loss_diff": max(abs(a - b) for a, b in zip(l_std, l_fl)),
                       "max_param_diff": _max_param_diff(std, fl), **_block_pairs(seq, block)}
    one = runs[whole]["model"]
    table = Table(title=f"5 · training with flash attention (§7.7): {TRAIN_STEPS} steps (batch {TRAIN_BATCH}) "
                        f"from one initialisation, sequences of {min(seqs)}–{seq} tokens; loss "
                        f"{l_std[0]:.3f} → {l_std[-1]:.3f}")
    for col in ("Br = Bc", f"blocks per {seq}-token sequence", "block pairs computed / skipped",
                "max |Δloss| vs standard", "max |Δparam| vs standard", "max |Δparam| vs one block"):
        table.add_column(col, justify="right")
    out = {"steps": TRAIN_STEPS, "loss_first": l_std[0], "loss_last": l_std[-1], "seq": seq,
           "seq_min": min(seqs), "blocks": {}}
    for block, r in runs.items():
        r["max_param_diff_vs_one_block"] = _max_param_diff(r.pop("model"), one)
        out["blocks"][block] = r
        table.add_row(str(block), str(r["blocks"]), f"{r['pairs_computed']} / {r['pairs_skipped']}",
                      f"{r['max_loss_diff']:.1e}", f"{r['max_param_diff']:.1e}",
                      f"{r['max_param_diff_vs_one_block']:.1e}")
    console.print(table)
    worst = max(r["max_param_diff"] for r in runs.values())
    console.print(f"   every block size trains the same model as standard attention up to float32 rounding "
                  f"(largest parameter difference {worst:.1e}); the forward keeps only q, k, v, O, L")
    return out


def run(out_dir=None, console=None) -> dict:
    """Run the five demonstrations of code 04; return every number printed."""
    from attnlab._console import make_console

    console = console or make_console()
    with cpu_threads():
        return {"backward": backward_check(console), "d_identity": d_identity(console), "atomics": atomics(console),
                "cost": cost_tables(console), "training": train_standard_vs_flash(console)}
