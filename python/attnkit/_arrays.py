"""NumPy arrays and torch tensors as attnkit tensor views, without copies.

An input already in a supported dtype (f32, f16, bf16) whose strides are
whole elements is passed by address; anything else is converted once
(documented per call). Outputs are allocated here, in the kind of the query
(numpy or torch) and on its device.
"""

import ctypes

import numpy as np

from . import _capi

try:  # bfloat16 for numpy, when installed
    import ml_dtypes  # type: ignore

    _NP_BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _NP_BF16 = None


def is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _np_code(dtype):
    if dtype == np.float32:
        return _capi.F32
    if dtype == np.float16:
        return _capi.F16
    if _NP_BF16 is not None and dtype == _NP_BF16:
        return _capi.BF16
    return None


def _torch_code(dtype):
    import torch  # only reached with torch tensors

    return {torch.float32: _capi.F32, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}.get(
        dtype
    )


class Operand:
    """One input or output: the object that owns the memory (kept alive for
    the call), its dtype code, shape, element strides and address."""

    def __init__(self, owner, code, shape, strides, address, device="cpu"):
        self.owner = owner
        self.code = code
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.address = address
        self.device = device

    @property
    def ndim(self):
        return len(self.shape)


def as_operand(x, name, float_only=True):
    """x (numpy array, torch tensor or array-like) as an Operand, converting
    only when its dtype is unsupported or its strides are not whole
    elements."""
    if is_torch(x):
        code = _torch_code(x.dtype)
        if code is None and float_only:
            x = x.float()
            code = _capi.F32
        return Operand(
            x, code, x.shape, x.stride(), x.data_ptr(), "cuda" if x.is_cuda else "cpu"
        )
    a = np.asarray(x)
    code = _np_code(a.dtype)
    if code is None and float_only:
        if a.dtype.kind not in "fiub":
            raise ValueError(f"{name}: dtype {a.dtype} is not numeric")
        a = a.astype(np.float32)
        code = _capi.F32
    if any(s % a.itemsize != 0 for s in a.strides):
        a = np.ascontiguousarray(a)
    strides = tuple(s // a.itemsize for s in a.strides)
    return Operand(a, code, a.shape, strides, a.ctypes.data if a.size else 0)


def empty_like_kind(ref, shape, code):
    """A new output of `shape` with dtype `code`, of the same kind and device
    as operand `ref`."""
    if is_torch(ref.owner):
        import torch

        dtype = {_capi.F32: torch.float32, _capi.F16: torch.float16, _capi.BF16: torch.bfloat16}[
            code
        ]
        t = torch.empty(shape, dtype=dtype, device=ref.owner.device)
        return Operand(t, code, t.shape, t.stride(), t.data_ptr(), ref.device)
    dtype = {_capi.F32: np.float32, _capi.F16: np.float16, _capi.BF16: _NP_BF16}[code]
    a = np.empty(shape, dtype=dtype)
    return Operand(
        a, code, a.shape, tuple(s // a.itemsize for s in a.strides), a.ctypes.data if a.size else 0
    )


def tensor(op, shape4, strides4, code=None):
    """A _capi.Tensor over operand `op` seen as `shape4` with `strides4`."""
    t = _capi.Tensor()
    t.data = op.address
    t.dtype = op.code if code is None else code
    t.rank = len(shape4)
    for i, (n, s) in enumerate(zip(shape4, strides4)):
        t.shape[i] = n
        t.strides[i] = s
    return t


def collapse_leading(shape, strides, keep):
    """Collapses all but the last `keep` dims of (shape, strides) into one
    batch dim, returning (batch, batch_stride), or None when those dims
    cannot be expressed by one stride (then the caller copies)."""
    lead_shape = shape[: len(shape) - keep]
    lead_strides = strides[: len(strides) - keep]
    batch = 1
    for n in lead_shape:
        batch *= n
    if batch <= 1:
        return batch, 0
    # Dims of size 1 do not matter; the rest must nest.
    dims = [(n, s) for n, s in zip(lead_shape, lead_strides) if n != 1]
    for (n_outer, s_outer), (n_inner, s_inner) in zip(dims, dims[1:]):
        if s_outer != s_inner * n_inner:
            return None
    return batch, dims[-1][1]


def address_of(op):
    return ctypes.c_void_p(op.address)
