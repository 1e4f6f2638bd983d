"""torch.autograd for scaled_dot_product_attention: a torch.autograd.Function
whose forward runs attnkit with return_lse, saving q, k, v, out and lse, and
whose backward runs attnkit_backward (the backend's backward pass, from the
lse, without the attention matrix). Imported only when a torch tensor
requires grad, so the package still needs only numpy.
"""

import torch

from . import _ops

_without_backward = None  # names of the backends without a backward pass


def _has_backward(backend):
    """NotImplementedError now, at forward time, when `backend` is a name
    whose capabilities have no backward pass ("auto" chooses one that has)."""
    global _without_backward
    if backend == "auto":
        return
    if _without_backward is None:  # the context's backends never change
        _without_backward = {
            b["name"] for b in _ops.backends() if not b["capabilities"]["backward"]["supported"]
        }
    if backend in _without_backward:
        raise NotImplementedError(
            f"backend {backend!r} has no backward pass, and an input requires grad: "
            "choose a backend with one (attnkit.backends()[i]['capabilities']['backward']) "
            "or 'auto', or call under torch.no_grad()"
        )


class _SdpaFunction(torch.autograd.Function):
    """Inputs: query, key, value, attn_mask (tensor, array or None), then
    the non-tensor options (is_causal, scale, enable_gqa, backend,
    return_lse, compute: the forward's and the backward's). Outputs: out,
    and lse (not differentiable) with return_lse."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, enable_gqa, backend,
                return_lse, compute):
        sdpa = _ops._Sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                          backend, compute)
        out, lse = sdpa.forward(return_lse=True)
        mask_is_tensor = torch.is_tensor(attn_mask)
        ctx.save_for_backward(query, key, value, out, lse,
                              attn_mask if mask_is_tensor else None)
        ctx.mask = None if mask_is_tensor else attn_mask  # an array, or None
        # The backend as given: "auto" lets the backward pick the first host
        # backend whose backward takes the problem (CUDA tensors resolve to
        # the device backend again).
        ctx.options = (is_causal, scale, enable_gqa, backend, compute)
        if not return_lse:
            return out
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, *unused_grad_lse):
        # Grad mode is on here only under create_graph=True: the gradients
        # would then need their own derivative, which attnkit does not have
        # (returning them detached would silently drop that term).
        if torch.is_grad_enabled():
            raise RuntimeError(
                "attnkit's attention backward is not differentiable: create_graph=True (double "
                "backward, gradient penalties, Hessians) is not supported through "
                "attnkit.scaled_dot_product_attention"
            )
        query, key, value, out, lse, mask_tensor = ctx.saved_tensors
        attn_mask = mask_tensor if mask_tensor is not None else ctx.mask
        is_causal, scale, enable_gqa, backend, compute = ctx.options
        want = ctx.needs_input_grad
        mask_grad = bool(want[3])
        sdpa = _ops._Sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                          backend, compute)
        dq, dk, dv, dbias, _ = sdpa.backward(out, lse, grad_out, mask_grad)
        dmask = None
        if mask_grad:
            dmask = _ops._sum_to_shape(dbias, attn_mask.shape).to(attn_mask.dtype)
        return (
            dq.to(query.dtype) if want[0] else None,
            dk.to(key.dtype) if want[1] else None,
            dv.to(value.dtype) if want[2] else None,
            dmask,
            None,
            None,
            None,
            None,
            None,
            None,
        )


def sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, backend,
         return_lse, compute="exact"):
    """scaled_dot_product_attention as an autograd node (its docstring)."""
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"dropout_p={dropout_p}: attnkit computes attention without dropout; pass "
            "dropout_p=0.0 and apply dropout outside"
        )
    _has_backward(backend)
    return _SdpaFunction.apply(query, key, value, attn_mask, is_causal, scale, enable_gqa,
                               backend, return_lse, compute)
