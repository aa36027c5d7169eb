"""The trained-checkpoint store (lecture §2.2: "the first run trains about a minute", then reuses it).

``get_model()`` returns the trained LikesWorld model, training it on first use:

* where (``checkpoint_dir()``): ``$ATTNLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab``;
  one file per model (``likesworld.pt`` for the defaults, ``likesworld-seed=3.pt`` and so on for
  other settings);
* the file records a fingerprint of everything that made it (model and training configs, the
  LikesWorld data version, the file format); a file whose fingerprint differs (stale) or that does
  not load (corrupt) is retrained with one warning, never a crash;
* loading uses ``torch.load(weights_only=True)``: no code from the file is ever run;
* writing is atomic (a temporary file in the same folder, then ``os.replace``), so a reader sees the
  old file or the new one, never half of one; a lock file lets a second process wait for the first
  one's training instead of repeating it (after ``lock_timeout`` seconds it trains anyway);
* an unwritable folder costs one ``CheckpointWarning``: the model is trained and kept in memory for the
  rest of the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from .._runtime import cache_root
from .config import ModelConfig
from .likesworld import DATA_VERSION
from .train import TrainConfig, train
from .transformer import Transformer

FORMAT = 1
# fields that do not change the trained weights (how attention is computed), left out of the key
_RUNTIME_FIELDS = ("attention", "flash_block")


class CheckpointWarning(UserWarning):
    """The checkpoint store could not be used as is (corrupt, stale or unwritable)."""


@dataclass
class TrainedModel:
    """A ready model and where it came from. source: "cache", "trained" or "memory"."""

    model: Transformer
    model_config: ModelConfig
    train_config: TrainConfig
    metrics: dict = field(default_factory=dict)
    path: Path | None = None
    source: str = "cache"


_MEMORY: dict[str, TrainedModel] = {}  # checkpoint path -> model that could not be written there


def checkpoint_dir() -> Path:
    """The folder of the trained checkpoints (not created here): attnlab's cache folder (``cache_root``)."""
    return cache_root()


def _key(mc: ModelConfig, tc: TrainConfig) -> dict:
    m = {k: v for k, v in mc.to_dict().items() if k not in _RUNTIME_FIELDS}
    return {"format": FORMAT, "data_version": DATA_VERSION, "model": m, "train": tc.to_dict()}


def fingerprint(mc: ModelConfig, tc: TrainConfig) -> str:
    """A short hash of everything the trained weights depend on."""
    return hashlib.sha256(json.dumps(_key(mc, tc), sort_keys=True).encode()).hexdigest()[:16]


def checkpoint_name(mc: ModelConfig, tc: TrainConfig) -> str:
    """``likesworld.pt`` for the defaults, else the differing settings spelled out."""
    base_m, base_t = ModelConfig.from_name("likesworld"), TrainConfig()
    parts = [f"{f.name}={getattr(mc, f.name)}" for f in fields(mc)
             if f.name not in _RUNTIME_FIELDS and getattr(mc, f.name) != getattr(base_m, f.name)]
    parts += [f"{f.name}={getattr(tc, f.name)}" for f in fields(tc) if getattr(tc, f.name) != getattr(base_t, f.name)]
    name = "-".join(["likesworld"] + parts)
    return "".join(c if c.isalnum() or c in "-=._" else "_" for c in name) + ".pt"


def checkpoint_path(mc: ModelConfig | None = None, tc: TrainConfig | None = None) -> Path:
    mc = mc or ModelConfig.from_name("likesworld")
    tc = tc or TrainConfig()
    return checkpoint_dir() / checkpoint_name(mc, tc)


def _load(path: Path, mc: ModelConfig, tc: TrainConfig) -> tuple[TrainedModel | None, str | None]:
    """(model, None) on success; (None, reason) if the file is missing (reason None), corrupt or stale."""
    if not path.exists():
        return None, None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        fp = ckpt["fingerprint"]
    except Exception as e:  # any failure to read is "corrupt": unpickling errors, truncation, …
        return None, f"cannot be read ({type(e).__name__}: {str(e)[:80]})"
    if fp != fingerprint(mc, tc):
        return None, "is stale (it was trained with other settings or an older attnlab)"
    try:
        model = Transformer(mc)
        model.load_state_dict(ckpt["state_dict"])
    except Exception as e:
        return None, f"does not fit the model ({type(e).__name__})"
    model.eval()
    return TrainedModel(model, mc, tc, dict(ckpt.get("metrics", {})), path, "cache"), None


def _save(path: Path, tm: TrainedModel) -> None:
    """Atomic write: temp file in the same folder, fsync, os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ckpt = {"format": FORMAT, "fingerprint": fingerprint(tm.model_config, tm.train_config),
            "key": json.dumps(_key(tm.model_config, tm.train_config), sort_keys=True),
            "metrics": tm.metrics, "state_dict": {k: v.detach().clone() for k, v in tm.model.state_dict().items()}}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _acquire(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} {time.time():.0f}\n")
    return True


def _lock_alive(lock: Path) -> bool:
    """False when the lock's owner (a process of this machine) is gone."""
    try:
        pid = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return lock.exists()  # being written right now, or unreadable: assume alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _release(lock: Path) -> None:
    try:
        os.unlink(lock)
    except OSError:
        pass


def get_model(model_config: ModelConfig | None = None, train_config: TrainConfig | None = None, *,
              force: bool = False, progress: bool = True, console=None, lock_timeout: float = 900.0,
              attention: str | None = None) -> TrainedModel:
    """The trained model for these settings: from the cache, or trained now (and cached).

    force: retrain even if a good checkpoint exists. progress: print what happens and show the
    training progress bar (rich, on ``console`` or stderr). attention: the attention implementation
    of the returned model ("standard", "flash", "sdpa"; default: the config's) — it does not change
    the weights, so every implementation shares one checkpoint.
    """
    mc = model_config or ModelConfig.from_name("likesworld")
    tc = train_config or TrainConfig()
    if not isinstance(mc, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(mc).__name__}")
    if not isinstance(tc, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(tc).__name__}")
    if attention is not None:
        mc = mc.replace(attention=attention)
    if progress and console is None:
        from .._console import make_console

        console = make_console(stderr=True)
    say = console.print if progress else (lambda *a, **k: None)
    path = checkpoint_dir() / checkpoint_name(mc, tc)
    if not force and str(path) in _MEMORY:
        return _with_config(_MEMORY[str(path)], mc)
    problem = None
    if not force:
        tm, problem = _load(path, mc, tc)
        if tm is not None:
            return tm
    lock = path.with_name(path.name + ".lock")
    locked = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        locked = _acquire(lock)
        writable = True
    except OSError:
        writable = False
    if writable and not locked:
        # someone else is training this model: wait for their file rather than train twice
        say(f"another process is training this model into {path}; waiting for it …")
        t0 = time.monotonic()
        while lock.exists() and _lock_alive(lock) and time.monotonic() - t0 < lock_timeout:
            time.sleep(0.25)
        if not force:
            tm, problem = _load(path, mc, tc)
            if tm is not None:
                return tm
        if lock.exists():  # its owner is gone, or stuck past the timeout
            say(f"the lock {lock} is stale; training here")
            _release(lock)
        locked = _acquire(lock)
    if problem is not None:
        warnings.warn(f"attnlab: the cached model {path} {problem}; retraining it", CheckpointWarning, stacklevel=2)
    try:
        why = "retraining (--force)" if force else "no usable trained model in the cache"
        took = " (about a minute on 2 free cores)" if tc.steps == TrainConfig().steps else ""
        say(f"[bold]LikesWorld[/bold]: {why}; training the {mc.n_layers}-layer, {mc.n_heads}-head model "
            f"for {tc.steps} steps{took}; it is cached afterwards in {path.parent}")
        res = train(mc, tc, progress=progress, console=console)
        metrics = {"test_accuracy": res.test_accuracy, "baseline": res.baseline, "seconds": res.seconds,
                   "seed": res.seed, "attempts": res.attempts, "history": res.history,
                   "torch": str(torch.__version__), "parameters": res.model.num_parameters()}
        tm = TrainedModel(res.model, mc, tc, metrics, path, "trained")
        say(f"trained in {res.seconds:.1f} s: test accuracy {100 * res.test_accuracy:.1f}% "
            f"(random-item baseline {100 * res.baseline:.1f}%)")
        try:
            if not writable:
                raise OSError(f"cannot create {path.parent}")
            _save(path, tm)
            say(f"saved {path}")
        except OSError as e:
            warnings.warn(f"attnlab: cannot write the model cache ({e}); keeping the trained model in memory "
                          f"for this process (set ATTNLAB_CACHE to a writable folder)", CheckpointWarning, stacklevel=2)
            tm.path = None
            _MEMORY[str(path)] = tm
        return tm
    finally:
        if locked:
            _release(lock)


def _with_config(tm: TrainedModel, mc: ModelConfig) -> TrainedModel:
    """The same weights under another runtime config (attention implementation)."""
    if tm.model.cfg == mc:
        return TrainedModel(tm.model, mc, tm.train_config, tm.metrics, tm.path, "memory")
    model = Transformer(mc)
    model.load_state_dict(tm.model.state_dict())
    model.eval()
    return TrainedModel(model, mc, tm.train_config, tm.metrics, tm.path, "memory")
