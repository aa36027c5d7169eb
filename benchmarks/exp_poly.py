"""How many of the Gluon forward's exponentials to compute by a polynomial on the FMA pipe (``prefill_gluon.EXP_POLY``,
FlashAttention-4's emulated exponentials): the library's forward on the rows where the Gluon kernel runs, at each
split, in one process, against PyTorch's fastest route for the row in the same rounds.

Rows (bfloat16, H·D = 2048, 16K tokens): the variants benchmark's sliding window (W = 4096, causal, N = 16K) and its
packed batch (documents of 256–1,792, causal), and dense calls of 4 × 4K, causal and not; at D = 64 and 128. Each
row's library call runs with ``EXP_POLY[D]`` set to every value of ``--splits`` (0 = every exponential on the
exponentials' unit, as shipped; n = n of every 8 by the polynomial), the values taking turns ``--rounds`` times
(``do_bench`` medians; the table gives each value's median over the rounds). Peers: FlexAttention (compiled, block
mask) for the window and the packed batch, SDPA's cuDNN backend for the dense rows. Beside the time: each split's
largest difference from split 0's output (the polynomial's error is at most 8.6e-5 relative per exponential, under
bfloat16's 2^-9 for P̃).

    python benchmarks/exp_poly.py --json exp-poly.json            # every row, splits 0-4, three rounds
    python benchmarks/exp_poly.py --rows window --D 64 --splits 0 2 --rounds 5
    python benchmarks/exp_poly.py --report exp-poly.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab_rounds  # noqa: E402
import variants as V  # noqa: E402

import attnlab  # noqa: E402
from attnlab.bench import time_fn  # noqa: E402

ROWS = ("window", "varlen", "causal", "full")
# (named with --rows only) the variants' ALiBi row; one 16K causal sequence; causal batches of 8 × 2K and 2 × 6K
# (16K tokens, like the others: the lengths from 2K to 8K keys where the D = 64 causal forward had its own entry)
EXTRA_ROWS = ("alibi", "causal16k", "causal2k", "causal6k")
DENSE_B, DENSE_N = 4, 4096
DENSE_SHAPES = {"causal16k": (1, 16384), "causal2k": (8, 2048), "causal6k": (2, 6144)}  # (B, N); others 4 × 4K


def row_call(name: str, D: int, device: str):
    """(the library's forward as a zero-argument callable, FLOPs of the visible pairs, peer name, peer callable)."""
    H = V.WIDTH // D
    g = torch.Generator(device=device).manual_seed(D)
    if name in ("window", "varlen", "alibi"):
        cfg = dict(variant=name, D=D, H=H, N=V.TOKENS, pass_="fwd", dtype=torch.bfloat16)
        if name == "varlen":
            cfg["lengths"] = V.doc_lengths(V.TOKENS)
        flops = 4.0 * V.visible_pairs(name, V.TOKENS, cfg.get("lengths")) * D * H
        lib = V.provider_attnlab(cfg, device)
        try:
            peer = V.provider_flex(dict(cfg), device)
        except (RuntimeError, NotImplementedError) as e:
            peer = e
        return lib, flops, "flex", peer
    causal = name.startswith("causal")
    B, N = DENSE_SHAPES.get(name, (DENSE_B, DENSE_N))
    q, k, v = (torch.randn(B, H, N, D, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    pairs = N * (N + 1) // 2 if causal else N * N
    flops = 4.0 * pairs * D * H * B

    def lib():
        return attnlab.flash_attention(q, k, v, causal=causal)

    def peer():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(q, k, v, is_causal=causal)

    return lib, flops, "sdpa-cudnn", peer


class use_split:
    """``with use_split(n, D):`` the library's Gluon forward at head dim ``D`` computes n of every 8 exponentials by
    the polynomial (``prefill_gluon.EXP_POLY[D]``), set back on the way out."""

    def __init__(self, split: int, D: int):
        if split not in range(5):
            raise ValueError(f"split must be 0-4 (of 8), got {split!r}")
        self.split, self.D = split, D

    def __enter__(self):
        from attnlab.gpu import prefill_gluon as pg

        self.saved = dict(pg.EXP_POLY)
        pg.EXP_POLY[self.D] = self.split
        return self

    def __exit__(self, *exc):
        from attnlab.gpu import prefill_gluon as pg

        pg.EXP_POLY.clear()
        pg.EXP_POLY.update(self.saved)
        return False


def measure(rows, Ds, splits, rounds: int) -> list[dict]:
    return ab_rounds.measure(rows, Ds, splits, use_split, rounds, row_call, time_fn=time_fn, arm_key="split")


def report(rows) -> str:
    return ab_rounds.table(rows, "row | D | split (of 8) | ms (median) | TFLOP/s | × split 0 | × peer | max diff from "
                                 "split 0", arm_key="split")


def main(argv=None) -> int:
    def add(ap):
        ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 3, 4], choices=range(5))

    return ab_rounds.main(argv, description=__doc__.splitlines()[0], name="exp_poly", rows=ROWS, report=report,
                          add_args=add, measure_fn=lambda a: measure(a.rows, a.D, a.splits, a.rounds))


if __name__ == "__main__":
    sys.exit(main())
