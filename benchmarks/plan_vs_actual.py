"""The LikesWorld model's "plan vs actual" trainings (lecture §2.2's notes; docs/model.md), recorded: single trainings
of the default recipe from seed 0, one attempt each (no restart), each with one thing changed.

* ``default``: the recipe as shipped (RoPE, q/k/v biases, the question right before the answer);
* ``gap``: the question two tokens before the answer (``q dan ? a jam``: ``--question-format gap``);
* ``learned``: learned absolute positions in place of RoPE (``--positions learned``);
* ``no-bias``: no biases on the q/k/v projections (``--no-qkv-bias``).

For each: the test accuracy on the held-out set and its random-item baseline, the validation accuracy at every
evaluation, and, from the probes, the best layer-0 head's weight on each fact's owner (two tokens back: the first hop
of the lookup; a run without it is stuck) and the best lookup head's weight on the correct item. For the default run
also its errors on ``--fresh`` fresh test-world and training-world sequences. Everything runs on the CPU, a few
minutes in all; the numbers depend only on the code and the seed (training on one thread or two gives the same bits).

    python benchmarks/plan_vs_actual.py --json benchmarks/data/plan-vs-actual-cpu.json
    python benchmarks/plan_vs_actual.py --steps 20 --arms default gap --fresh 200     # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

ARMS = ("default", "gap", "learned", "no-bias")
PROBE_SEQUENCES = 250  # the probes' batch (demo 01's)


def configs(arm: str, steps: int):
    from attnlab.model import ModelConfig
    from attnlab.model.train import TrainConfig

    mc, tc = ModelConfig.from_name("likesworld"), TrainConfig(steps=steps, max_attempts=1)
    if arm == "gap":
        tc = replace(tc, question_format="gap")
    elif arm == "learned":
        mc = replace(mc, positions="learned")
    elif arm == "no-bias":
        mc = replace(mc, qkv_bias=False)
    elif arm != "default":
        raise ValueError(f"unknown arm {arm!r}: one of {', '.join(ARMS)}")
    return mc, tc


def run_arm(arm: str, steps: int, fresh: int) -> dict:
    from attnlab.model import head_scores
    from attnlab.model.train import accuracy, cpu_threads, train

    mc, tc = configs(arm, steps)
    t0 = time.perf_counter()
    result = train(mc, tc, progress=False)
    world = tc.world()
    with cpu_threads():
        scores = head_scores(result.model, world.test_set(PROBE_SEQUENCES, seed=7))
        row = dict(arm=arm, model=asdict(mc), train=asdict(tc), test_accuracy=result.test_accuracy,
                   baseline=result.baseline, history=result.history,
                   owner_layer0=float(scores["owner"][0].max()), lookup_best=float(scores["lookup"].max()))
        if fresh:
            for split in ("test", "train"):
                batch = world.sample(fresh, np.random.default_rng([99, 1 if split == "train" else 0]), split=split)
                acc = accuracy(result.model, batch)
                answers = int(batch.answer_mask.sum())
                row[f"fresh_{split}"] = dict(sequences=fresh, answers=answers, errors=round((1 - acc) * answers))
    row["seconds"] = time.perf_counter() - t0
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| arm | test accuracy | baseline | validation accuracy by step | owner weight (best layer-0 head) | "
             "lookup weight (best head) |", "|---|---|---|---|---|---|"]
    for r in rows:
        hist = ", ".join(f"{h['step']}: {100 * h['val_accuracy']:.0f}%" for h in r["history"])
        lines.append(f"| {r['arm']} | {100 * r['test_accuracy']:.1f}% | {100 * r['baseline']:.1f}% | {hist} | "
                     f"{100 * r['owner_layer0']:.0f}% | {100 * r['lookup_best']:.0f}% |")
    fresh = [f"* {r['arm']}: {f['errors']} error{'' if f['errors'] == 1 else 's'} in {f['answers']:,} answers of {f['sequences']:,} fresh {split}-world "
             "sequences" for r in rows for split in ("test", "train") if (f := r.get(f"fresh_{split}"))]
    return "\n".join(lines + ([""] + fresh if fresh else [])) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="which trainings (default: all)")
    ap.add_argument("--steps", type=int, default=1000, help="training steps of each (default 1000, the recipe's)")
    ap.add_argument("--fresh", type=int, default=20000,
                    help="fresh test-world and training-world sequences the default model answers (0: none)")
    ap.add_argument("--json", type=Path, help="write the rows here (an existing file is not replaced)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.fresh < 0:
        ap.error("--steps must be positive and --fresh at least 0")
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists: not overwritten")
    rows = []
    for arm in args.arms:
        print(f"training {arm} ({args.steps} steps) ...", file=sys.stderr, flush=True)
        rows.append(run_arm(arm, args.steps, args.fresh if arm == "default" else 0))
        print(f"  {arm}: test accuracy {100 * rows[-1]['test_accuracy']:.1f}% in {rows[-1]['seconds']:.0f} s",
              file=sys.stderr, flush=True)
    print(markdown(rows), end="")
    if args.json:
        import torch

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(torch=torch.__version__, python=sys.version.split()[0], rows=rows),
                                        indent=1))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
