"""``attnlab simulate``: the standard and FlashAttention forwards on the GPU simulator, every count
beside its closed form (lecture §5.3–5.4, §6.2). Parsing and printing only; the work is
``simulate_forward``, which refuses bad values, and runs too large for memory, before it allocates
anything. ``--json`` follows the output rule of ``attnlab._cliargs`` (folders created, an existing
file kept unless ``--force``, ``-`` for standard output). Bad input raises ValueError, which the
``attnlab`` frame prints as one line on stderr with exit status 2.
"""

from __future__ import annotations

import json
import math

from attnlab._cliargs import FORCE_HELP, output_file, positive_int, write_text


def _gib(value: str) -> int:
    """--max-memory: a positive number of GiB -> bytes."""
    try:
        gib = float(value)
    except ValueError:
        raise ValueError(f"--max-memory must be a number of GiB, got {value!r}") from None
    if not math.isfinite(gib) or gib <= 0:
        raise ValueError(f"--max-memory must be a positive number of GiB, got {value!r}")
    return max(1, int(gib * 2**30))


def _simulate(args) -> int:
    from attnlab._console import make_console, print_wrote

    from .simulate import simulate_forward
    from .tables import print_simulation

    # every argument and output path is checked before any work: a bad one costs nothing
    max_memory = None if args.max_memory is None else _gib(args.max_memory)
    json_path = output_file(args.json, option="--json", force=args.force, allow_stdout=True) if args.json else None
    result = simulate_forward(seq=args.seq, head_dim=args.head_dim, block=args.block, causal=args.causal,
                              tile=args.tile, seed=args.seed, max_memory=max_memory)
    console = make_console(stderr=args.json == "-")  # `--json -`: stdout holds the JSON alone
    print_simulation(result, console)
    if args.json:
        where = write_text(json_path, json.dumps(result, indent=1) + "\n", option="--json", force=args.force)
        if json_path is not None:
            print_wrote(console, where)
    return 0


def register(sub) -> None:
    from .memory import DEFAULT_CAP_BYTES

    p = sub.add_parser("simulate", help="run the standard and flash forward kernels on the GPU simulator and "
                                        "compare every HBM count with its closed form")
    p.add_argument("--seq", type=positive_int, default=256, help="sequence length N (default: %(default)s)")
    p.add_argument("--head-dim", type=positive_int, default=64, help="head dimension d (default: %(default)s)")
    p.add_argument("--block", type=positive_int, default=64, help="flash block size Br = Bc (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask (flash skips K/V blocks above the diagonal)")
    p.add_argument("--tile", type=positive_int, default=16,
                   help="matmul tile of the standard forward (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs, >= 0 (default: %(default)s)")
    p.add_argument("--max-memory", metavar="GIB", help=f"memory the simulation may take, in GiB (default: "
                   f"{DEFAULT_CAP_BYTES / 2**30:g}, or half the machine's memory if that is less)")
    p.add_argument("--json", metavar="FILE", help="also write every number as JSON to FILE ('-': standard output, "
                                                  "tables to stderr); missing folders are created; an existing "
                                                  "FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.set_defaults(func=_simulate)
