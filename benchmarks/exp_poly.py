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

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import variants as V  # noqa: E402

import attnlab  # noqa: E402
from attnlab.bench import environment, time_fn  # noqa: E402

ROWS = ("window", "varlen", "causal", "full")
DENSE_B, DENSE_N = 4, 4096


def row_call(name: str, D: int, device: str):
    """(the library's forward as a zero-argument callable, FLOPs of the visible pairs, peer name, peer callable)."""
    H = V.WIDTH // D
    g = torch.Generator(device=device).manual_seed(D)
    if name in ("window", "varlen"):
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
    causal = name == "causal"
    q, k, v = (torch.randn(DENSE_B, H, DENSE_N, D, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    pairs = DENSE_N * (DENSE_N + 1) // 2 if causal else DENSE_N * DENSE_N
    flops = 4.0 * pairs * D * H * DENSE_B

    def lib():
        return attnlab.flash_attention(q, k, v, causal=causal)

    def peer():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(q, k, v, is_causal=causal)

    return lib, flops, "sdpa-cudnn", peer


def _out(x):
    return x[0] if isinstance(x, tuple) else x


def measure(rows, Ds, splits, rounds: int) -> list[dict]:
    from attnlab.gpu import prefill_gluon as pg

    device = "cuda"
    shipped = dict(pg.EXP_POLY)
    results = []
    try:
        for D in Ds:
            for name in rows:
                lib, flops, peer_name, peer = row_call(name, D, device)
                times = {s: [] for s in splits}
                peer_times = []
                ref = None
                diffs = {}
                for _ in range(rounds):
                    for s in splits:
                        pg.EXP_POLY[D] = s
                        out = _out(lib()).float()
                        if ref is None:
                            ref = out
                        diffs[s] = (out - ref).abs().max().item() if s != splits[0] else 0.0
                        times[s].append(time_fn(lib, device=device))
                    if callable(peer):
                        peer_times.append(time_fn(peer, device=device))
                pg.EXP_POLY[D] = shipped.get(D, 0)
                base = statistics.median(times[splits[0]])
                for s in splits:
                    ms = statistics.median(times[s])
                    r = dict(row=name, D=D, split=s, ms=ms, rounds=[round(t, 4) for t in times[s]],
                             tflops=flops / ms / 1e9, vs_first=base / ms, max_diff=diffs[s])
                    if peer_times:
                        r.update(peer=peer_name, peer_ms=statistics.median(peer_times),
                                 x_peer=statistics.median(peer_times) / ms)
                    elif not callable(peer):
                        r.update(peer=peer_name, peer_skipped=f"{type(peer).__name__}: {peer}"[:120])
                    results.append(r)
                    print(_line(r), flush=True)
                torch.cuda.empty_cache()
    finally:
        pg.EXP_POLY.clear()
        pg.EXP_POLY.update(shipped)
    return results


def _line(r) -> str:
    peer = f" {r['x_peer']:.3f}× {r['peer']}" if "x_peer" in r else ""
    return (f"| {r['row']} | {r['D']} | {r['split']} | {r['ms']:.3f} | {r['tflops']:.0f} | {r['vs_first']:.3f} |"
            f"{peer} | {r['max_diff']:.1e} |")


def report(rows) -> str:
    head = "| row | D | split (of 8) | ms (median) | TFLOP/s | × split 0 | × peer | max diff from split 0 |\n"
    return head + "|---|---|---|---|---|---|---|---|\n" + "\n".join(_line(r) for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 3, 4], choices=range(5))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--report", metavar="JSON", help="print the table of a recorded run")
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())["rows"]))
        return 0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if not torch.cuda.is_available():
        print("exp_poly.py times the Gluon forward on a Hopper GPU; no CUDA device here", file=sys.stderr)
        return 2
    rows = measure(args.rows, args.D, args.splits, args.rounds)
    print(report(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "exp_poly", "environment": environment(), "rows": rows},
                                              indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
