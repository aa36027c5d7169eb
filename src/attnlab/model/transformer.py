"""A tiny Llama-style decoder (lecture §2.3–§2.5, code 01's ``tiny_transformer.py``).

    x = x + Attention(RMSNorm(x))      # multi-head causal attention, RoPE on q and k
    x = x + SwiGLU_FFN(RMSNorm(x))     # W2(SiLU(W1 x) ⊙ W3 x)

The attention implementation is chosen by name (``ModelConfig.attention``): ``"standard"`` calls
``attnlab.reference.attention_ref`` (S and P materialised, §3.2), ``"flash"``
``attnlab.api.flash_attention`` with ``ModelConfig.flash_block`` as Br = Bc (§7.7: forward keeps
q, k, v, O, L; backward recomputes P block by block), ``"sdpa"`` PyTorch's
``scaled_dot_product_attention``.

With a KV cache (any object of ``attnlab.kvcache.KVCacheProtocol``, §8.2) the same forward runs
incrementally: the new tokens sit at absolute positions ``start .. start+T-1``; their K/V are
appended to the layer's cache and every query sees the cached keys at positions ``<= its own``
(bottom-right causal).

Shapes: tokens (B, N); hidden (B, N, d_model); q (B, H, N, D); k, v (B, Hkv, N, D).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..reference import attention_ref, expand_kv
from .config import ModelConfig


class RMSNorm(nn.Module):
    """x / rms(x) · g — no mean subtraction, one reduction fewer than LayerNorm (§2.5)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(positions: torch.Tensor, D: int, theta: float, dtype=torch.float32):
    """cos, sin of shape (N, D/2) for integer ``positions`` (N,): angle = pos · theta^(-2i/D)."""
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64, device=positions.device) / D)
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+D/2}) of x (B, H, N, D) by the angle of its position (§2.5).

    Afterwards q·k depends on the two positions only through their difference.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _flash_attention(q, k, v, *, causal: bool, block: int):
    """FlashAttention with Br = Bc = ``block`` (§7.7): the forward saves q, k, v, O, L only.

    LikesWorld sequences (N <= 34) span several blocks of 8 or 16, so the online-softmax rescaling
    across blocks, the causal block skip and the diagonal mask all take part in training.
    """
    from ..api import flash_attention

    return flash_attention(q, k, v, causal=causal, block_q=block, block_k=block)


def _sdpa(q, k, v, *, causal: bool):
    H = q.shape[1]
    k, v = expand_kv(k, H), expand_kv(v, H)  # enable_gqa needs torch >= 2.5
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class Attention(nn.Module):
    """Multi-head causal self-attention with RoPE; GQA when n_kv_heads < n_heads."""

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.cfg, self.layer_idx = cfg, layer_idx
        H, Hkv, D = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, H * D, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.d_model, Hkv * D, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.d_model, Hkv * D, bias=cfg.qkv_bias)
        self.wo = nn.Linear(H * D, cfg.d_model, bias=False)

    def _qkv(self, x, positions):
        B, N, _ = x.shape
        cfg = self.cfg
        q = self.wq(x).view(B, N, cfg.n_heads, cfg.head_dim).transpose(1, 2)  # (B, H, N, D)
        k = self.wk(x).view(B, N, cfg.kv_heads, cfg.head_dim).transpose(1, 2)  # (B, Hkv, N, D)
        v = self.wv(x).view(B, N, cfg.kv_heads, cfg.head_dim).transpose(1, 2)  # (B, Hkv, N, D)
        if cfg.positions == "rope":
            cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, x.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def forward(self, x, *, cache=None, head_mask=None, return_probs=False, impl=None):
        """x (B, N, d_model) -> (B, N, d_model) [, P (B, H, N, Nk)].

        cache: a KV cache to read and extend (incremental decoding); head_mask: (H,) multiplies each
        head's output (0 ablates a head); impl overrides ``cfg.attention`` for this call.
        """
        B, N, _ = x.shape
        probs = None
        if cache is None:
            positions = torch.arange(N, device=x.device)
            q, k, v = self._qkv(x, positions)
            impl = impl or self.cfg.attention
            if return_probs:  # probes read P: always the reference, which materialises it
                o, _, probs = attention_ref(q, k, v, causal=True, return_probs=True)
            elif impl == "standard":
                o, _ = attention_ref(q, k, v, causal=True)
            elif impl == "flash":
                o = _flash_attention(q, k, v, causal=True, block=self.cfg.flash_block)
            elif impl == "sdpa":
                o = _sdpa(q, k, v, causal=True)
            else:
                raise ValueError(f"attention implementation must be one of standard/flash/sdpa, got {impl!r}")
        else:
            start = cache.start_position(self.layer_idx)
            positions = torch.arange(start, start + N, device=x.device)
            q, k, v = self._qkv(x, positions)
            o, probs = cache.attend(self.layer_idx, q, k, v, positions, return_probs=return_probs)
        if head_mask is not None:
            o = o * head_mask.to(o.dtype).view(1, -1, 1, 1)
        out = self.wo(o.transpose(1, 2).reshape(B, N, -1))
        return (out, probs) if return_probs else out


class SwiGLU(nn.Module):
    """W2(SiLU(W1 x) ⊙ W3 x), Llama's feed-forward block (§2.5)."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d, d_ff, bias=False)
        self.w3 = nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm residual block: attention then SwiGLU."""

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer_idx)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x, **kw):
        a = self.attn(self.attn_norm(x), **kw)
        probs = None
        if kw.get("return_probs"):
            a, probs = a
        x = x + a
        x = x + self.ffn(self.ffn_norm(x))
        return x, probs


class Transformer(nn.Module):
    """The decoder: token embedding (+ learned positions if asked) → blocks → RMSNorm → logits."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.positions == "learned":
            self.pos_embed = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Initialisation: PyTorch's defaults (Linear U(±1/sqrt(fan_in)), Embedding N(0, 1)). GPT-2's
        # N(0, 0.02) everywhere, or only for the residual-branch outputs, left the lookup circuit
        # unformed in most runs of the same length (docs/model.md, "plan vs actual").

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, *, cache=None, head_mask=None, return_attn=False, impl=None):
        """tokens (B, N) long -> logits (B, N, vocab) [, list of P (B, H, N, Nk) per layer].

        cache: a KV cache (``attnlab.kvcache.KVCacheProtocol``; the tokens continue what it
        holds); head_mask: (n_layers, H) of 0/1;
        impl: attention implementation for this call (default ``cfg.attention``).
        """
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise TypeError(f"tokens must be a (B, N) long tensor, got {getattr(tokens, 'shape', type(tokens))}")
        B, N = tokens.shape
        if N == 0 or B == 0:
            raise ValueError(f"tokens must hold at least one token per sequence, got shape {tuple(tokens.shape)}")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ValueError(f"token ids must be in [0, {self.cfg.vocab_size}), got values in [{lo}, {hi}]")
        x = self.embed(tokens)  # (B, N, d_model)
        if self.cfg.positions == "learned":
            start = 0 if cache is None else cache.length
            if start + N > self.cfg.max_seq_len:
                raise ValueError(f"sequence of {start + N} tokens exceeds max_seq_len={self.cfg.max_seq_len}")
            x = x + self.pos_embed(torch.arange(start, start + N, device=tokens.device))
        maps = []
        for i, layer in enumerate(self.layers):
            hm = None if head_mask is None else head_mask[i]
            x, p = layer(x, cache=cache, head_mask=hm, return_probs=return_attn, impl=impl)
            maps.append(p)
        if cache is not None:
            cache.commit(N)
        logits = self.head(self.norm(x))
        return (logits, maps) if return_attn else logits
