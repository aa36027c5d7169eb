"""The tiny Llama-style transformer of the lecture and everything around it (§2, §7.7, §8.1–§8.4).

config       ModelConfig and presets ("likesworld": 2 layers, 4 heads, ~85 K parameters)
transformer  the decoder: RMSNorm, RoPE, SwiGLU, pre-norm, attention chosen by name
likesworld   the LikesWorld data: generator, disjoint splits, answer positions, baseline
train        training (rich progress bar), accuracy
cache        the trained-checkpoint cache: get_model()
probes       attention maps, automatic owner / lookup heads, head ablation
kvcache      KV cache (with the lecture's start-position bug as a switch)
generate     greedy generation with and without the cache; compare()
cli          ``attnlab train``
"""

from __future__ import annotations

from .cache import CacheWarning, TrainedModel, cache_dir, checkpoint_path, get_model
from .config import ModelConfig
from .generate import Generation, compare, generate
from .kvcache import KVCache
from .likesworld import Batch, LikesWorld, baseline_accuracy, decode, encode
from .probes import (
    HeadRoles,
    ablation,
    attention_maps,
    head_roles,
    head_scores,
    plot_attention,
    plot_attention_panels,
)
from .train import TrainConfig, TrainResult, accuracy, train, train_steps
from .transformer import Transformer

__all__ = [
    "Batch", "CacheWarning", "Generation", "HeadRoles", "KVCache", "LikesWorld", "ModelConfig",
    "TrainConfig", "TrainResult", "TrainedModel", "Transformer", "ablation", "accuracy",
    "attention_maps", "baseline_accuracy", "cache_dir", "checkpoint_path", "compare", "decode",
    "encode", "generate", "get_model", "head_roles", "head_scores", "plot_attention", "plot_attention_panels", "train", "train_steps",
]
