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


def decode_split_model(gpu_name: str, config=(128, 128, 4, 3)) -> str:
    """How ``flash_decode`` picks its split count on the GPU preset named ``gpu_name`` (the device's, as
    ``gpu.decode_config.gpu_for_device`` names it) for the kernel configuration ``config`` (the large tile at D = 128,
    what a contiguous cache takes): the calibrated model, measured on this GPU or predicted from another, else the
    lecture's wave model."""
    from . import cost

    if cost.calibration_for(gpu_name, config) is not None:
        return f"the calibrated split model, measured on the {gpu_name}"
    if (cal := cost.calibration_for_config(gpu_name, config)) is not None:
        measured = next(m for part, m in cost.SAME_PROCESSOR.items() if part in gpu_name.upper())
        return (f"the calibrated split model, predicted for the {gpu_name} from the {measured}'s "
                f"(bandwidth x {cal.bw / cost.calibration_for_config(measured, config).bw:.3f})")
    return f"the lecture's wave model (no calibration for the {gpu_name})"


def decode_kept_call() -> str:
    """What makes a kept decode plan's eager call: the native C++ call (``attnlab.gpu.native``, built in the
    background at its first use; said where its module is already built), or with ATTNLAB_NATIVE_DECODE=0 the Python
    path."""
    from .gpu import native

    if not native.ENABLED:
        return "the Python path (ATTNLAB_NATIVE_DECODE=0)"
    built = any(native.build_dir().glob(f"{native.NAME}*.so"))
    return "the native C++ call (" + ("built" if built else "built in the background at its first use") + \
        "; ATTNLAB_NATIVE_DECODE=0: the Python path)"


def kernels() -> dict[str, str]:
    """Which code serves an attention call here (``flash_attention``, ``flash_decode``), by device:
    ``kernels_cpu`` always, ``kernels_cuda`` where a CUDA GPU is visible, and where its kernels run ``decode_splits``
    (how ``flash_decode`` picks its split count there: ``decode_split_model``). The phrase names the path a call
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
            if cap[0] >= 8:
                from .gpu.decode_config import gpu_for_device

                out["decode_splits"] = decode_split_model(gpu_for_device(torch.cuda.current_device()).name)
                out["decode_kept_call"] = decode_kept_call()
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
