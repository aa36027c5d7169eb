"""The tiny Llama-style transformer of the lecture and everything around it (§2, §7.7, §8.1–§8.4).

config       ModelConfig and presets ("likesworld": 2 layers, 4 heads, ~85 K parameters)
transformer  the decoder: RMSNorm, RoPE, SwiGLU, pre-norm, attention chosen by name
likesworld   the LikesWorld data: generator, disjoint splits, answer positions, baseline,
             tokenize / detokenize
train        training (rich progress bar), accuracy
checkpoint   the trained-checkpoint store: get_model()
probes       attention maps, automatic owner / lookup heads, head ablation
generate     greedy generation with and without a KV cache (attnlab.kvcache); compare()
cli          ``attnlab train``

``ContiguousKVCache`` and ``PagedKVCache`` live in ``attnlab.kvcache`` (re-exported here for
convenience); the model talks to either through ``attnlab.kvcache.KVCacheProtocol``.
"""

from __future__ import annotations

from ..kvcache import ContiguousKVCache, KVCacheProtocol, PagedKVCache
from .checkpoint import CheckpointWarning, TrainedModel, checkpoint_dir, checkpoint_path, get_model
from .config import ModelConfig
from .generate import Generation, compare, generate
from .likesworld import Batch, LikesWorld, baseline_accuracy, detokenize, tokenize
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
    "Batch", "CheckpointWarning", "ContiguousKVCache", "Generation", "HeadRoles", "KVCacheProtocol",
    "LikesWorld", "ModelConfig", "PagedKVCache", "TrainConfig", "TrainResult", "TrainedModel", "Transformer",
    "ablation", "accuracy", "attention_maps", "baseline_accuracy", "checkpoint_dir", "checkpoint_path",
    "compare", "detokenize", "generate", "get_model", "head_roles", "head_scores", "plot_attention",
    "plot_attention_panels", "tokenize", "train", "train_steps",
]
