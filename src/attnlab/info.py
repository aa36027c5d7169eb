"""``attnlab info``: what this installation has (versions, device, optional parts, the demos of the
lecture's code 01–05 it can run). Not a lecture section: the facts a bug report needs."""

from __future__ import annotations


def info() -> dict:
    """Versions and capabilities, as a dict."""
    import importlib.util

    from . import __version__
    from .bench import environment

    env = environment()
    env["attnlab"] = __version__
    env["cuda_available"] = __import__("torch").cuda.is_available()
    env["matplotlib"] = importlib.util.find_spec("matplotlib") is not None
    from .demos import available

    env["demos"] = available()
    env.update(kernels())
    return env


def kernels() -> dict[str, str]:
    """Which code serves an attention call here (``flash_attention``, ``flash_decode``), by device:
    ``kernels_cpu`` always, ``kernels_cuda`` where a CUDA GPU is visible. The phrase names the path a call
    of a supported shape and dtype takes; a call the kernels do not take still falls back, with a warning."""
    import torch

    from ._runtime import interpret_mode, interpreter_problem, triton_available

    out = {}
    if torch.cuda.is_available():
        if not triton_available():
            out["kernels_cuda"] = "blockwise PyTorch (no triton: pip install 'attnlab[gpu]' for the kernels)"
        else:
            from .gpu.config import device_capability
            from .gpu.prefill_gluon import GLUON_HEAD_DIMS, HAVE_GLUON

            cap = device_capability(torch.device("cuda"))
            if cap[0] < 8:
                out["kernels_cuda"] = f"blockwise PyTorch (compute capability {cap[0]}.{cap[1]}: the kernels need 8.0)"
            elif cap == (9, 0) and HAVE_GLUON:
                dims = " and ".join(map(str, GLUON_HEAD_DIMS))
                out["kernels_cuda"] = f"Triton; prefill at D = {dims} on the Gluon (Hopper) kernels"
            else:
                out["kernels_cuda"] = "Triton"
    if not interpret_mode():
        out["kernels_cpu"] = "blockwise PyTorch (with TRITON_INTERPRET=1: the Triton kernels, in triton's interpreter)"
    elif not triton_available():
        out["kernels_cpu"] = "blockwise PyTorch (TRITON_INTERPRET=1 set, but no triton: pip install 'attnlab[gpu]')"
    elif problem := interpreter_problem():
        out["kernels_cpu"] = f"blockwise PyTorch (triton's interpreter cannot run the kernels here: {problem})"
    else:
        out["kernels_cpu"] = "the Triton kernels in triton's interpreter (TRITON_INTERPRET=1: slow, for tests)"
    return out


def _info_cmd(args) -> int:
    import json

    from rich.table import Table

    from ._cliargs import output_file, write_text
    from ._console import make_console, print_wrote

    # the output path is checked first; `--json -` puts the JSON alone on stdout, the table on stderr
    path = output_file(args.json, option="--json", force=args.force, allow_stdout=True) if args.json else None
    facts = info()
    t = Table(title="attnlab info", show_header=False)
    for k, v in facts.items():
        t.add_row(k, str(v))
    make_console(stderr=args.json == "-").print(t)
    if args.json:
        where = write_text(path, json.dumps(facts, indent=2, ensure_ascii=False) + "\n", option="--json",
                           force=args.force)
        if path is not None:
            print_wrote(make_console(), where)
    return 0


def register(sub) -> None:
    from ._cliargs import FORCE_HELP

    p = sub.add_parser("info", help="versions, device and optional parts of this installation")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write the facts as JSON to FILE, for a bug report ('-': standard output, the table "
                        "then goes to stderr); missing folders are created; an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.set_defaults(func=_info_cmd)
