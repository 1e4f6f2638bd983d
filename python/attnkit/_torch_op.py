"""attnkit's attention as PyTorch operators (torch.library): `attnkit::sdpa`
and `attnkit::sdpa_backward`, with fake (meta) implementations for tracing
and an autograd formula, so torch.compile(..., fullgraph=True) and
torch.export see one opaque node instead of a graph break at a ctypes call.

    out, lse = torch.ops.attnkit.sdpa(q, k, v, attn_mask, is_causal, scale,
                                      softcap, enable_gqa, backend, sinks)

q [..., Hq, L, E], k and v [..., Hkv, S, E] (Hkv divides Hq with
enable_gqa); attn_mask None or broadcastable to [..., Hq, L, S], bool (True =
take part) or float (added to the scores), a constant: it gets no gradient,
and one that requires grad is refused. is_causal is top-left, as PyTorch's;
scale None means 1/sqrt(E); softcap 0 means none (else s = softcap *
tanh(s / softcap) before the mask); backend a name or "auto"; sinks None or
one logit per query head [Hq] (attnkit.attention()'s rule; they get a
gradient like q, k and v: gpt-oss trains them). out is q's
shape and dtype, lse [..., Hq, L] float32 (-inf for a row that sees no key).
The backward recomputes the weights from lse (attnkit_backward) and returns
dq, dk, dv in the inputs' dtypes, dk and dv summed over each KV head's query
heads, and dsinks (float32 [Hq]; empty without sinks). A second derivative (create_graph=True) is refused: attnkit's
backward has no derivative of its own.

Imported by attnkit.integrations.transformers, or directly; needs torch.
"""

from typing import Optional, Tuple

import torch

from . import _autograd
from . import _ops

Tensor = torch.Tensor


def _call(query, key, value, attn_mask, is_causal, scale, softcap, enable_gqa, backend,
          sinks=None):
    """The library call both operators make (no dropout; the mask a constant)."""
    return _ops._Sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, backend,
                      softcap=softcap, sinks=sinks)


@torch.library.custom_op("attnkit::sdpa", mutates_args=())
def sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    is_causal: bool,
    scale: Optional[float],
    softcap: float,
    enable_gqa: bool,
    backend: str,
    sinks: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    return _call(query, key, value, attn_mask, is_causal, scale, softcap, enable_gqa,
                 backend, sinks).forward(return_lse=True)


@sdpa.register_fake
def _sdpa_fake(query, key, value, attn_mask, is_causal, scale, softcap, enable_gqa, backend,
               sinks=None):
    out = query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))
    lse = query.new_empty(tuple(query.shape[:-1]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("attnkit::sdpa_backward", mutates_args=())
def sdpa_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    attn_mask: Optional[Tensor],
    is_causal: bool,
    scale: Optional[float],
    softcap: float,
    enable_gqa: bool,
    backend: str,
    sinks: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    call = _call(query, key, value, attn_mask, is_causal, scale, softcap, enable_gqa, backend,
                 sinks)
    dq, dk, dv, _, dsinks = call.backward(out, lse, grad_out, mask_grad=False,
                                          sinks_grad=sinks is not None)
    if dsinks is None:
        dsinks = query.new_empty((0,), dtype=torch.float32)
    return dq, dk, dv, dsinks


@sdpa_backward.register_fake
def _sdpa_backward_fake(grad_out, query, key, value, out, lse, attn_mask, is_causal, scale,
                        softcap, enable_gqa, backend, sinks=None):
    dsinks = query.new_empty((0 if sinks is None else sinks.shape[0],), dtype=torch.float32)
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), dsinks


def _setup_context(ctx, inputs, output):
    query, key, value, attn_mask, is_causal, scale, softcap, enable_gqa, backend, sinks = inputs
    if attn_mask is not None and attn_mask.requires_grad:
        raise NotImplementedError(
            "attnkit::sdpa takes attn_mask as a constant and it requires grad: use "
            "attnkit.scaled_dot_product_attention for a float mask's gradient"
        )
    if any(x is not None and x.requires_grad for x in (query, key, value, sinks)):
        _autograd._has_backward(backend)  # refused now, not at backward time
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse, attn_mask, sinks)
    ctx.options = (is_causal, scale, softcap, enable_gqa, backend)
    ctx.set_materialize_grads(False)  # so a gradient reaching lse can be told apart


def _backward(ctx, grad_out, grad_lse):
    if grad_lse is not None:
        raise NotImplementedError(
            "attnkit::sdpa has no gradient through its lse output: differentiate through out only"
        )
    query, key, value, out, lse, attn_mask, sinks = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    is_causal, scale, softcap, enable_gqa, backend = ctx.options
    dq, dk, dv, dsinks = sdpa_backward(grad_out, query, key, value, out, lse, attn_mask,
                                       is_causal, scale, softcap, enable_gqa, backend, sinks)
    dsinks = dsinks.to(sinks.dtype) if sinks is not None and sinks.requires_grad else None
    return dq, dk, dv, None, None, None, None, None, None, dsinks


sdpa.register_autograd(_backward, setup_context=_setup_context)
