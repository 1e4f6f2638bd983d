"""The attention calls: PyTorch-compatible SDPA, the full operator, and what
ran last."""

import ctypes
import math
import threading

import numpy as np

from . import _arrays
from . import _capi

_last = threading.local()

# attnkit dtype code -> torch dtype name, for the float tensors made here.
_TORCH_DTYPES = {_capi.F32: "float32", _capi.F16: "float16", _capi.BF16: "bfloat16"}

# compute= names -> ATTNKIT_COMPUTE_* (config.proto's EXACT and FAST).
_COMPUTE_MODES = {"exact": _capi.COMPUTE_EXACT, "fast": _capi.COMPUTE_FAST}


def compute_code(compute):
    """The C API's code for compute= ("exact" or "fast", in any case);
    ValueError naming the argument, the value and the allowed ones."""
    code = _COMPUTE_MODES.get(compute.lower()) if isinstance(compute, str) else None
    if code is None:
        raise ValueError(f"compute must be 'exact' or 'fast'; got {compute!r}")
    return code


def last_run():
    """What the calling thread's last attnkit call ran: a dict with backend,
    kernel and reason (why that backend), or None before any call."""
    return getattr(_last, "run", None)


def last_call_addresses():
    """The addresses the calling thread's last call handed to the library for
    q, k, v and o (for tests that check inputs are not copied)."""
    return dict(getattr(_last, "addresses", {}))


def _caps_dict(c):
    def names(bits, table):
        return [n for v, n in table.items() if bits & (1 << v)]

    return {
        "dtypes": names(c.dtypes, _capi.DTYPE_NAMES),
        "kv_dtypes": names(c.kv_dtypes, _capi.DTYPE_NAMES),
        "masks": names(c.masks, _capi.MASK_NAMES),
        "alignments": names(c.alignments, {0: "top_left", 1: "bottom_right"}),
        "layouts": names(c.layouts, {0: "BHTD", 1: "BTHD"}),
        "head_dims": [c.head_dims[i] for i in range(c.num_head_dims)]
        if c.num_head_dims > 0
        else (c.min_head_dim, c.max_head_dim),
        "max_group_size": c.max_group_size or None,
        "lse": bool(c.lse),
        "kv_lengths": bool(c.kv_lengths),
        "blocked_mask": bool(c.blocked_mask),
        "additive_bias": bool(c.additive_bias),
        "softcap": bool(c.softcap),
        "deterministic": bool(c.deterministic),
        "paged_kv": bool(c.paged_kv),
        "ragged": bool(c.ragged),
        "sinks": bool(c.sinks),
        "alibi": bool(c.alibi),
        # V and the output may have a head dim Ev of their own (MLA).
        "value_head_dim": bool(c.value_head_dim),
        # The K/V types for which compute="fast" computes in the storage type
        # (for the others, and f32, it runs exact).
        "fast_kv_dtypes": names(c.fast_kv_dtypes, _capi.DTYPE_NAMES),
        # What the backward pass (attnkit_backward) takes.
        "backward": {
            "supported": bool(c.bwd_supported),
            "dtypes": names(c.bwd_dtypes, _capi.DTYPE_NAMES),
            "kv_dtypes": names(c.bwd_kv_dtypes, _capi.DTYPE_NAMES),
            "masks": names(c.bwd_masks, _capi.MASK_NAMES),
            "kv_lengths": bool(c.bwd_kv_lengths),
            "blocked_mask": bool(c.bwd_blocked_mask),
            "additive_bias": bool(c.bwd_additive_bias),
            "bias_grad": bool(c.bwd_bias_grad),
            "softcap": bool(c.bwd_softcap),
            "ragged": bool(c.bwd_ragged),
            "alibi": bool(c.bwd_alibi),
            "sinks": bool(c.bwd_sinks),
            "value_head_dim": bool(c.bwd_value_head_dim),
            "deterministic": bool(c.bwd_deterministic),
        },
    }


def backends():
    """Every registered backend: name, description, available (bool) and the
    reason when not, memory ("host" or "device") and capabilities (a dict)."""
    ctx = _capi.context()
    out = []
    for i in range(_capi.lib.attnkit_num_backends(ctx)):
        info = _capi.BackendInfo()
        info.struct_size = ctypes.sizeof(info)
        _capi.call(_capi.lib.attnkit_backend_info_get, ctx, i, ctypes.byref(info))
        out.append(
            {
                "name": info.name.decode(),
                "description": info.description.decode(),
                "available": info.available == _capi.OK,
                "reason": info.unavailable_reason.decode(),
                "memory": "host" if info.uses_host_memory else "device",
                "capabilities": _caps_dict(info.caps),
            }
        )
    return out


def set_num_threads(backend, n):
    """Worker threads for a CPU backend."""
    _capi.call(_capi.lib.attnkit_set_num_threads, _capi.context(), backend.encode(), int(n))


_memory = None  # backend name -> (memory, available, reason), per context


def _backend_memory():
    global _memory
    if _memory is None:
        _memory = {b["name"]: (b["memory"], b["available"], b["reason"]) for b in backends()}
    return _memory


def _place(backend, ops):
    """The backend to run for operands `ops` (q, k, v), checking that memory
    and backend agree: host arrays run on host backends ("auto" = the best
    host backend), CUDA tensors on a device backend ("auto" = the first
    available one), on the caller's current torch stream."""
    devices = {op.device for op in ops}
    if len(devices) > 1:
        raise ValueError(f"q, k and v must be on one device; got {', '.join(sorted(devices))}")
    device = devices.pop()
    memory = _backend_memory()
    if device == "cpu":
        if backend in memory and memory[backend][0] == "device":
            raise ValueError(
                f"backend {backend!r} reads device memory and these are host arrays: move them "
                "to the GPU (tensor.cuda()) or choose a host backend"
            )
        return backend
    if backend == "auto":
        ready = [n for n, (mem, ok, _) in memory.items() if mem == "device" and ok]
        if not ready:
            why = "; ".join(f"{n}: {r}" for n, (mem, ok, r) in memory.items() if mem == "device")
            raise ValueError(
                "CUDA tensors need a device backend and none is available here"
                + (f" ({why})" if why else "")
            )
        backend = ready[0]
    elif backend in memory and memory[backend][0] == "host":
        raise ValueError(
            f"backend {backend!r} runs on the host and these are CUDA tensors: move them to the "
            "CPU (tensor.cpu()) or choose a device backend"
        )
    import torch

    stream = torch.cuda.current_stream(ops[0].owner.device).cuda_stream
    _capi.call(_capi.lib.attnkit_set_stream, _capi.context(), backend.encode(),
               ctypes.c_void_p(stream))
    return backend


def _like(x, ref, np_dtype, torch_name):
    """x (array-like or tensor) as the same kind and device as operand ref:
    a torch tensor on ref's device when ref is torch, else a numpy array."""
    if _arrays.is_torch(ref.owner):
        import torch

        return torch.as_tensor(x, dtype=getattr(torch, torch_name), device=ref.owner.device)
    if _arrays.is_torch(x):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np_dtype)


class _Call:
    """One attnkit_run being assembled: the problem, the tensor views and the
    Python objects that own their memory (kept alive until the call ends)."""

    def __init__(self):
        self.problem = _capi.Problem()
        _capi.lib.attnkit_problem_init(ctypes.byref(self.problem))
        self.args = _capi.Args()
        self.args.struct_size = ctypes.sizeof(self.args)
        self.keep = []

    def set(self, field, op, shape4, strides4, code=None):
        self.keep.append(op)
        setattr(self.args, field, _arrays.tensor(op, shape4, strides4, code))

    def run(self, backend, grads=None):
        """attnkit_run, or attnkit_backward with `grads` (a _capi.Grads)."""
        result = _capi.RunResult()
        result.struct_size = ctypes.sizeof(result)
        head = (_capi.context(), backend.encode(), ctypes.byref(self.problem),
                ctypes.byref(self.args))
        if grads is None:
            _capi.call(_capi.lib.attnkit_run, *head, ctypes.byref(result))
        else:
            _capi.call(_capi.lib.attnkit_backward, *head, ctypes.byref(grads),
                       ctypes.byref(result))
        _last.run = {
            "backend": result.backend.decode(),
            "kernel": result.kernel.decode(),
            "reason": result.reason.decode(),
        }
        _last.addresses = {n: getattr(self.args, n).data or 0 for n in ("q", "k", "v", "o")}


def _as4(op, name, heads_axis_present=True):
    """(shape4, strides4) of operand [..., H, T, d] seen as [B, H, T, d], or
    None when its leading dims do not collapse into one stride."""
    if op.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dims ([..., L, E]); got shape {op.shape}")
    if op.ndim == 2:
        return (1, 1) + op.shape, (0, 0) + op.strides
    collapsed = _arrays.collapse_leading(op.shape, op.strides, 3)
    if collapsed is None:
        return None
    b, sb = collapsed
    return (b,) + op.shape[-3:], (sb,) + op.strides[-3:]


def _operand4(x, name):
    op = _arrays.as_operand(x, name)
    view = _as4(op, name)
    if view is None:  # leading dims that no single stride describes: copy once
        x = x.contiguous() if _arrays.is_torch(x) else np.ascontiguousarray(op.owner)
        op = _arrays.as_operand(x, name)
        view = _as4(op, name)
    return op, view[0], view[1]


def _pair_input(x, full_shape, batch_dims, code, name):
    """A mask or bias broadcast to full_shape [*batch, H, L, S], as
    (operand, shape4, strides4)."""
    if _arrays.is_torch(x):
        t = x.expand(full_shape)
        op = _arrays.Operand(t, code, t.shape, t.stride(), t.data_ptr())
        if _arrays.collapse_leading(op.shape, op.strides, 3) is None:
            t = t.contiguous()
            op = _arrays.Operand(t, code, t.shape, t.stride(), t.data_ptr())
    else:
        try:
            a = np.broadcast_to(x, full_shape)
        except ValueError as e:
            raise ValueError(
                f"{name} of shape {np.shape(x)} does not broadcast to {tuple(full_shape)}"
            ) from e
        if _arrays.collapse_leading(a.shape, tuple(s // a.itemsize for s in a.strides), 3) is None:
            a = np.ascontiguousarray(a)
        op = _arrays.Operand(
            a, code, a.shape, tuple(s // a.itemsize for s in a.strides), a.ctypes.data
        )
    view = _as4(op, name)
    return op, view[0], view[1]


class _Sdpa:
    """SDPA's arguments checked and assembled into a _Call: the problem, q,
    k, v and the mask set; the forward adds o (and lse), the backward o,
    lse and the gradients."""

    def __init__(self, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                 backend, compute="exact", softcap=0.0, sinks=None):
        if dropout_p != 0.0:
            raise NotImplementedError(
                f"dropout_p={dropout_p}: attnkit computes attention without dropout; pass "
                "dropout_p=0.0 and apply dropout outside"
            )
        if attn_mask is not None and is_causal:
            raise ValueError("attn_mask and is_causal=True cannot be set together (as in PyTorch)")
        compute = compute_code(compute)
        q, q4, qs = _operand4(query, "query")
        k, k4, ks = _operand4(key, "key")
        v, v4, vs = _operand4(value, "value")
        if q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1]:
            raise ValueError(
                f"query {q.shape}, key {k.shape} and value {v.shape} must share their batch "
                "dims, and key and value their heads and length"
            )
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"query and key must have the same head dim E; got {q.shape[-1]} and "
                f"{k.shape[-1]} (value may have its own, Ev, as in PyTorch)"
            )
        heads, kv_heads = q4[1], k4[1]
        if heads != kv_heads and not enable_gqa:
            raise ValueError(
                f"query has {heads} heads and key {kv_heads}: pass enable_gqa=True for "
                "grouped-query attention"
            )
        if k.code != v.code:
            raise ValueError(
                f"key and value must share a dtype; got {_capi.DTYPE_NAMES[k.code]} and "
                f"{_capi.DTYPE_NAMES[v.code]}"
            )
        self.backend = _place(backend, (q, k, v))
        self.q, self.k, self.v = q, k, v
        self.call = call = _Call()
        p = call.problem
        p.batch, p.num_heads, p.q_len, p.head_dim = q4
        p.num_kv_heads, p.kv_len = k4[1], k4[2]
        # Ev, the head dim of value and the output (MLA: 512 against E 576).
        self.value_dim = v.shape[-1]
        if self.value_dim != q.shape[-1]:
            p.value_head_dim = self.value_dim
        p.dtype, p.kv_dtype = q.code, k.code
        p.layout = _capi.LAYOUT_BTHD if qs[1] < qs[2] else _capi.LAYOUT_BHTD
        p.scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        # Not an SDPA argument: the torch op and the Transformers backend
        # (Gemma 2's logit softcapping) set it; s = softcap * tanh(s / softcap).
        p.softcap = float(softcap or 0.0)
        if is_causal:
            p.mask = _capi.MASK_CAUSAL
            p.alignment = _capi.ALIGN_TOP_LEFT
        p.compute = compute
        call.set("q", q, q4, qs)
        call.set("k", k, k4, ks)
        call.set("v", v, v4, vs)
        # The scores' shape [..., Hq, L, S], which a mask broadcasts to.
        self.pair_shape = tuple(q.shape[:-1]) + (k.shape[-2],)
        self.has_bias = False
        if attn_mask is not None:
            self._set_mask(attn_mask)
        # Not an SDPA argument either: gpt-oss's sinks (attention()'s rule).
        if sinks is not None:
            _set_per_head(call, "sinks", "sinks", sinks, q, heads, "logit")

    def _set_mask(self, attn_mask):
        q, call = self.q, self.call
        if _arrays.is_torch(q.owner) != _arrays.is_torch(attn_mask) or (
            _arrays.is_torch(attn_mask) and attn_mask.device != q.owner.device
        ):
            is_bool_mask = str(getattr(attn_mask, "dtype", "")).endswith("bool")
            attn_mask = _like(attn_mask, q, np.bool_ if is_bool_mask else np.float32,
                              "bool" if is_bool_mask else "float32")
        is_bool = (
            attn_mask.dtype == __import__("torch").bool
            if _arrays.is_torch(attn_mask)
            else np.asarray(attn_mask).dtype == np.bool_
        )
        if is_bool:  # PyTorch: True = take part; attnkit: 1 = blocked
            blocked = ~attn_mask if _arrays.is_torch(attn_mask) else ~np.asarray(attn_mask)
            if _arrays.is_torch(blocked):
                blocked = blocked.to(__import__("torch").uint8)
            else:
                blocked = blocked.view(np.uint8)
            op, m4, ms = _pair_input(blocked, self.pair_shape, (), _capi.U8, "attn_mask")
            call.problem.blocked_mask = 1
            call.set("blocked_mask", op, m4, ms)
        else:
            bias = (
                attn_mask.detach().float()
                if _arrays.is_torch(attn_mask)
                else np.asarray(attn_mask, dtype=np.float32)
            )
            op, b4, bs = _pair_input(bias, self.pair_shape, (), _capi.F32, "attn_mask")
            call.problem.additive_bias = 1
            call.set("bias", op, b4, bs)
            self.has_bias = True

    @staticmethod
    def _row_view(op, name="lse"):
        """(shape3, strides3) of an lse operand [..., Hq, L] as [B, Hq, L],
        or None when its leading dims do not collapse into one stride."""
        if op.ndim == 1:
            return (1, 1) + op.shape, (0, 0) + op.strides
        collapsed = _arrays.collapse_leading(op.shape, op.strides, 2)
        if collapsed is None:
            return None
        return (collapsed[0],) + op.shape[-2:], (collapsed[1],) + op.strides[-2:]

    def out_shape(self):
        """The output's shape: query's, with value's head dim Ev last."""
        return tuple(self.q.shape[:-1]) + (self.value_dim,)

    def forward(self, return_lse):
        """Runs the forward: o [..., Hq, L, Ev] (query's dtype and kind), and
        lse [..., Hq, L] f32 when return_lse."""
        q, call = self.q, self.call
        o = _arrays.empty_like_kind(q, self.out_shape(), q.code)
        o4, os4 = _as4(o, "output")
        call.set("o", o, o4, os4)
        lse = None
        if return_lse:
            call.problem.return_lse = 1
            lse = _arrays.empty_like_kind(q, q.shape[:-1], _capi.F32)
            call.set("lse", lse, *self._row_view(lse))
        call.run(self.backend)
        return o.owner, (lse.owner if lse is not None else None)

    def _input_like(self, x, name, shape, code, view):
        """x as an operand of query's kind in dtype `code` (converted when its
        dtype differs) with `shape`, and its view(op, name): (shape, strides)
        for the library. Copied once when its leading dims do not collapse
        into one stride or a dim is broadcast (stride 0, e.g. the dL/dout of
        out.sum())."""
        if _arrays.is_torch(self.q.owner):
            import torch

            x = torch.as_tensor(x, device=self.q.owner.device).detach()
            x = x.to(getattr(torch, _TORCH_DTYPES[code]))
        else:
            if _arrays.is_torch(x):
                x = x.detach().cpu().numpy()
            x = np.asarray(x)
            if x.dtype != _arrays._NP_DTYPES[code]:
                x = x.astype(_arrays._NP_DTYPES[code])
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)}; it must be {tuple(shape)}")
        op = _arrays.as_operand(x, name)
        v = view(op, name)
        if v is None or any(s == 0 and n > 1 for n, s in zip(op.shape, op.strides)):
            x = x.contiguous() if _arrays.is_torch(x) else np.ascontiguousarray(x)
            op = _arrays.as_operand(x, name)
            v = view(op, name)
        return op, v

    def backward(self, out, lse, grad_out, mask_grad, sinks_grad=False):
        """Runs the backward from the forward's out and lse and dL/dout:
        (dq, dk, dv, dbias, dsinks) in q's, k's, v's dtypes and kind, dbias
        f32 [..., Hq, L, S] when mask_grad (else None), dsinks f32 [Hq] when
        sinks_grad (the call has sinks; else None)."""
        q, k, v, call = self.q, self.k, self.v, self.call
        if mask_grad and not self.has_bias:
            raise ValueError("mask_grad needs a float attn_mask (an additive bias)")
        call.problem.return_lse = 1
        o, o_view = self._input_like(out, "out", self.out_shape(), q.code, _as4)
        call.set("o", o, *o_view)
        lse, lse_view = self._input_like(lse, "lse", q.shape[:-1], _capi.F32, self._row_view)
        call.set("lse", lse, *lse_view)
        d_o, _ = self._input_like(grad_out, "grad_out", self.out_shape(), q.code, _as4)
        grads = {"d_o": d_o}
        grads["dq"] = _arrays.empty_like_kind(q, q.shape, q.code)
        grads["dk"] = _arrays.empty_like_kind(k, k.shape, k.code)
        grads["dv"] = _arrays.empty_like_kind(v, v.shape, v.code)
        if mask_grad:
            grads["dbias"] = _arrays.empty_like_kind(q, self.pair_shape, _capi.F32)
        if sinks_grad:
            if not call.problem.sinks:
                raise ValueError("sinks_grad needs sinks")
            grads["dsinks"] = _arrays.empty_like_kind(q, (call.problem.num_heads,), _capi.F32)
        g = _capi.Grads()
        g.struct_size = ctypes.sizeof(g)
        for field, op in grads.items():
            call.keep.append(op)
            view = (op.shape, op.strides) if field == "dsinks" else _as4(op, field)
            setattr(g, field, _arrays.tensor(op, *view))
        call.run(self.backend, grads=g)
        dbias = grads["dbias"].owner if mask_grad else None
        dsinks = grads["dsinks"].owner if sinks_grad else None
        return grads["dq"].owner, grads["dk"].owner, grads["dv"].owner, dbias, dsinks


def _wants_grad(*xs):
    """True when a torch tensor among xs requires grad and autograd records."""
    tensors = [x for x in xs if _arrays.is_torch(x)]
    if not tensors:
        return False
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    backend="auto",
    return_lse=False,
    compute="exact",
):
    """torch.nn.functional.scaled_dot_product_attention's semantics on numpy
    arrays or torch tensors, on any attnkit backend.

    query [..., Hq, L, E], key [..., Hkv, S, E], value [..., Hkv, S, Ev]
    (Hkv = Hq unless enable_gqa; Ev may differ from E, as in PyTorch: MLA's
    576 / 512); attn_mask broadcastable to [..., Hq, L, S]: bool (True =
    take part, PyTorch's convention) or float (added to the scores);
    is_causal is top-left, as PyTorch defines it. Returns [..., Hq, L, Ev]
    in query's dtype and kind; inputs already contiguous in
    f32/f16/bf16 are not copied. return_lse=True returns (out, lse) with lse
    [..., Hq, L] float32, the log-sum-exp of each row's scores (-inf for a
    row with no key), which scaled_dot_product_attention_backward takes.
    last_run() says what ran.

    compute: "exact" (every product of exactly widened storage values) or
    "fast", which lets the backend round the query to the keys' storage
    type before Q.K, and the attention weights to the values' before P.V
    (core/fast_compute.h); it changes nothing when key and value are f32,
    and a backend that does not list the K/V dtype in its capabilities'
    fast_kv_dtypes refuses it (NotImplementedError). With inputs that
    require grad, "fast" also governs the backward pass, which may then round
    the attention weights and the score gradients to bf16 where query, key
    and value are all bf16 (core/fast_compute.h FastRoundsGradOperands);
    "fast" with grad needs query's dtype equal to key's and value's.

    Differentiable: when a torch tensor among query, key, value (or a float
    attn_mask) requires grad and grad mode is on, the output is an autograd
    node whose backward runs attnkit's backward pass (attnkit_backward):
    gradients in the inputs' dtypes, dk and dv summed over each KV head's
    query heads under enable_gqa, a float mask's gradient summed over the
    dims it broadcasts. A backend without a backward pass is refused here;
    a problem its backward cannot take raises NotImplementedError when
    backward runs. create_graph=True (double backward) raises: the
    backward pass has no derivative of its own.
    """
    if _wants_grad(query, key, value, attn_mask):
        from . import _autograd

        return _autograd.sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale,
                              enable_gqa, backend, return_lse, compute)
    sdpa = _Sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, backend,
                 compute)
    o, lse = sdpa.forward(return_lse)
    return (o, lse) if return_lse else o


def scaled_dot_product_attention_backward(
    query,
    key,
    value,
    out,
    lse,
    grad_out,
    attn_mask=None,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    backend="auto",
    mask_grad=False,
    compute="exact",
):
    """The backward pass of scaled_dot_product_attention, for numpy arrays
    (or torch tensors, outside autograd): dL/dquery, dL/dkey, dL/dvalue from
    dL/dout.

    query, key, value, attn_mask, is_causal, scale and enable_gqa are the
    forward's (same shapes and conventions); out [..., Hq, L, Ev] and lse
    [..., Hq, L] are what the forward returned with return_lse=True (lse is
    what lets the backward recompute the attention weights without storing
    them); grad_out is dL/dout, out's shape. out and grad_out are converted
    to query's dtype, lse to float32, when they differ. Returns (dq, dk, dv)
    with the shapes and dtypes of query, key and value (dk, dv summed over
    the query heads of each KV head under enable_gqa); with mask_grad=True
    and a float attn_mask, also dL/dattn_mask, float32 of the mask's own
    shape (summed over the dims it broadcasts). A row that sees no key gets
    zero gradients. backend: a name or "auto" (the first host backend whose
    backward takes the problem); last_run() says which ran and why. Raises
    ValueError for mismatched shapes and NotImplementedError when no backend
    has a backward for the problem. compute="fast" lets the backend round
    the attention weights and the score gradients to bf16 before the
    products that take them, where query, key and value are all bf16
    (core/fast_compute.h FastRoundsGradOperands); it needs query's dtype
    equal to key's and value's.
    """
    sdpa = _Sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, backend,
                 compute)
    dq, dk, dv, dbias, _ = sdpa.backward(out, lse, grad_out, mask_grad)
    if not mask_grad:
        return dq, dk, dv
    return dq, dk, dv, _sum_to_shape(dbias, np.shape(attn_mask))


def _sum_to_shape(x, shape):
    """x summed over the dims that `shape` broadcasts to x.shape (the
    gradient of a broadcast)."""
    shape = tuple(shape)
    if _arrays.is_torch(x):
        return x.sum_to_size(shape) if shape else x.sum()
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead > 0 else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def attention(
    q,
    k,
    v,
    *,
    causal=None,
    alignment="bottom_right",
    window=None,
    kv_lengths=None,
    blocked_mask=None,
    bias=None,
    softcap=0.0,
    scale=None,
    sinks=None,
    alibi_slopes=None,
    layout="BHTD",
    return_lse=False,
    backend="auto",
    compute="exact",
    kv_dtype=None,
    k_scale=None,
    v_scale=None,
):
    """Everything the attnkit config can express.

    q [B, H, Tq, d], k [B, G, Tk, d] and v [B, G, Tk, dv] (layout "BHTD"),
    or [B, T, heads, d] ("BTHD"); H a multiple of G; v's head dim dv may
    differ from d (MLA), o then has dv. causal=True masks keys after the
    diagonal; window=(left, right) keeps keys within left before and right
    after it (-1: unbounded); alignment ("bottom_right" or "top_left") places
    the diagonal when Tq != Tk. kv_lengths: valid keys per batch entry.
    blocked_mask: bool/uint8 broadcastable to [B, H, Tq, Tk], True = blocked
    (attnkit's convention; the SDPA function takes PyTorch's). bias: float,
    same shape, added to the scores. softcap > 0: s = softcap * tanh(s /
    softcap). sinks: one logit per query head [H] (gpt-oss's attention
    sinks) that joins each row's softmax denominator and carries no value:
    o = sum_j e^s_j v_j / (sum_j e^s_j + e^sink); not scaled or masked; a
    row that sees no key gives 0 and an lse of its sink.
    alibi_slopes: one slope per query head [H] (ALiBi, as BLOOM and MPT
    use it; FlashAttention's alibi_slopes): adds -slope * |i + Tk - Tq - j|
    (bottom_right; |i - j| for top_left) to each score, after softcap.
    compute: "exact" or "fast" (q may be rounded to k's storage type and
    the weights to v's; see scaled_dot_product_attention). Returns o (q's
    dtype and kind), and lse [B, H, Tq] (float32) with return_lse.

    Quantized K/V (a serving cache read as stored): k and v hold int8
    values (kv_dtype "i8", or int8 arrays given with scales; without
    either, integer arrays are plain values, converted to float32) or OCP
    fp8 codes (kv_dtype "f8e4m3" or "f8e5m2": uint8 arrays of the codes, or
    torch's float8_e4m3fn / float8_e5m2 and ml_dtypes' float8 arrays, which
    say so themselves), and each key's value is its row times k_scale
    (likewise v_scale): float32 of k's shape without the head dim ([B, G,
    Tk] for "BHTD", [B, Tk, G] for "BTHD"), or anything that broadcasts to
    it (a scalar: one scale per tensor), as vLLM and FlashInfer store them.
    """
    if layout not in ("BHTD", "BTHD"):
        raise ValueError(f"layout must be 'BHTD' or 'BTHD'; got {layout!r}")
    if alignment not in ("bottom_right", "top_left"):
        raise ValueError(f"alignment must be 'bottom_right' or 'top_left'; got {alignment!r}")
    compute = compute_code(compute)
    kv_code = _quantized_code(k, v, kv_dtype, k_scale is not None or v_scale is not None)
    if kv_code is None and (k_scale is not None or v_scale is not None):
        raise ValueError("k_scale and v_scale are for quantized k and v (kv_dtype i8, f8e4m3 or "
                         "f8e5m2); k holds floats")
    if kv_code is None:
        ops = [_arrays.as_operand(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    else:
        if k_scale is None or v_scale is None:
            raise ValueError(
                f"quantized k and v ({_capi.DTYPE_NAMES[kv_code]}) need k_scale and v_scale"
            )
        ops = [_arrays.as_operand(q, "q")] + [
            _arrays.quantized_operand(x, n, kv_code) for x, n in ((k, "k"), (v, "v"))
        ]
    for op, n in zip(ops, "qkv"):
        if op.ndim != 4:
            raise ValueError(f"{n} must be 4-d ({layout}); got shape {op.shape}")
    perm = (0, 1, 2, 3) if layout == "BHTD" else (0, 2, 1, 3)
    (qo, ko, vo) = ops
    q4 = tuple(qo.shape[i] for i in perm)
    k4 = tuple(ko.shape[i] for i in perm)
    if ko.shape[:3] != vo.shape[:3]:
        raise ValueError(
            f"k {ko.shape} and v {vo.shape} must have the same shape but for the head dim"
        )
    if ko.code != vo.code:
        raise ValueError("k and v must share a dtype")
    backend = _place(backend, (qo, ko, vo))
    call = _Call()
    p = call.problem
    p.batch, p.num_heads, p.q_len, p.head_dim = q4
    p.num_kv_heads, p.kv_len = k4[1], k4[2]
    value_dim = vo.shape[3]
    if value_dim != q4[3]:
        p.value_head_dim = value_dim
    p.dtype, p.kv_dtype = qo.code, ko.code
    p.layout = _capi.LAYOUT_BHTD if layout == "BHTD" else _capi.LAYOUT_BTHD
    p.alignment = _capi.ALIGN_BOTTOM_RIGHT if alignment == "bottom_right" else _capi.ALIGN_TOP_LEFT
    p.scale = 1.0 / math.sqrt(q4[3]) if scale is None else float(scale)
    p.softcap = float(softcap)
    p.compute = compute
    if window is not None:
        if causal:
            raise ValueError("pass either causal=True or window=(left, right), not both")
        p.mask = _capi.MASK_SLIDING_WINDOW
        p.window_left, p.window_right = (int(w) for w in window)
    elif causal:
        p.mask = _capi.MASK_CAUSAL
    for name, op in (("q", qo), ("k", ko), ("v", vo)):
        call.set(name, op, tuple(op.shape[i] for i in perm), tuple(op.strides[i] for i in perm))
    if kv_code is not None:  # one f32 scale per (token, KV head), maybe broadcast
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            op = _scale_operand(scale, qo, ko.shape[:3], name)
            call.set(name, op, k4[:3], tuple(op.strides[i] for i in perm[:3]))
    o = _arrays.empty_like_kind(qo, tuple(qo.shape[:3]) + (value_dim,), qo.code)
    call.set("o", o, q4[:3] + (value_dim,), tuple(o.strides[i] for i in perm))
    lse = None
    if return_lse:
        p.return_lse = 1
        lse = _arrays.empty_like_kind(qo, q4[:3], _capi.F32)
        call.set("lse", lse, q4[:3], lse.strides)
    lengths = None
    if kv_lengths is not None:
        if _arrays.is_torch(kv_lengths):
            kv_lengths = kv_lengths.detach().cpu().numpy()
        lengths = np.ascontiguousarray(np.asarray(kv_lengths, dtype=np.int64).reshape(-1))
        p.kv_lengths = lengths.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        p.num_kv_lengths = lengths.size
        call.keep.append(lengths)
        lengths32 = _like(lengths.astype(np.int32), qo, np.int32, "int32")  # where q lives
        op32 = _arrays.as_operand(lengths32, "kv_lengths", float_only=False)
        call.set("kv_lengths", op32, op32.shape, (1,))
    full = (q4[0], q4[1], q4[2], k4[2])
    if blocked_mask is not None:
        m = _like(blocked_mask, qo, np.uint8, "uint8")
        op, m4, ms = _pair_input(m, full, (), _capi.U8, "blocked_mask")
        p.blocked_mask = 1
        call.set("blocked_mask", op, m4, ms)
    if bias is not None:
        op, b4, bs = _pair_input(_like(bias, qo, np.float32, "float32"), full, (), _capi.F32,
                                 "bias")
        p.additive_bias = 1
        call.set("bias", op, b4, bs)
    if sinks is not None:
        _set_per_head(call, "sinks", "sinks", sinks, qo, q4[1], "logit")
    if alibi_slopes is not None:
        _set_per_head(call, "alibi_slopes", "alibi", alibi_slopes, qo, q4[1], "slope")
    call.run(backend)
    return (o.owner, lse.owner) if return_lse else o.owner


_KV_DTYPES = {"i8": _capi.I8, "f8e4m3": _capi.F8E4M3, "f8e5m2": _capi.F8E5M2}


def _quantized_code(k, v, kv_dtype, scaled):
    """The dtype code of quantized k and v, None for values read as floats.
    Quantized: kv_dtype given, or a float8 dtype (which names its format),
    or int8 with scales (`scaled`); integer arrays without either are
    values, converted to float32 as before."""
    own = [_arrays.quantized_code_of(x) for x in (k, v)]
    names_format = own[0] in (_capi.F8E4M3, _capi.F8E5M2)
    if kv_dtype is None and not names_format and not (scaled and own[0] is not None):
        return None
    if own[0] != own[1]:
        raise ValueError("k and v must share a dtype")
    if kv_dtype is None:
        if own[0] == _capi.U8:
            raise ValueError(
                "k and v are uint8: pass kv_dtype='f8e4m3' or 'f8e5m2' to read them as fp8 codes"
            )
        return own[0]
    if kv_dtype not in _KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {sorted(_KV_DTYPES)}; got {kv_dtype!r}")
    code = _KV_DTYPES[kv_dtype]
    agrees = own[0] == code or (own[0] == _capi.U8 and code in (_capi.F8E4M3, _capi.F8E5M2))
    if not agrees:
        have = "floats" if own[0] is None else _capi.DTYPE_NAMES[own[0]]
        raise ValueError(f"kv_dtype={kv_dtype!r} but k and v hold {have}")
    return code


def _scale_operand(scale, q, shape3, name):
    """k_scale or v_scale as float32 where q lives, broadcast to shape3 (k's
    shape without its head dim) as a view: a scalar is one scale per tensor."""
    if _arrays.is_torch(scale):
        scale = scale.detach()
    x = _like(scale, q, np.float32, "float32")
    try:
        x = x.expand(shape3) if _arrays.is_torch(x) else np.broadcast_to(x, shape3)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"{name} must broadcast to k's shape without its head dim {tuple(shape3)}; "
            f"got shape {tuple(x.shape)}"
        ) from None
    return _arrays.as_operand(x, name)


def _set_per_head(call, name, flag, values, q, heads, what):
    """One float32 value per query head (sinks, alibi_slopes), where q
    lives, into call as tensor `name`, with the problem's `flag` set."""
    if _arrays.is_torch(values):
        values = values.detach()
    op = _arrays.as_operand(_like(values, q, np.float32, "float32"), name)
    if tuple(op.shape) != (heads,):
        raise ValueError(
            f"{name} must hold one {what} per query head, shape ({heads},); got {tuple(op.shape)}"
        )
    setattr(call.problem, flag, 1)
    call.set(name, op, op.shape, op.strides)
