"""The ``attnlab`` command: a thin parser over typed library functions (STYLE.md §12).

Each command lives with the code it drives; the module named in ``_COMMANDS`` provides
``register(subparsers)`` that adds the sub-parser and sets ``func`` to a function of the parsed
arguments returning an exit status. Bad input (``ValueError``/``TypeError``) becomes one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command modules, in the order `attnlab --help` lists them
_COMMAND_MODULES = (
    "attnlab.demos.cli",  # tour, demo N
    "attnlab.model.cli",  # train
    "attnlab.cost.cli",  # estimate
    "attnlab.kernels.cli",  # simulate
    "attnlab.bench",  # bench
    "attnlab.info",  # info
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="Transformers, attention and FlashAttention: the lecture's experiments and an attention library.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # a part not built yet: its command is simply absent
            if e.name and name.startswith(e.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError) as e:
        print(f"attnlab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
