"""The Triton FlashAttention-2 kernels as a PyTorch operator (lecture §7.7: plug it into training), with the
variants of ``attnlab.variants`` (sliding windows, softcap, ALiBi) and packed variable-length batches.

``attnlab::flash_attn_fwd`` / ``flash_attn_bwd`` (padded batches) and ``attnlab::flash_attn_varlen_fwd`` /
``flash_attn_varlen_bwd`` (packed batches) are registered with ``torch.library`` (custom op + fake
implementation + autograd formula), so the operator works inside ``torch.compile(fullgraph=True)``; in eager
mode the same kernels run through a plain ``torch.autograd.Function``, which costs less host time per call.
The forward saves only q, k, v, O and the logsumexp L (§7.2); the backward recomputes P from L.

``unsupported`` says which inputs the kernels do not cover; ``attnlab.flash_attention`` (the
dispatch) asks it and sends those to the blockwise PyTorch path. Nothing here falls back.
"""

import torch

from .._checks import (
    VarlenDims,
    check_deterministic,
    check_qkv,
    check_variants,
    check_varlen,
    resolve_scale,
)
from .._runtime import interpret_mode, interpreter_problem, triton_available
from ..variants import Mask
from .config import BWD_HEAD_DIMS, FWD_HEAD_DIMS, KERNEL_DTYPES, device_capability

_VARIANTS = "int left, int right, float scale, float? softcap, Tensor? slopes, bool deterministic"
_VARLEN = "Tensor cu_q, Tensor cu_k, int max_q, int max_k"  # a packed batch: device lengths, longest sequences


def _forward(q, k, v, cu, left, right, scale, softcap, slopes):
    """The forward launcher; ``cu``: None, or a packed batch's (cu_q, cu_k, max_q, max_k): the cumulative
    lengths as device tensors (never read on the host) and the longest sequences (or upper bounds)."""
    from .prefill_fwd import prefill_forward

    return prefill_forward(q, k, v, mask=Mask(left, right), scale=scale, softcap=softcap, slopes=slopes,
                           cu_seqlens=None if cu is None else cu[:2], max_seqlen=None if cu is None else cu[2:])


def _backward_kernels(dout, q, k, v, out, lse, dlse, cu, left, right, scale, softcap, slopes, deterministic):
    from .prefill_bwd import prefill_backward

    if dout is None:
        dout = torch.zeros_like(out)
    return prefill_backward(dout, q, k, v, out, lse, mask=Mask(left, right), scale=scale, softcap=softcap,
                            slopes=slopes, cu_seqlens=None if cu is None else cu[:2],
                            max_seqlen=None if cu is None else cu[2:], dlse=dlse, deterministic=deterministic)


# -- the registered ops (torch.compile traces these) ------------------------------------------------


@torch.library.custom_op("attnlab::flash_attn_fwd", mutates_args=(),
                         schema=f"(Tensor q, Tensor k, Tensor v, {_VARIANTS}) -> (Tensor, Tensor)")
def _flash_attn_fwd(q, k, v, left, right, scale, softcap, slopes, deterministic):
    return _forward(q, k, v, None, left, right, scale, softcap, slopes)


@_flash_attn_fwd.register_fake
def _(q, k, v, left, right, scale, softcap, slopes, deterministic):
    from .layout import empty_like_layout
    from .prefill_fwd import _last_dim_contiguous

    B, H, Nq, _ = q.shape  # the output laid out as q is, as the kernel's launcher makes it
    return empty_like_layout(_last_dim_contiguous(q), (B, H, Nq, v.shape[-1])), q.new_empty((B, H, Nq), dtype=torch.float32)


@torch.library.custom_op("attnlab::flash_attn_varlen_fwd", mutates_args=(),
                         schema=f"(Tensor q, Tensor k, Tensor v, {_VARLEN}, {_VARIANTS}) -> (Tensor, Tensor)")
def _flash_attn_varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, left, right, scale, softcap, slopes, deterministic):
    return _forward(q, k, v, (cu_q, cu_k, max_q, max_k), left, right, scale, softcap, slopes)


@_flash_attn_varlen_fwd.register_fake
def _(q, k, v, cu_q, cu_k, max_q, max_k, left, right, scale, softcap, slopes, deterministic):
    from .layout import empty_like_layout
    from .prefill_fwd import _last_dim_contiguous

    total_q, H, _ = q.shape
    return empty_like_layout(_last_dim_contiguous(q), (total_q, H, v.shape[-1])), q.new_empty((H, total_q), dtype=torch.float32)


_BWD_IN = "Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse"


@torch.library.custom_op("attnlab::flash_attn_bwd", mutates_args=(),
                         schema=f"({_BWD_IN}, {_VARIANTS}) -> (Tensor, Tensor, Tensor)")
def _flash_attn_bwd(dout, q, k, v, out, lse, dlse, left, right, scale, softcap, slopes, deterministic):
    return _backward_kernels(dout, q, k, v, out, lse, dlse, None, left, right, scale, softcap, slopes, deterministic)


@torch.library.custom_op("attnlab::flash_attn_varlen_bwd", mutates_args=(),
                         schema=f"({_BWD_IN}, {_VARLEN}, {_VARIANTS}) -> (Tensor, Tensor, Tensor)")
def _flash_attn_varlen_bwd(dout, q, k, v, out, lse, dlse, cu_q, cu_k, max_q, max_k, left, right, scale, softcap,
                           slopes, deterministic):
    return _backward_kernels(dout, q, k, v, out, lse, dlse, (cu_q, cu_k, max_q, max_k), left, right, scale, softcap,
                             slopes, deterministic)


@_flash_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, dlse, *variants):
    from .layout import empty_like_layout
    from .prefill_fwd import _last_dim_contiguous

    return tuple(empty_like_layout(_last_dim_contiguous(t)) for t in (q, k, v))  # laid out as the inputs, as the launcher makes them


@_flash_attn_varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, dlse, *varlen_and_variants):
    from .layout import empty_like_layout
    from .prefill_fwd import _last_dim_contiguous

    return tuple(empty_like_layout(_last_dim_contiguous(t)) for t in (q, k, v))


def _refuse_double_backward() -> None:
    if torch.is_grad_enabled():  # backward(create_graph=True): the kernels' gradients are not differentiable
        raise RuntimeError("attnlab.flash_attention: double backward (create_graph=True) is not supported")


def _setup_context(ctx, inputs, output):
    q, k, v, *rest = inputs
    varlen = len(rest) == 10  # the varlen op's cu_q, cu_k, max_q, max_k come before the variants
    ctx.max_seqlen = tuple(rest[2:4]) if varlen else ()
    ctx.variants = tuple(rest[4 if varlen else 0:])  # left, right, scale, softcap, slopes, deterministic
    ctx.save_for_backward(q, k, v, *output, *(rest[:2] if varlen else ()))


def _op_backward(ctx, dout, dlse):
    _refuse_double_backward()
    q, k, v, out, lse, *cu = ctx.saved_tensors  # cu: the varlen op's cu_q, cu_k
    if cu:
        grads = _flash_attn_varlen_bwd(dout, q, k, v, out, lse, dlse, *cu, *ctx.max_seqlen, *ctx.variants)
    else:
        grads = _flash_attn_bwd(dout, q, k, v, out, lse, dlse, *ctx.variants)
    return (*grads,) + (None,) * (len(cu) + len(ctx.max_seqlen) + len(ctx.variants))


_flash_attn_fwd.register_autograd(_op_backward, setup_context=_setup_context)
_flash_attn_varlen_fwd.register_autograd(_op_backward, setup_context=_setup_context)


# -- eager mode --------------------------------------------------------------------------------------


class _FlashAttnFn(torch.autograd.Function):
    """The same forward and backward as the registered ops, for eager mode: a custom op's dispatch
    costs tens of microseconds of host time per call, which at N = 1K is a visible share of a GPU
    step. ``torch.compile`` traces the registered ops instead. ``cu``: None, or a packed batch's
    (cu_q, cu_k, max_q, max_k), as ``_forward`` takes it."""

    @staticmethod
    def forward(ctx, q, k, v, cu, left, right, scale, softcap, slopes, deterministic):
        out, lse = _forward(q, k, v, cu, left, right, scale, softcap, slopes)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.call = (cu, left, right, scale, softcap, slopes, deterministic)
        ctx.set_materialize_grads(False)  # an unused lse gets no zero gradient (and no extra work)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        _refuse_double_backward()
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward_kernels(dout, q, k, v, out, lse, dlse, *ctx.call)
        return (dq, dk, dv) + (None,) * 7


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def _triton_ok() -> bool:
    """``triton_available()``; under ``torch.compile`` a constant found while tracing (the cached check is not traced)."""
    return triton_available()


def _interpreter_problem() -> str:
    """``interpreter_problem()`` or "" where there is none; under ``torch.compile`` a constant found while tracing."""
    return interpreter_problem() or ""


if hasattr(torch, "compiler") and hasattr(torch.compiler, "assume_constant_result"):
    _triton_ok = torch.compiler.assume_constant_result(_triton_ok)
    _interpreter_problem = torch.compiler.assume_constant_result(_interpreter_problem)


def unsupported(q, dims, *, needs_grad: bool) -> tuple[str, str] | None:
    """Why the kernels cannot take this call — a reason key and a message — or None if they can.

    ``dims`` from ``check_qkv`` (``AttnDims``) or ``check_varlen`` (``VarlenDims``); ``needs_grad``:
    the call will be differentiated (the backward kernels cover fewer head dims). Every variant
    (window, softcap, ALiBi, packed batches, deterministic) is covered wherever the plain call is."""
    if not (q.is_cuda or (q.device.type == "cpu" and interpret_mode())):
        return "device", f"tensors on {q.device} (the kernels need CUDA, or TRITON_INTERPRET=1 on the CPU)"
    if not _triton_ok():
        return "triton", "triton is not installed (pip install 'attnlab[gpu]')"
    if q.device.type == "cpu" and (problem := _interpreter_problem()):
        return "interpreter", problem
    if q.is_cuda and (torch.cuda.get_device_properties(q.device).major if _is_compiling()  # (a constant there)
                      else device_capability(q.device)[0]) < 8:
        return "gpu", f"GPU {torch.cuda.get_device_properties(q.device).name} is older than compute capability 8.0"
    if q.dtype not in KERNEL_DTYPES:
        return f"dtype-{q.dtype}", f"dtype {q.dtype} (the kernels take float16 and bfloat16)"
    if dims.Dv != dims.D:
        return "dv", f"value head dim {dims.Dv} differs from the query/key head dim {dims.D}"
    if dims.D not in FWD_HEAD_DIMS:
        return f"d-{dims.D}", f"head dim {dims.D} (the kernels take {', '.join(map(str, FWD_HEAD_DIMS))})"
    if needs_grad and dims.D not in BWD_HEAD_DIMS:
        return (f"bwd-d-{dims.D}", f"head dim {dims.D} with gradients (the backward kernels take "
                f"{', '.join(map(str, BWD_HEAD_DIMS))})")
    return None


def _positive_scale(q, scale: float, softcap, slopes):
    """(q, scale) for the kernels. Their forward takes a block's row maximum of the raw scores and scales it (one
    fused multiply-add per score), which is the maximum of the scaled scores only for a scale ≥ 0; with a negative
    one the exponentials could overflow. So a negative scale runs as −q with −scale: the same scaled scores to the
    bit, and autograd carries dQ's sign back through the negation. (Softcap and ALiBi scale first.)"""
    if scale < 0 and softcap is None and slopes is None:
        return -q, -scale
    return q, scale


def attention_fn(q, k, v, *, mask: Mask, scale: float, softcap: float | None = None,
                 slopes: torch.Tensor | None = None, deterministic: bool = False):
    """(out, lse) through the kernels, differentiable; inputs already checked and supported.
    q (B, H, Nq, D), k/v (B, Hkv, Nk, D); ``slopes`` (B, H) float32 or None."""
    q, scale = _positive_scale(q, scale, softcap, slopes)
    args = (mask.left, mask.right, scale, softcap, slopes, deterministic)
    if _is_compiling():
        return _flash_attn_fwd(q, k, v, *args)
    return _FlashAttnFn.apply(q, k, v, None, *args)


def varlen_attention_fn(q, k, v, vdims: VarlenDims, *, mask: Mask, scale: float, softcap: float | None = None,
                        slopes: torch.Tensor | None = None, deterministic: bool = False):
    """(out (total_q, H, Dv), lse (H, total_q)) of a packed batch through the kernels, differentiable;
    inputs already checked (``vdims`` from ``check_varlen``) and supported. The kernels read the
    cumulative lengths from device memory and size their grids by ``vdims.max_q`` / ``max_k``:
    nothing is read on the host and nothing is copied to the device."""
    q, scale = _positive_scale(q, scale, softcap, slopes)
    args = (mask.left, mask.right, scale, softcap, slopes, deterministic)
    cu = (vdims.cu_seqlens_q, vdims.cu_seqlens_k, vdims.max_q, vdims.max_k)
    if _is_compiling():
        return _flash_attn_varlen_fwd(q, k, v, *cu, *args)
    return _FlashAttnFn.apply(q, k, v, cu, *args)


def _refuse(q, dims, k, v) -> None:
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    why = unsupported(q, dims, needs_grad=needs_grad)
    if why is not None:
        raise ValueError(f"flash_attention_triton: the kernels do not take {why[1]}; "
                         "attnlab.flash_attention runs such inputs on the blockwise PyTorch path")


def flash_attention_triton(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
                           window=None, softcap: float | None = None, alibi_slopes=None,
                           deterministic: bool = False):
    """Exact attention through the Triton FlashAttention-2 kernels, differentiable.

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, D), H % Hkv == 0 (GQA/MQA read K/V
            heads directly, nothing is repeated). float16 or bfloat16 on a CUDA GPU (or on the CPU
            under ``TRITON_INTERPRET=1``); D in 32, 64, 96, 128 (and 256 without gradients).
        causal: bottom-right aligned mask: query i sees keys j <= i + Nk - Nq (SDPA's ``is_causal``
            is top-left; the two agree when Nq == Nk). Rows that see no key give out = 0, lse = -inf.
        scale: softmax scale, default 1/sqrt(D).
        return_lse: also return the logsumexp (B, H, Nq), float32, natural log; it is differentiable.
        window: (left, right): query i sees keys i + off - left <= j <= i + off + right, off = Nk - Nq,
            -1 = unbounded side; the kernels skip the key blocks outside it. causal=True is right = 0.
        softcap: scores become softcap·tanh(s/softcap) (None: off).
        alibi_slopes: (H,) or (B, H) float32: adds -slope·|i + off - j| to the scores (after softcap).
        deterministic: bit-identical gradients run after run (the default backward already is;
            this also refuses the dQ-atomics configuration).
    Returns:
        out (B, H, Nq, D) in q's dtype, or (out, lse).

    Inputs the kernels do not cover raise a ``ValueError`` saying why; ``attnlab.flash_attention``
    is the entry point that falls back to the blockwise PyTorch path instead.
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    deterministic = check_deterministic(deterministic)
    _refuse(q, dims, k, v)
    out, lse = attention_fn(q, k, v, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                            deterministic=deterministic)
    return (out, lse) if return_lse else out


def flash_attention_varlen_triton(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q: int | None = None,
                                  max_seqlen_k: int | None = None, causal: bool = False, window=None,
                                  softcap: float | None = None, alibi_slopes=None, deterministic: bool = False,
                                  scale: float | None = None, return_lse: bool = False):
    """Attention over a packed batch of variable-length sequences (flash-attn's ``flash_attn_varlen_func``
    layout) through the Triton kernels, differentiable; no padding is stored or computed.

    Arguments:
        q: (total_q, H, D); k: (total_k, Hkv, D); v: (total_k, Hkv, D); sequence b owns rows
            ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and ``cu_seqlens_k[b]:cu_seqlens_k[b+1]`` of k, v.
        cu_seqlens_q, cu_seqlens_k: (B + 1,) int32 cumulative lengths on q's device. Empty sequences
            are allowed.
        max_seqlen_q, max_seqlen_k: at least the longest sequences (upper bounds are fine). On CUDA,
            with both given, the call never synchronises: the lengths' values are not checked, the
            kernels read them from device memory and clamp them into the packed tensors, so bad
            values give wrong numbers, never an access out of bounds. Without them (or on the CPU)
            the lengths are read and checked on the host, one device synchronisation per call.
        causal, window, softcap, alibi_slopes ((H,) or (B, H)), deterministic, scale: as
            ``flash_attention_triton``, aligned bottom-right per sequence (off = its Nk - Nq).
        return_lse: also return lse (H, total_q), float32.
    Returns:
        out (total_q, H, D) in q's dtype, or (out, lse).
    """
    vdims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    scale = resolve_scale(scale, vdims.D)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, vdims.B, vdims.H, q.device)
    deterministic = check_deterministic(deterministic)
    _refuse(q, vdims, k, v)
    out, lse = varlen_attention_fn(q, k, v, vdims, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                                   deterministic=deterministic)
    return (out, lse) if return_lse else out
