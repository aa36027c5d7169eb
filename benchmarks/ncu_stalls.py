"""Where a kernel's warps wait, instruction by instruction: ncu's source page (SASS, with the sampled stall
reasons of every instruction) reduced to a ledger.

``benchmarks/device_ncu_bwd.sh`` with ``SOURCE=1`` collects the Gluon backward on transformers' step shape
with ``--import-source yes --section SourceCounters --section WarpStateStats`` and prints its source page as
CSV (``ncu -i REPORT --page source --csv --print-source sass``). This script reads that CSV and prints:

* the stall samples by reason, over the whole kernel;
* the stall samples by SASS opcode (``HGMMA``, ``SYNCS``, ``BAR``, ``STS``, ...);
* the instructions holding the most samples, each with its two largest reasons, until ``--cover`` of all
  samples is listed (at most ``--top`` rows).

    python benchmarks/ncu_stalls.py SOURCE.csv[.gz] [--cover 0.8] [--top 40] [--json out.json]
    python benchmarks/ncu_stalls.py benchmarks/data/ncu-bwd-sass-h200-run1.csv.gz   # the recorded page

Column names differ between ncu versions: the sample columns are found by their text ("Warp Stall
Sampling (All Samples)", "stall_*" reasons); a CSV without them is refused with the columns it has.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path


def _num(x: str) -> float:
    x = (x or "").replace(",", "").strip()
    try:
        return float(x)
    except ValueError:
        return 0.0


def read_source_csv(path: Path) -> tuple[list[str], list[dict]]:
    """The header and rows of an ncu source-page CSV (lines before the header, e.g. ncu's own notes, skipped)."""
    if path.suffix == ".gz":
        import gzip

        with gzip.open(path, "rt", errors="replace") as f:
            lines = f.read().splitlines()
    else:
        lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"#"') or ln.startswith('"Address"')
                  or '"Source"' in ln), None)
    if start is None:
        raise ValueError(f"{path}: no source-page header (a line naming the \"Source\" column)")
    reader = csv.DictReader(lines[start:])
    return list(reader.fieldnames or []), list(reader)


def ledger(header: list[str], rows: list[dict]) -> dict:
    """Samples by reason, by opcode, and per instruction (sorted, largest first)."""
    total_col = next((c for c in header if "Warp Stall Sampling (All" in c), None)
    if total_col is None:
        raise ValueError("no 'Warp Stall Sampling (All Samples)' column; columns: " + ", ".join(header))
    reason_cols = [c for c in header if re.search(r"stall_|Stall", c) and c != total_col
                   and "Not-issued" not in c and "Not Issued" not in c and "Sampling" not in c]
    src_col = "Source" if "Source" in header else next(c for c in header if "Source" in c)
    addr_col = next((c for c in header if c in ("Address", "#")), None)
    by_reason, by_op, instrs = Counter(), Counter(), []
    for r in rows:
        n = _num(r.get(total_col))
        if n <= 0:
            continue
        src = (r.get(src_col) or "").strip()
        op = src.split()[0] if src else "?"
        if op.startswith("@"):  # a predicate: the opcode follows it
            op = src.split()[1] if len(src.split()) > 1 else op
        op = op.split(".")[0]
        reasons = {c: _num(r.get(c)) for c in reason_cols if _num(r.get(c)) > 0}
        by_reason.update(reasons)
        by_op[op] += n
        instrs.append(dict(address=r.get(addr_col) if addr_col else None, source=src, samples=n,
                           reasons=dict(Counter(reasons).most_common(3))))
    instrs.sort(key=lambda d: -d["samples"])
    total = sum(d["samples"] for d in instrs)
    return dict(total=total, by_reason=dict(by_reason.most_common()), by_opcode=dict(by_op.most_common()),
                instructions=instrs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="ncu --page source --csv --print-source sass output (or .gz)")
    ap.add_argument("--cover", type=float, default=0.8, help="list instructions until this share of samples")
    ap.add_argument("--top", type=int, default=40, help="at most this many instructions")
    ap.add_argument("--json", type=Path, help="write the ledger here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if not 0 < args.cover <= 1 or args.top < 1:
        ap.error("--cover must be in (0, 1] and --top at least 1")
    try:
        header, rows = read_source_csv(args.csv)
        led = ledger(header, rows)
    except (OSError, ValueError, StopIteration) as e:
        print(f"ncu_stalls: {e}", file=sys.stderr)
        return 2
    if args.json:  # (first: the whole ledger, whatever reads the printed part)
        args.json.write_text(json.dumps(led, indent=1))
    try:
        _print(led, args.cover, args.top)
    except BrokenPipeError:  # the reader took what it wanted (``| head``): no traceback, the JSON is written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _print(led: dict, cover: float, top: int) -> None:
    total = led["total"] or 1
    print(f"stall samples: {led['total']:.0f} over {len(led['instructions'])} instructions")
    print("\n| reason | samples | share |\n|---|---|---|")
    for k, v in led["by_reason"].items():
        print(f"| {k} | {v:.0f} | {v / total:.1%} |")
    print("\n| opcode | samples | share |\n|---|---|---|")
    for k, v in list(led["by_opcode"].items())[:20]:
        print(f"| {k} | {v:.0f} | {v / total:.1%} |")
    print("\n| address | instruction | samples | share | largest reasons |\n|---|---|---|---|---|")
    acc = 0.0
    for d in led["instructions"][:top]:
        acc += d["samples"]
        rs = ", ".join(f"{k.split('_', 1)[-1] if k.startswith('stall_') else k}: {v:.0f}" for k, v in d["reasons"].items())
        print(f"| {d['address']} | `{d['source'][:70]}` | {d['samples']:.0f} | {d['samples'] / total:.1%} | {rs} |")
        if acc / total >= cover:
            break


if __name__ == "__main__":
    raise SystemExit(main())
