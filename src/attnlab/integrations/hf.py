"""attnlab as an attention implementation of Hugging Face transformers: §5–§7 (training, prefill) and
§8.4 (Flash-Decoding) inside real models.

    import attnlab.integrations.hf
    attnlab.integrations.hf.register()        # once per process
    model = AutoModelForCausalLM.from_config(config, attn_implementation="attnlab")

``register`` puts ``attention_forward`` into transformers' ``AttentionInterface`` and ``padding_mask``
into its ``AttentionMaskInterface`` under one name. Every attention layer of the model then calls
``attention_forward(module, query, key, value, attention_mask, ...)`` with query (B, H, Nq, D) and
key, value (B, Hkv, Nk, D) — with a KV cache, the whole cache, the new tokens included — and the
mask ``padding_mask`` made: None when no key is padding, else the 2D padding mask (B, Lm) of the
keys. Each call takes one of four routes:

    route    when                                           attnlab call
    decode   no gradient, a cache (Nk > Nq), Nq <= 8,       flash_decode on the cache's own tensors
             no padding                                     (cache_seqlens = Lm for a static cache)
    dense    no padding                                     flash_attention (GQA, bottom-right causal)
    packed   no mask; position_ids that restart, or the     flash_attention_varlen over the documents
             collator's cu_seq_lens_q / cu_seq_lens_k
    padded   a padding mask with a 0 in it                  flash_attention_varlen on the real tokens

Why decoding goes through ``flash_decode``: transformers' DynamicCache hands the attention the whole
cache as one contiguous (B, Hkv, L, D) tensor per layer — exactly ``flash_decode``'s contiguous cache
layout, so no copy is made. ``flash_attention`` with Nq = 1 would compute the same numbers, but its
kernel gives each (sequence, head, query block) one program: B·H programs, 32 at batch 1 for a 1B
model on a GPU of 132 SMs. Flash-Decoding splits the keys too, so B·Hkv·splits programs fill the GPU
(§8.4). With left padding the real keys of row b are a suffix [p_b, L) of the cache, which
``cache_seqlens`` (a prefix per row) cannot express; those steps take the padded route, which
gathers the real tokens (one copy of K/V per layer, as transformers' own flash-attn path does).

The variants come from the model: ``sliding_window`` W (Mistral, Qwen 2, Gemma 2) is
``window=(W - 1, 0)`` — a key within W positions of the query, the query's own included, as
transformers' masks have it; ``softcap`` (Gemma 2's attn_logit_softcapping) is ``softcap``;
``scaling`` is ``scale``. Masks are aligned bottom-right: the queries are the last Nq positions of
the Lm keys the mask covers.

Not covered (a ValueError says so): attention dropout, attention sinks (``s_aux``), position biases,
``output_attentions=True``, 4D masks, masks with custom overlays (image-token blocks, prefix LM) and
chunked attention (Llama 4).
"""

from __future__ import annotations

import re
import weakref

import torch

from .. import api

NAME = "attnlab"
DECODE_MAX_QUERIES = 8  # up to this many new tokens per step (decoding, speculative steps) go to flash_decode
MIN_TRANSFORMERS = (4, 57)
INSTALL_HINT = "pip install 'attnlab[hf]'"

__all__ = ["NAME", "DECODE_MAX_QUERIES", "register", "attention_forward", "padding_mask"]


# -- registration --------------------------------------------------------------------------------------


def _interfaces():
    """transformers' AttentionInterface and AttentionMaskInterface (ImportError naming the extra)."""
    try:
        import transformers
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError(f"attnlab.integrations.hf needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}: "
                          f"{INSTALL_HINT} ({e})") from e
    have = tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    if have < MIN_TRANSFORMERS:
        raise ImportError(f"attnlab.integrations.hf needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, "
                          f"found {transformers.__version__}: {INSTALL_HINT}")
    return AttentionInterface, AttentionMaskInterface


def register(name: str = NAME) -> str:
    """Make ``attn_implementation=name`` run attnlab in every transformers model; returns ``name``.

    Registers ``attention_forward`` and ``padding_mask`` process-wide. Calling it again is harmless;
    a name transformers already uses for another implementation ("sdpa", "eager", ...) is refused.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name or "|" in name or name == "eager":
        raise ValueError(f"name must be a non-empty name without '|' other than 'eager', got {name!r}")
    attention, masks = _interfaces()
    taken = attention().get(name)
    if taken is not None and taken is not attention_forward:
        raise ValueError(f"name {name!r} is already an attention implementation of transformers "
                         f"({getattr(taken, '__qualname__', taken)}); choose another name")
    attention.register(name, attention_forward)
    masks.register(name, padding_mask)
    return name


# -- the mask: only padding, as a 2D boolean (B, Lm) ----------------------------------------------------


def padding_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                 mask_function=None, attention_mask: torch.Tensor | None = None, **kwargs):
    """transformers' mask hook: the padding of the keys as a (B, Lm) bool mask, or None without padding.

    The causal pattern and the sliding window are not materialised: ``attention_forward`` passes them
    to attnlab as ``causal`` and ``window``. ``attention_mask`` is the model's 2D mask of every token
    so far; its last ``kv_length`` columns are the keys' (a sliding-window cache keeps only those).
    """
    config = kwargs.get("config")
    if getattr(config, "attention_chunk_size", None):
        raise ValueError(f"attnlab does not take chunked attention (config.attention_chunk_size="
                         f"{config.attention_chunk_size}); use attn_implementation='sdpa'")
    if kwargs.get("use_vmap"):
        raise ValueError("attnlab takes causal, sliding-window and padding masks only, not a mask with custom "
                         "overlays (or_mask_function / and_mask_function); use attn_implementation='sdpa'")
    if attention_mask is None:
        # no padding; but a static cache hands over all its slots, and those past the tokens so far are
        # empty (transformers >= 5.24 passes no mask here at all): keep only the q_offset + q_length keys
        n = int(q_offset) + q_length
        if kv_offset == 0 and n < kv_length:
            return torch.ones(batch_size, n, dtype=torch.bool, device=kwargs.get("device"))
        return None
    attention_mask = attention_mask[:, -kv_length:]
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


# -- the attention function ----------------------------------------------------------------------------


def attention_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """One attention layer of a transformers model through attnlab.

    Arguments (transformers' attention interface):
        module: the attention module (``is_causal`` is read from it unless ``is_causal`` is given).
        query: (B, H, Nq, D); key, value: (B, Hkv, Nk, D), Nk >= Nq (a cache holds earlier keys).
        attention_mask: None or (B, Lm) bool/int padding mask of the keys (``padding_mask``), Lm <= Nk
            (Lm < Nk: a static cache, whose slots after Lm are empty); the queries are the last Nq of
            the Lm positions.
        dropout: must be 0 (attnlab has no attention dropout).
        scaling: the softmax scale (None: 1/sqrt(D)).
        sliding_window: W: a query sees the W keys up to and including its own position.
        softcap: scores become softcap·tanh(s/softcap).
        kwargs: ``position_ids`` (B or 1, N) to find packed documents; ``cu_seq_lens_q``,
            ``cu_seq_lens_k`` for a batch already packed into one row; the rest is ignored.
    Returns:
        (out (B, Nq, H, Dv), None) — no attention weights are ever formed.
    """
    _refuse_unsupported(dropout, kwargs)
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    common = dict(causal=causal, window=_window(sliding_window, causal), softcap=softcap, scale=scaling)
    if attention_mask is None:
        packed = _packed_documents(query, key, kwargs)
        if packed is not None:
            return _packed(query, key, value, packed, common), None
        return _dense(query, key, value, None, common), None
    mask = _check_mask(attention_mask, query, key)
    if bool(mask.all()):  # no padding, but fewer keys than the cache holds (a static cache)
        return _dense(query, key, value, mask.shape[1], common), None
    return _padded(query, key, value, mask, common), None


def _refuse_unsupported(dropout, kwargs) -> None:
    if dropout:
        raise ValueError(f"attnlab has no attention dropout, got dropout={dropout!r} (the model is training with "
                         "config.attention_dropout > 0); set attention_dropout=0.0")
    for name in ("s_aux", "sinks", "position_bias"):
        if kwargs.get(name) is not None:
            raise ValueError(f"attnlab does not take {name} (attention sinks or position biases); "
                             "use attn_implementation='eager' or 'sdpa' for this model")
    if kwargs.get("output_attentions"):
        raise ValueError("output_attentions=True needs the attention weights, which attnlab never forms; "
                         "use attn_implementation='eager'")


def _window(sliding_window, causal: bool):
    """transformers' ``sliding_window`` W as attnlab's window: (W - 1, 0) with causal attention."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window must be a positive int or None, got {sliding_window!r}")
    if not causal:
        raise ValueError(f"sliding_window={sliding_window} with bidirectional attention (is_causal=False) is not "
                         "supported by attnlab's transformers integration")
    return (sliding_window - 1, 0)


def _check_mask(attention_mask, query, key) -> torch.Tensor:
    """The padding mask as (B, Lm) bool, Nq <= Lm <= Nk."""
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor or None, got {type(attention_mask).__name__}")
    B, _, Nq, _ = query.shape
    Nk = key.shape[2]
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be a 2D padding mask (B, Lm) as attnlab's mask hook makes it, got "
                         f"shape {tuple(attention_mask.shape)}; custom 4D masks need attn_implementation='sdpa'")
    if attention_mask.dtype.is_floating_point or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer (1 = real token), got {attention_mask.dtype}")
    if attention_mask.shape[0] != B or not Nq <= attention_mask.shape[1] <= Nk:
        raise ValueError(f"attention_mask must have shape (B, Lm) with B = {B} and {Nq} <= Lm <= {Nk} (queries "
                         f"{Nq}, keys {Nk}), got {tuple(attention_mask.shape)}")
    return attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0


def _decoding(query, key, value, n_keys: int) -> bool:
    """A few new queries against a cache, with no gradient to carry: Flash-Decoding's case (§8.4)."""
    Nq = query.shape[2]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return Nq <= DECODE_MAX_QUERIES and n_keys > Nq and not needs_grad


def _dense(query, key, value, n_keys: int | None, common: dict) -> torch.Tensor:
    """No padding: every row holds ``n_keys`` keys (None: all Nk). Returns (B, Nq, H, Dv)."""
    B, Nk = query.shape[0], key.shape[2]
    n = Nk if n_keys is None else n_keys
    if _decoding(query, key, value, n):
        lens = None if n == Nk else torch.full((B,), n, dtype=torch.int32, device=query.device)
        out, _ = api.flash_decode(query, key, value, cache_seqlens=lens, **common)  # the cache as it lies
    else:
        if n < Nk:
            key, value = key[:, :, :n], value[:, :, :n]  # (B, Hkv, n, D)
        out = api.flash_attention(query, key, value, **common)
    return out.transpose(1, 2)  # (B, H, Nq, Dv) -> (B, Nq, H, Dv)


def _cumulative(lengths: torch.Tensor) -> torch.Tensor:
    """(B,) lengths -> (B + 1,) int32 cumulative lengths from 0."""
    return torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)


def _padded(query, key, value, mask: torch.Tensor, common: dict) -> torch.Tensor:
    """Drop the padding tokens, attend per sequence (varlen, bottom-right), put the rows back.

    Row b's real keys keep their order; its real queries are the real ones among the last Nq
    positions. Padding queries get zeros. Returns (B, Nq, H, Dv).
    """
    B, H, Nq, _ = query.shape
    Lm = mask.shape[1]
    q_mask = mask[:, Lm - Nq:]  # (B, Nq)
    q = query.transpose(1, 2)[q_mask]  # (total_q, H, D)
    k = key[:, :, :Lm].transpose(1, 2)[mask]  # (total_k, Hkv, D)
    v = value[:, :, :Lm].transpose(1, 2)[mask]  # (total_k, Hkv, Dv)
    # the longest row bounds the longest sequence: the kernels read the lengths on the GPU, no sync
    out = api.flash_attention_varlen(q, k, v, _cumulative(q_mask.sum(1)), _cumulative(mask.sum(1)),
                                     max_seqlen_q=Nq, max_seqlen_k=Lm, **common)
    full = out.new_zeros(B, Nq, H, out.shape[-1])  # (B, Nq, H, Dv)
    return full.index_put((q_mask,), out)


def _packed_documents(query, key, kwargs):
    """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) of documents packed along the rows, or
    None. The longest document is the collator's ``max_length_q``/``max_length_k`` where given, else
    bounded by the row (no document crosses a row).

    The collator's ``cu_seq_lens_q``/``cu_seq_lens_k`` (one row) are taken as given. Otherwise, without a
    cache (Nq == Nk), ``position_ids`` that do not go up by one start a new document there — the rule
    of transformers' own packed-sequence masks.
    """
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None or cu_k is not None:
        if cu_q is None or cu_k is None or query.shape[0] != 1:
            raise ValueError("cu_seq_lens_q and cu_seq_lens_k go together, with the documents packed into one row "
                             f"(B = 1); got B = {query.shape[0]}, cu_seq_lens_q "
                             f"{'given' if cu_q is not None else 'None'}, cu_seq_lens_k {'given' if cu_k is not None else 'None'}")
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        return (cu_q.to(torch.int32), cu_k.to(torch.int32), max_q if isinstance(max_q, int) else query.shape[2],
                max_k if isinstance(max_k, int) else key.shape[2])
    pos = kwargs.get("position_ids")
    B, _, N, _ = query.shape
    if pos is None or key.shape[2] != N or N < 2 or not isinstance(pos, torch.Tensor) or pos.dim() != 2 \
            or pos.shape[1] != N or pos.shape[0] not in (1, B):
        return None
    # every layer of a forward gets the same position_ids: read them once (a device synchronisation),
    # not once per layer; an in-place change of the tensor bumps its version and is read anew
    memo = (pos.data_ptr(), pos._version, tuple(pos.shape), B, pos.device)
    if _LAST_DOCS.get("memo") == memo and _LAST_DOCS["tensor"]() is pos:
        return _LAST_DOCS["documents"]
    documents = _documents_from_positions(pos, B, N)
    _LAST_DOCS.update(memo=memo, tensor=weakref.ref(pos), documents=documents)
    return documents


_LAST_DOCS: dict = {}


def _documents_from_positions(pos: torch.Tensor, B: int, N: int):
    """Documents start where ``position_ids`` (B or 1, N) do not go up by one; None if none but the rows'
    own starts do."""
    starts = torch.ones(B, N, dtype=torch.bool, device=pos.device)
    starts[:, 1:] = pos.diff(dim=-1).expand(B, N - 1) != 1  # (B, N): a document starts here
    if not bool(starts[:, 1:].any()):
        return None
    cu = torch.cat([starts.flatten().nonzero().flatten(), torch.tensor([B * N], device=pos.device)])
    cu = cu.to(torch.int32)  # (documents + 1,) over the B·N tokens, row after row
    return cu, cu, N, N


def _packed(query, key, value, cu_seqlens, common: dict) -> torch.Tensor:
    """Documents packed along the rows: attend inside each one. Returns (B, Nq, H, Dv)."""
    B, H, Nq, D = query.shape
    q = query.transpose(1, 2).reshape(B * Nq, H, D)  # (B·Nq, H, D)
    k = key.transpose(1, 2).reshape(B * key.shape[2], key.shape[1], D)  # (B·Nk, Hkv, D)
    v = value.transpose(1, 2).reshape(B * value.shape[2], value.shape[1], value.shape[3])  # (B·Nk, Hkv, Dv)
    cu_q, cu_k, max_q, max_k = cu_seqlens
    out = api.flash_attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k,
                                     **common)  # (B·Nq, H, Dv)
    return out.view(B, Nq, H, out.shape[-1])
