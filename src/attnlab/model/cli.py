"""``attnlab train``: (re)train the LikesWorld model on demand (lecture §2.2, "plan vs actual").

A thin parser over ``attnlab.model.get_model``. The flags reproduce the lecture's training lessons:
``--question-format gap`` (``q dan ? a jam``: stalls near the baseline), ``--positions learned``
(learned absolute positions instead of RoPE) and ``--no-qkv-bias``.
"""

from __future__ import annotations


def train_command(*, force: bool = False, seed: int = 0, steps: int | None = None, question_format: str = "adjacent",
                  positions: str = "rope", qkv_bias: bool = True, attempts: int | None = None, console=None) -> dict:
    """Get (train if needed, or always with ``force``) the model for these settings; print and
    return its metrics plus ``path`` and ``source``."""
    from rich.console import Console

    from .cache import get_model
    from .config import ModelConfig
    from .train import TrainConfig

    console = console or Console()
    mc = ModelConfig.from_name("likesworld", positions=positions, qkv_bias=qkv_bias)
    tc = {"seed": seed, "question_format": question_format}
    if steps is not None:
        tc["steps"] = steps
    if attempts is not None:
        tc["max_attempts"] = attempts
    tc = TrainConfig(**tc)
    tm = get_model(mc, tc, force=force, progress=True, console=console)
    m = tm.metrics
    if tm.source == "cache":
        console.print(f"using the cached model {tm.path} (attnlab train --force retrains it)")
    console.print(f"test accuracy {100 * m['test_accuracy']:.1f}% on {tc.test_size} held-out sequences; "
                  f"random-item baseline {100 * m['baseline']:.1f}%; trained in {m['seconds']:.1f} s "
                  f"(seed {m['seed']}, {len(m['attempts'])} attempt(s))")
    return dict(m, path=str(tm.path) if tm.path else None, source=tm.source)


def _run(args) -> int:
    train_command(force=args.force, seed=args.seed, steps=args.steps, question_format=args.question_format,
                  positions=args.positions, qkv_bias=not args.no_qkv_bias, attempts=args.attempts)
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train the tiny LikesWorld transformer (cached; --force retrains)",
                       description="Train the lecture's tiny transformer on LikesWorld, or show the cached one.")
    p.add_argument("--force", action="store_true", help="retrain even if a cached model exists")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data seed (default: %(default)s)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: TrainConfig.steps)")
    p.add_argument("--question-format", choices=("adjacent", "gap"), default="adjacent",
                   help="'adjacent': q dan jam (default); 'gap': q dan ? a jam (the lecture's first plan)")
    p.add_argument("--positions", choices=("rope", "learned"), default="rope",
                   help="RoPE (default) or learned absolute position embeddings")
    p.add_argument("--no-qkv-bias", action="store_true", help="no biases on the q/k/v projections")
    p.add_argument("--attempts", type=int, default=None,
                   help="restarts allowed when the lookup circuit has not formed by the check step")
    p.set_defaults(func=_run)
