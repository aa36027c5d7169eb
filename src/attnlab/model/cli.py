"""``attnlab train``: (re)train the LikesWorld model on demand (lecture §2.2, "plan vs actual").

A thin parser over ``attnlab.model.get_model``. The flags reproduce the lecture's training lessons:
``--question-format gap`` (``q dan ? a jam``: stalls near the baseline), ``--positions learned``
(learned absolute positions instead of RoPE) and ``--no-qkv-bias``.

Numeric flags are read as text and checked here, so a bad value ("-1", "abc") gives one line naming
the flag ("--seed must be a non-negative integer, got -1") and exit status 2, never a traceback.
"""

from __future__ import annotations


def train_command(*, force: bool = False, seed: int = 0, steps: int | None = None, question_format: str = "adjacent",
                  positions: str = "rope", qkv_bias: bool = True, attempts: int | None = None, console=None) -> dict:
    """Get (train if needed, or always with ``force``) the model for these settings; print and
    return its metrics plus ``path`` and ``source``."""
    from .._console import make_console
    from .checkpoint import get_model
    from .config import ModelConfig
    from .train import TrainConfig

    console = console or make_console()
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


def _int_flag(text, flag: str, minimum: int, maximum: int | None = None) -> int | None:
    """The integer value of ``flag`` (None when not given); ValueError naming the flag otherwise."""
    if text is None:
        return None
    kind = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{flag} must be {kind}, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{flag} must be {kind}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{flag} must be at most {maximum:,}, got {value:,}")
    return value


def _run(args) -> int:
    from .train import SEED_MAX

    seed = _int_flag(args.seed, "--seed", 0, SEED_MAX)
    steps = _int_flag(args.steps, "--steps", 1)
    attempts = _int_flag(args.attempts, "--attempts", 1)
    train_command(force=args.force, seed=seed, steps=steps, question_format=args.question_format,
                  positions=args.positions, qkv_bias=not args.no_qkv_bias, attempts=attempts)
    return 0


def register(sub) -> None:
    from .train import TrainConfig

    defaults = TrainConfig()
    p = sub.add_parser("train", help="train the tiny LikesWorld transformer (cached; --force retrains)",
                       description="Train the lecture's tiny transformer on LikesWorld, or show the cached one.")
    p.add_argument("--force", action="store_true", help="retrain even if a cached model exists")
    p.add_argument("--seed", default="0", help="initialisation and data seed, >= 0 (default: %(default)s)")
    p.add_argument("--steps", default=None, help=f"training steps, >= 1 (default: {defaults.steps})")
    p.add_argument("--question-format", choices=("adjacent", "gap"), default="adjacent",
                   help="'adjacent': q dan jam (default); 'gap': q dan ? a jam (the lecture's first plan)")
    p.add_argument("--positions", choices=("rope", "learned"), default="rope",
                   help="RoPE (default) or learned absolute position embeddings")
    p.add_argument("--no-qkv-bias", action="store_true", help="no biases on the q/k/v projections")
    p.add_argument("--attempts", default=None,
                   help="attempts allowed (>= 1): restarts when the lookup circuit has not formed by the check step "
                        f"(default: {defaults.max_attempts})")
    p.set_defaults(func=_run)
