"""The ops layer from Python: MultiHeadAttention (projections, attention on
any backend, output projection; GQA/MQA; cross-attention) and its KVCache
for prefill and decode, over the C API's attnkit_layer_* calls."""

import ctypes

import numpy as np

from . import _arrays
from . import _capi
from . import _ops
from ._config import AttentionConfig

_WEIGHTS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")
# PyTorch / Hugging Face names (q_proj.weight, ...) and nn.MultiheadAttention's out_proj.
_TORCH_NAMES = {
    "q_proj.weight": "wq",
    "k_proj.weight": "wk",
    "v_proj.weight": "wv",
    "o_proj.weight": "wo",
    "out_proj.weight": "wo",
    "q_proj.bias": "bq",
    "k_proj.bias": "bk",
    "v_proj.bias": "bv",
    "o_proj.bias": "bo",
    "out_proj.bias": "bo",
}
_CACHE_DTYPES = {"f32": _capi.F32, "f16": _capi.F16, "bf16": _capi.BF16, "i8": _capi.I8,
                 "f8e4m3": _capi.F8E4M3, "f8e5m2": _capi.F8E5M2}


def _activation(x, name, model_dim):
    """x as an f32 [B, T, D] operand (a [T, D] input gains B = 1)."""
    op = _arrays.as_operand(x, name)
    if op.device != "cpu":
        raise ValueError(f"{name}: the layer takes host (CPU) tensors; got a {op.device} tensor")
    if op.code != _capi.F32:
        raise ValueError(f"{name}: the layer's activations are float32; got {x.dtype}")
    if op.ndim == 2:
        op = _arrays.Operand(op.owner, op.code, (1,) + op.shape, (0,) + op.strides, op.address)
    if op.ndim != 3 or op.shape[2] != model_dim:
        raise ValueError(
            f"{name} must be [B, T, {model_dim}] (or [T, {model_dim}]); got {op.shape}"
        )
    return op


def _tensor(op):
    return _arrays.tensor(op, op.shape, op.strides)


def _run_dict(result):
    return {
        "backend": result.backend.decode(),
        "kernel": result.kernel.decode(),
        "reason": result.reason.decode(),
    }


class KVCache:
    """Keys and values of `batch` sequences of up to `capacity` tokens for
    one layer (its KV heads and head_dim), stored as dtype "f32", "f16",
    "bf16", "i8", "f8e4m3" or "f8e5m2" (the last three quantized as
    appended, one scale per token and KV head, as vLLM stores fp8 caches).
    With page_size (a power of two in 16..256) the cache is paged: one pool
    of num_pages pages (default: enough for every sequence to reach
    capacity) that the sequences take as they grow and can share (fork).
    Made by MultiHeadAttention.new_cache()."""

    def __init__(self, layer, batch, capacity, dtype="f32", page_size=None, num_pages=None):
        if dtype not in _CACHE_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_CACHE_DTYPES)}; got {dtype!r}")
        if num_pages is not None and page_size is None:
            raise ValueError("num_pages sizes a paged cache: give page_size too")
        self._handle = None
        handle = ctypes.c_void_p()
        if page_size is None:
            _capi.call(
                _capi.lib.attnkit_kv_cache_create,
                layer._handle,
                int(batch),
                int(capacity),
                _CACHE_DTYPES[dtype],
                ctypes.byref(handle),
            )
        else:
            if num_pages is None:
                num_pages = int(batch) * -(-int(capacity) // max(1, int(page_size)))
            _capi.call(
                _capi.lib.attnkit_kv_cache_create_paged,
                layer._handle,
                int(batch),
                int(page_size),
                int(num_pages),
                _CACHE_DTYPES[dtype],
                ctypes.byref(handle),
            )
        self._handle = handle
        self.dtype = dtype
        self.page_size = page_size

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.attnkit_kv_cache_destroy(self._handle)
            self._handle = None

    def _info(self):
        batch, capacity, nbytes = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        _capi.call(
            _capi.lib.attnkit_kv_cache_info,
            self._handle,
            ctypes.byref(batch),
            ctypes.byref(capacity),
            ctypes.byref(nbytes),
            None,
            0,
        )
        return batch.value, capacity.value, nbytes.value

    @property
    def batch(self):
        return self._info()[0]

    @property
    def capacity(self):
        """Tokens a sequence can hold (paged: num_pages * page_size)."""
        return self._info()[1]

    @property
    def nbytes(self):
        """Bytes of K and V (and their i8/fp8 scales): B * Hkv * capacity *
        (d + dv) * element size for a dense cache (dv: the value head dim),
        the whole pool for a paged one."""
        return self._info()[2]

    @property
    def lengths(self):
        """Tokens cached per sequence."""
        n = self.batch
        out = (ctypes.c_int64 * n)()
        _capi.call(_capi.lib.attnkit_kv_cache_info, self._handle, None, None, None, out, n)
        return list(out)

    def set_lengths(self, lengths):
        """Sets each sequence's length, keeping the contents (roll back
        rejected speculative tokens; 0 starts over). A paged cache only
        shrinks, releasing the pages past the new lengths."""
        values = (ctypes.c_int64 * len(lengths))(*[int(x) for x in lengths])
        _capi.call(_capi.lib.attnkit_kv_cache_set_lengths, self._handle, values, len(lengths))

    def fork(self, src, dst, tokens):
        """Sequence dst continues from the first `tokens` tokens of src (a
        shared prompt); dst's own tokens are dropped. Paged: the pages are
        shared, copied only when written (a partially filled one)."""
        _capi.call(_capi.lib.attnkit_kv_cache_fork, self._handle, int(src), int(dst), int(tokens))

    def clear(self):
        self.set_lengths([0] * self.batch)

    def __repr__(self):
        return (
            f"KVCache(batch={self.batch}, capacity={self.capacity}, dtype={self.dtype!r}, "
            f"page_size={self.page_size}, lengths={self.lengths})"
        )


class MultiHeadAttention:
    """y = attention(x Wq^T + bq, c Wk^T + bk, c Wv^T + bv) Wo^T + bo, with c = x
    or a context (cross-attention), on any attnkit backend.

    model_dim D, num_heads H, num_kv_heads G (default H; 1 = MQA), head_dim d
    (default D / H), value_head_dim dv (default d; V's and the output's own
    head dim, as MLA's). Weights in PyTorch's nn.Linear orientation [out,
    in]: wq [H*d, D], wk [G*d, D], wv [G*dv, D], wo [D, H*dv]; initialised
    from `seed` like
    nn.Linear, or loaded with load_state_dict(). causal=True or window=(left,
    right) masks the scores (bottom-right aligned with a cache). `config` (an
    AttentionConfig) gives every option at once instead. compute="fast" lets
    the attention round the queries to the cache's storage type (and the
    weights to the values'); it matters for an f16, bf16 or i8 cache, and a
    backend that cannot (capabilities' fast_kv_dtypes) refuses those calls.
    None: the config's compute, else "exact". One call at a time per layer
    (its workspaces are reused): use a layer per thread.
    """

    def __init__(
        self,
        model_dim=None,
        num_heads=None,
        num_kv_heads=None,
        head_dim=None,
        *,
        value_head_dim=None,
        bias=False,
        causal=False,
        window=None,
        backend="auto",
        seed=0,
        config=None,
        compute=None,
    ):
        self._handle = None
        if compute is not None:
            _ops.compute_code(compute)  # ValueError for anything but exact or fast
        if config is None:
            if model_dim is None or num_heads is None:
                raise ValueError("give model_dim and num_heads, or config=AttentionConfig(...)")
            if head_dim is None:
                if model_dim % num_heads:
                    raise ValueError(
                        f"model_dim ({model_dim}) is not a multiple of num_heads ({num_heads}); "
                        "give head_dim"
                    )
                head_dim = model_dim // num_heads
            mask = "NONE"
            left = right = 0
            if window is not None:
                if causal:
                    raise ValueError("pass either causal=True or window=(left, right), not both")
                mask, (left, right) = "SLIDING_WINDOW", (int(w) for w in window)
            elif causal:
                mask = "CAUSAL"
            config = AttentionConfig(
                num_heads=int(num_heads),
                num_kv_heads=int(num_kv_heads or num_heads),
                head_dim=int(head_dim),
                value_head_dim=int(value_head_dim or 0),
                model_dim=int(model_dim),
                mask={"kind": mask, "window_left": left, "window_right": right},
                backend=backend,
            )
        if compute is not None:
            config = config.replace(compute=compute.upper())
        self.config = config
        self.model_dim = config.model_dim or config.num_heads * config.head_dim
        self.bias = bool(bias)
        handle = ctypes.c_void_p()
        _capi.call(
            _capi.lib.attnkit_layer_create,
            _capi.context(),
            config.to_json().encode(),
            1 if bias else 0,
            int(seed),
            ctypes.byref(handle),
        )
        self._handle = handle
        self._last = None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.attnkit_layer_destroy(self._handle)
            self._handle = None

    # ---- weights ---------------------------------------------------------

    def set_weight(self, name, value):
        """One weight ("wq", ..., "bo", or a PyTorch name like
        "q_proj.weight"), f32 or f16, numpy or torch, of its [out, in] shape."""
        key = _TORCH_NAMES.get(name, name)
        if key not in _WEIGHTS:
            raise ValueError(f"no weight {name!r}; the layer has {', '.join(_WEIGHTS)}")
        if _arrays.is_torch(value):
            value = value.detach().cpu()
        op = _arrays.as_operand(value, key)
        _capi.call(_capi.lib.attnkit_layer_set_weight, self._handle, key.encode(),
                   ctypes.byref(_tensor(op)))

    def load_state_dict(self, state):
        """Every weight in `state` (attnkit or PyTorch names; a prefix before
        "q_proj." etc. is ignored)."""
        for name, value in state.items():
            short = next((t for t in _TORCH_NAMES if name.endswith(t)), name)
            self.set_weight(short, value)

    def weight(self, name):
        """A copy of one weight as a float32 numpy array."""
        key = _TORCH_NAMES.get(name, name)
        c = self.config
        dv = c.value_head_dim or c.head_dim  # V's and O's head dim
        hd = c.num_heads * c.head_dim
        gd = (c.num_kv_heads or c.num_heads) * c.head_dim
        hdv = c.num_heads * dv
        gdv = (c.num_kv_heads or c.num_heads) * dv
        dm = self.model_dim
        shapes = {"wq": (hd, dm), "wk": (gd, dm), "wv": (gdv, dm), "wo": (dm, hdv),
                  "bq": (hd,), "bk": (gd,), "bv": (gdv,), "bo": (dm,)}
        if key not in shapes:
            raise ValueError(f"no weight {name!r}; the layer has {', '.join(_WEIGHTS)}")
        out = np.empty(shapes[key], dtype=np.float32)
        op = _arrays.as_operand(out, key)
        _capi.call(_capi.lib.attnkit_layer_get_weight, self._handle, key.encode(),
                   ctypes.byref(_tensor(op)))
        return out

    def state_dict(self):
        names = _WEIGHTS if self.bias else _WEIGHTS[:4]
        return {n: self.weight(n) for n in names}

    # ---- calls -----------------------------------------------------------

    def new_cache(self, batch, capacity, dtype="f32", page_size=None, num_pages=None):
        return KVCache(self, batch, capacity, dtype, page_size, num_pages)

    def __call__(self, x, context=None, cache=None):
        """Self-attention over x [B, T, D] (float32, numpy or torch CPU), or
        cross-attention to context [B, Tk, D], or with `cache`: append x's
        keys and values, then attend to every cached token (T = 1 decodes).
        Returns y, the same kind and shape as x."""
        if context is not None and cache is not None:
            raise ValueError("pass either context (cross-attention) or cache, not both")
        xo = _activation(x, "x", self.model_dim)
        y = _arrays.empty_like_kind(xo, tuple(np.shape(x)), _capi.F32)
        yo = _activation(y.owner, "y", self.model_dim)
        result = _capi.RunResult()
        result.struct_size = ctypes.sizeof(result)
        if cache is not None:
            _capi.call(_capi.lib.attnkit_layer_forward_cached, self._handle,
                       ctypes.byref(_tensor(xo)), cache._handle, ctypes.byref(_tensor(yo)),
                       ctypes.byref(result))
        else:
            ctx = None
            if context is not None:
                ctx = ctypes.byref(_tensor(_activation(context, "context", self.model_dim)))
            _capi.call(_capi.lib.attnkit_layer_forward, self._handle,
                       ctypes.byref(_tensor(xo)), ctx, ctypes.byref(_tensor(yo)),
                       ctypes.byref(result))
        self._last = _run_dict(result)
        return y.owner

    forward = __call__

    def last_run(self):
        """What the last call ran: backend, kernel, and why that backend."""
        return self._last

    def __repr__(self):
        c = self.config
        return (f"MultiHeadAttention(model_dim={self.model_dim}, num_heads={c.num_heads}, "
                f"num_kv_heads={c.num_kv_heads or c.num_heads}, head_dim={c.head_dim}, "
                f"mask={c.mask.kind}, backend={c.backend or 'auto'!r}, "
                f"compute={'fast' if c.compute == 'FAST' else 'exact'!r})")
