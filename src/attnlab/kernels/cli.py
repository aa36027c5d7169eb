"""``attnlab simulate``: the standard and FlashAttention forwards on the GPU simulator, every count
beside its closed form (lecture §5.3–5.4, §6.2). Parsing and printing only; the work is
``simulate_forward``. Bad input raises ValueError (one line on stderr, exit 2, from the CLI frame).
"""

from __future__ import annotations

import json
from pathlib import Path


def _simulate(args) -> int:
    from .simulate import print_simulation, simulate_forward

    result = simulate_forward(args.seq, args.head_dim, args.block, causal=args.causal, tile=args.tile, seed=args.seed)
    print_simulation(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("simulate", help="run the standard and flash forward kernels on the GPU simulator and "
                                        "compare every HBM count with its closed form")
    p.add_argument("--seq", type=int, default=256, help="sequence length N (default: %(default)s)")
    p.add_argument("--head-dim", type=int, default=64, help="head dimension d (default: %(default)s)")
    p.add_argument("--block", type=int, default=64, help="flash block size Br = Bc (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask (flash skips K/V blocks above the diagonal)")
    p.add_argument("--tile", type=int, default=16, help="matmul tile of the standard forward (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: %(default)s)")
    p.add_argument("--json", metavar="FILE", help="also write every number as JSON to FILE")
    p.set_defaults(func=_simulate)
