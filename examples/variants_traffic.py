"""What a sliding window and packing save: pairs, block pairs and K/V bytes, from attnlab.cost.window's
closed forms (the variants beyond the lecture, with §6.2's block skipping and §5.4's traffic).

    python examples/variants_traffic.py [--window 4096] [--head-dim 128] [--block 128]
                                        [--lengths 8192,1000,...] [--out DIR | --no-plot]

1. Causal attention against a causal sliding window of W keys at N = 1K .. 64K: visible (query, key)
   pairs, the (Q block, K block) pairs an FA2 loop visits, the K/V bytes it reads per (batch, K/V
   head). Causal traffic grows as N², the window's as N·(Br + W)/Br.
2. A mixed batch of documents packed end to end (varlen) against the same batch padded to the longest.
3. The closed forms beside what ``attnlab.blockwise`` counts (``IOStats``) running the same shapes at a
   small N: equal, number for number.
4. A plot of K/V bytes against N, ``window_traffic.png`` in ``--out`` (default attnlab-out).

Bad arguments print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

import torch

from attnlab import cost
from attnlab._cliargs import positive_int
from attnlab._console import make_console
from attnlab.blockwise import IOStats, flash_forward, flash_forward_varlen

SEQS = [1024 << k for k in range(7)]  # 1K .. 64K
LENGTHS = [8192, 1000, 3000, 250, 6000, 512, 77, 1800]  # a mixed batch: one long document, many short
PLOT_NAME = "window_traffic.png"


def window_rows(*, seqs=SEQS, window: int = 4096, head_dim: int = 128, block: int = 128, dtype_bytes: int = 2):
    """One row per N: causal vs a causal window of ``window`` keys (flash-attn's window (W − 1, 0))."""
    rows = []
    for n in seqs:
        row = {"N": n, "dense_pairs": n * n}
        for name, kw in (("causal", dict(causal=True)), ("window", dict(window=(window - 1, 0)))):
            bp = cost.window_block_pairs(seq_q=n, seq_k=n, block_q=block, block_k=block, **kw)
            row[f"{name}_pairs"] = cost.visible_pairs(seq_q=n, seq_k=n, **kw)
            row[f"{name}_fraction"] = cost.visible_fraction(seq_q=n, seq_k=n, **kw)
            row[f"{name}_blocks"] = bp.pairs
            row[f"{name}_kv_bytes"] = cost.window_kv_bytes(seq=n, head_dim=head_dim, block_q=block, block_k=block,
                                                          dtype_bytes=dtype_bytes, **kw)
        row["saving"] = row["causal_kv_bytes"] / row["window_kv_bytes"]
        rows.append(row)
    return rows


def packing_rows(*, lengths=LENGTHS, window: int = 4096, head_dim: int = 128, block: int = 128,
                 dtype_bytes: int = 2):
    """Packed vs padded for the batch ``lengths``, causal and with the window."""
    rows = []
    for name, kw in (("causal", dict(causal=True)), (f"window {window}", dict(window=(window - 1, 0)))):
        pv = cost.packed_vs_padded(seqlens_q=lengths, block_q=block, block_k=block, **kw)
        kv = 2 * head_dim * dtype_bytes
        rows.append({"mask": name, "docs": len(lengths), "longest": max(lengths), "tokens": pv.tokens, "padded_tokens": pv.padded_tokens, "pairs": pv.pairs,
                     "padded_pairs": pv.padded_pairs, "blocks": pv.blocks, "padded_blocks": pv.padded_blocks,
                     "kv_bytes": pv.kv_rows * kv, "padded_kv_bytes": pv.padded_kv_rows * kv,
                     "ratio": pv.blocks_ratio})
    return rows


def measured_rows(*, seq: int = 256, window: int = 64, block_q: int = 32, block_k: int = 16,
                  lengths=(100, 37, 256, 5)):
    """(what, closed form, IOStats) for flash_forward at N = ``seq`` with a causal window and for
    flash_forward_varlen on ``lengths``: B = 1, H = 4, Hkv = 2, D = 16."""
    gen = torch.Generator().manual_seed(0)  # the counts do not depend on the values
    H, Hkv, D = 4, 2, 16
    win = (window - 1, 0)
    q, k, v = (torch.randn(1, h, seq, D, generator=gen) for h in (H, Hkv, Hkv))
    st = IOStats()
    flash_forward(q, k, v, window=win, block_q=block_q, block_k=block_k, stats=st)
    want = cost.window_forward_io(seq_q=seq, seq_k=seq, head_dim=D, block_q=block_q, block_k=block_k, window=win,
                                  heads=H, kv_heads=Hkv)
    rows = _compare(f"N = {seq}, window {window}", want, st)
    total = sum(lengths)
    cu = torch.tensor([0] + [sum(lengths[:b + 1]) for b in range(len(lengths))], dtype=torch.int32)
    qp, kp, vp = (torch.randn(total, h, D, generator=gen) for h in (H, Hkv, Hkv))
    st = IOStats()
    flash_forward_varlen(qp, kp, vp, cu, cu, window=win, block_q=block_q, block_k=block_k, stats=st)
    want = cost.varlen_forward_io(seqlens_q=list(lengths), head_dim=D, block_q=block_q, block_k=block_k, window=win,
                                  heads=H, kv_heads=Hkv)
    return rows + _compare(f"packed {list(lengths)}, window {window}", want, st)


def _compare(case: str, want: dict, stats: IOStats):
    got = stats.as_dict()
    rows = [(case, f"{name} read", want["reads"][name], got["reads"].get(name, 0)) for name in ("Q", "K", "V")]
    rows += [(case, f"{name} written", want["writes"][name], got["writes"].get(name, 0)) for name in ("O", "L")]
    rows += [(case, f"block pairs {what}", want[f"pairs_{what}"], got[f"pairs_{what}"])
             for what in ("computed", "masked", "skipped")]
    return rows


def _mib(b: int) -> str:
    return f"{b / 2**20:,.1f} MiB"


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else f"{n:,}"


def print_tables(console, *, wrows, prows, mrows, window: int, head_dim: int, block: int):
    from rich.table import Table

    t = Table(title=f"causal vs a causal window of {window:,} keys, per (batch, K/V head): "
                    f"d = {head_dim}, Br = Bc = {block}, fp16")
    for c in ("N", "N²", "causal pairs", "window pairs", "window / N²", "causal blocks", "window blocks",
              "causal K/V", "window K/V", "causal / window"):
        t.add_column(c, justify="right")
    for r in wrows:
        t.add_row(_k(r["N"]), f"{r['dense_pairs']:,}", f"{r['causal_pairs']:,}", f"{r['window_pairs']:,}",
                  f"{r['window_fraction']:.1%}", f"{r['causal_blocks']:,}", f"{r['window_blocks']:,}",
                  _mib(r["causal_kv_bytes"]), _mib(r["window_kv_bytes"]), f"{r['saving']:.1f}×")
    console.print(t)
    t = Table(title=f"{prows[0]['docs']} documents packed (varlen) vs padded to the longest "
                    f"({prows[0]['longest']:,}), per K/V head")
    for c in ("mask", "tokens", "padded", "pairs", "padded", "blocks", "padded", "K/V read", "padded",
              "padded / packed"):
        t.add_column(c, justify="left" if c == "mask" else "right")
    for r in prows:
        t.add_row(r["mask"], f"{r['tokens']:,}", f"{r['padded_tokens']:,}", f"{r['pairs']:,}", f"{r['padded_pairs']:,}",
                  f"{r['blocks']:,}", f"{r['padded_blocks']:,}", _mib(r["kv_bytes"]), _mib(r["padded_kv_bytes"]),
                  f"{r['ratio']:.2f}×")
    console.print(t)
    t = Table(title="closed form (attnlab.cost.window) vs counted (attnlab.blockwise IOStats)")
    for c in ("case", "quantity", "closed form", "IOStats", "equal"):
        t.add_column(c, justify="left" if c in ("case", "quantity") else "right")
    for case, what, want, got in mrows:
        t.add_row(case, what, f"{want:,}", f"{got:,}", "yes" if want == got else "NO")
    console.print(t)


def plot(wrows, path, *, window: int):
    """K/V bytes against N, log-log: causal (∝ N²) and the window (∝ N)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["N"] for r in wrows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.loglog(n, [r["causal_kv_bytes"] / 2**20 for r in wrows], "o-", label="causal (block skipping, §6.2)")
    ax.loglog(n, [r["window_kv_bytes"] / 2**20 for r in wrows], "s-", label=f"causal window of {window:,} keys")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("K/V read by the forward, MiB per (batch, K/V head)")
    ax.set_xticks(n, [_k(x) for x in n])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("FA2 forward K/V reads: ∝ N² causal, ∝ N·(Br + W)/Br with a window", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _lengths_arg(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}")
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit status 2
        sys.stderr.write(f"variants_traffic.py: {message}\n")
        raise SystemExit(2)


def main(argv=None) -> int:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--window", type=positive_int, default=4096, help="window W in keys (flash-attn's (W-1, 0))")
    p.add_argument("--head-dim", type=positive_int, default=128)
    p.add_argument("--block", type=positive_int, default=128, help="Br = Bc")
    p.add_argument("--lengths", type=_lengths_arg, default=LENGTHS, help="the mixed batch, e.g. 8192,1000,77")
    p.add_argument("--out", default="attnlab-out", help=f"folder for {PLOT_NAME} (created if missing; "
                   "the script replaces its own plot there)")
    p.add_argument("--no-plot", action="store_true", help="print the tables only")
    args = p.parse_args(argv)
    path = None
    if not args.no_plot:
        from pathlib import Path

        out = Path(args.out).expanduser()
        if out.exists() and not out.is_dir():
            sys.stderr.write(f"variants_traffic.py: --out {out}: is a file, not a folder\n")
            return 2
        out.mkdir(parents=True, exist_ok=True)
        path = out / PLOT_NAME
    wrows = window_rows(window=args.window, head_dim=args.head_dim, block=args.block)
    prows = packing_rows(lengths=args.lengths, window=args.window, head_dim=args.head_dim, block=args.block)
    mrows = measured_rows()
    print_tables(make_console(), wrows=wrows, prows=prows, mrows=mrows, window=args.window,
                 head_dim=args.head_dim, block=args.block)
    if path is not None:
        plot(wrows, path, window=args.window)
        print(f"plot: {path}")
    return 0 if all(want == got for _, _, want, got in mrows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
