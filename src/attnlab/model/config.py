"""Model configuration with named presets (lecture §2.5).

``ModelConfig`` describes the tiny Llama-style decoder of the lecture: pre-norm, RMSNorm, RoPE,
SwiGLU, multi-head causal attention. ``ModelConfig.from_name("likesworld")`` is the lecture's
model — 2 layers, 4 heads, d_model 64, about 85 K parameters (§2.2: "2 层、4 个头、8.5 万个参数").

Two switches reproduce the lecture's "plan vs actual" lessons:

* ``positions="learned"`` replaces RoPE by learned absolute position embeddings (§2.5: the tiny
  model did not learn LikesWorld with them);
* ``attention`` picks the attention implementation by name: ``"standard"`` (``attention_ref``,
  S and P materialised), ``"flash"`` (the blockwise autograd.Function of §7.7), ``"sdpa"``
  (``torch.nn.functional.scaled_dot_product_attention``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

ATTENTION_IMPLS = ("standard", "flash", "sdpa")
POSITION_KINDS = ("rope", "learned")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of the decoder.

    vocab_size: tokens in the vocabulary (LikesWorld: 32).
    d_model: residual width; n_heads query heads of D = d_model / n_heads dims each.
    n_kv_heads: K/V heads (GQA when < n_heads; must divide n_heads). None means n_heads.
    d_ff: hidden width of the SwiGLU feed-forward block.
    max_seq_len: longest sequence (learned positions and the RoPE table are this long).
    """

    vocab_size: int = 32
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 128
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    positions: str = "rope"
    qkv_bias: bool = True  # biases on the q, k, v projections (as in Qwen2); see the note below
    attention: str = "standard"
    flash_block: int = 16  # Br = Bc of the "flash" implementation

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "flash_block"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"ModelConfig.d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        kv = self.kv_heads
        if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or self.n_heads % kv:
            raise ValueError(f"ModelConfig.n_kv_heads must divide n_heads ({self.n_heads}), got {self.n_kv_heads!r}")
        if self.head_dim % 2 and self.positions == "rope":
            raise ValueError(f"RoPE needs an even head dim, got d_model/n_heads = {self.head_dim}")
        if self.positions not in POSITION_KINDS:
            raise ValueError(f"ModelConfig.positions must be one of {POSITION_KINDS}, got {self.positions!r}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"ModelConfig.attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @classmethod
    def from_name(cls, name: str, **overrides) -> ModelConfig:
        """A preset by name, with any field overridden: ``ModelConfig.from_name("likesworld", attention="sdpa")``."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        return replace(PRESETS[name], **overrides)

    def replace(self, **changes) -> ModelConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"ModelConfig.from_dict got unknown fields {sorted(unknown)}")
        return cls(**d)


# The q/k biases give every token a content-independent part of its query and key, which RoPE turns
# into a purely positional score: the "owner" head (look two tokens back) then forms within a few
# hundred steps far more often than without them (docs/model.md).
PRESETS: dict[str, ModelConfig] = {
    # The lecture's tiny model (§2.2): 2 layers, 4 heads × 16 dims, SwiGLU 128 -> 86,720 parameters.
    "likesworld": ModelConfig(),
    # A smaller one for quick tests of the machinery (not expected to solve LikesWorld).
    "micro": ModelConfig(d_model=32, n_layers=2, n_heads=4, d_ff=64),
}
