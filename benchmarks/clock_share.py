"""Prefill runs at the clocks they ran: each recorded run's rows (``prefill.py bench --clocks``) with every provider's
SM clock (the median of the clocks noted with its times) and its share of the roofline at the datasheet's clock and
at its own (``attnlab.cost.GPU.at_clock``). A GPU held at its power limit runs below the clock its peak is quoted at
(989 TFLOP/s at 1,830 MHz on an H100 or H200), so the first share mixes the kernel with the GPU's power budget and the
second is the kernel's alone; and two providers of one row can run at different clocks.

    python benchmarks/clock_share.py benchmarks/data/prefill-h200-run45.json [more runs] [--D 128] [--pass fwd]
        [--json out.json]

No GPU needed: it reads the runs' JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prefill  # noqa: E402
from roofline_columns import percent, preset_for  # noqa: E402

PEERS = ("attnlab", "sdpa-cudnn")


def clock_rows(saved: dict, *, D=None, pass_=None, providers=PEERS) -> list[dict]:
    """The rows of one recorded prefill run (its JSON, loaded) that noted clocks, on the preset its GPU names: per
    (shape, provider) the TFLOP/s, ``sm_mhz``, ``of_roofline`` and ``clock_of_roofline``; ``D`` and ``pass_`` pick
    rows. ValueError for a run without a preset or without clocks."""
    gpu = preset_for(saved.get("environment", {}).get("gpu"), saved.get("roofline_gpu"))
    if gpu is None or not gpu.tensor_mhz:
        raise ValueError(f"no preset with a known clock for the GPU {saved.get('environment', {}).get('gpu')!r}")
    rows = [dict(r) for r in saved["rows"] if r.get("provider") in providers and r.get("ms")
            and (D is None or r["D"] == D) and (pass_ is None or r["pass_"] == pass_)]
    prefill.with_roofline(rows, gpu)
    rows = [r for r in rows if "clock_of_roofline" in r]
    if not rows:
        raise ValueError("the run noted no clocks (bench --clocks)")
    return [{"gpu": gpu.name, "D": r["D"], "causal": r["causal"], "N": r["N"], "pass_": r["pass_"], "H": r["H"],
             "Hkv": prefill.kv_heads(r), "provider": r["provider"], "tflops": r["tflops"], "sm_mhz": r["sm_mhz"],
             "of_roofline": r["of_roofline"], "clock_of_roofline": r["clock_of_roofline"]} for r in rows]


def markdown(runs: dict[str, list[dict]], providers=PEERS) -> str:
    """One line per run and shape: each provider's TFLOP/s, clock, share of the datasheet's roofline and of the
    roofline at its clock."""
    head = ["run", "GPU", "D", "heads", "causal", "N", "pass"]
    for p in providers:
        head += [f"{p} TFLOP/s", f"{p} MHz", f"{p} %", f"{p} % at its clock"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, rows in runs.items():
        by: dict = {}
        for r in rows:
            by.setdefault((r["gpu"], r["D"], r["H"], r["Hkv"], r["causal"], r["N"], r["pass_"]), {})[r["provider"]] = r
        for (gpu, D, H, Hkv, causal, N, p), cell in by.items():
            cells = [run, gpu, str(D), f"{H}/{Hkv}", "yes" if causal else "no", f"{N // 1024}K", p.replace("_", "+")]
            for name in providers:
                r = cell.get(name)
                cells += (["—"] * 4 if r is None else
                          [f"{r['tflops']:.0f}", f"{r['sm_mhz']:.0f}", percent(r["of_roofline"]),
                           percent(r["clock_of_roofline"])])
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="prefill.py bench JSON files (with --clocks)")
    ap.add_argument("--D", type=int, default=None, help="only this head dim")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "fwd_bwd"), default=None, help="only this pass")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here (not over an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"--json {args.json}: the file exists; not overwriting it")
    runs = {}
    for path in args.runs:
        try:
            saved = json.loads(path.read_text())
            runs[path.stem] = clock_rows(saved, D=args.D, pass_=args.pass_)
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"{path}: {e}")
    print(markdown(runs), end="")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
