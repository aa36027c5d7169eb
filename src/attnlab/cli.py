"""The ``attnlab`` command: a thin parser over typed library functions.

Each command lives with the code it drives; the module named in ``_COMMANDS`` provides
``register(subparsers)`` that adds the sub-parser and sets ``func`` to a function of the parsed
arguments returning an exit status. Bad input (``ValueError``/``TypeError``) becomes one line on
stderr and exit status 2, never a traceback; so does a usage error that argparse finds
(``attnlab X: error: ... (see attnlab X --help)``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command modules and the commands each registers, in the order `attnlab --help` lists them
_COMMAND_MODULES = (
    ("attnlab.demos.cli", ("tour", "demo")),
    ("attnlab.model.cli", ("train",)),
    ("attnlab.cost.cli", ("estimate",)),
    ("attnlab.sim.kernels.cli", ("simulate",)),
    ("attnlab.bench", ("bench",)),
    ("attnlab.info", ("info",)),
)
COMMANDS = tuple(name for _, names in _COMMAND_MODULES for name in names)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one stderr line (sub-parsers inherit the class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``attnlab`` parser. ``command``: register only the module that provides it (the others may
    import torch; a command that does not need it starts in a fraction of a second); None: all."""
    from . import __version__

    parser = _Parser(
        prog="attnlab",
        description="Transformers, attention and FlashAttention: the lecture's experiments and an attention library.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, names in _COMMAND_MODULES:
        if command is not None and command not in names:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # a part not built yet: its command is simply absent
            if e.name and name.startswith(e.name):
                continue
            raise
        module.register(sub)
    parser.command_names = list(sub.choices) if command is None else list(COMMANDS)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command named in ``argv`` when the parser needs only its module; else None (all modules)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None  # the overall help lists every command
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None if not argv else "--"  # `--version` alone: no command module at all


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        print(f"attnlab: error: name a command ({', '.join(parser.command_names)}) (see attnlab --help)",
              file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError) as e:
        message = " ".join(str(e).split())  # one line, whatever the message holds
        print(f"attnlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
