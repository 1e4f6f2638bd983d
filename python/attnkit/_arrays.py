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


# numpy dtype number -> attnkit dtype code (a dict lookup: this runs on
# every call, for every operand).
_NP_CODES = {np.dtype(np.float32).num: _capi.F32, np.dtype(np.float16).num: _capi.F16}
_NP_DTYPES = {_capi.F32: np.dtype(np.float32), _capi.F16: np.dtype(np.float16)}
if _NP_BF16 is not None:
    _NP_CODES[_NP_BF16.num] = _capi.BF16
    _NP_DTYPES[_capi.BF16] = _NP_BF16


# The integer inputs (kv_lengths, blocked masks), accepted with float_only=False.
_NP_INT_CODES = {np.dtype(np.int32).num: _capi.I32, np.dtype(np.uint8).num: _capi.U8}


def _np_code(dtype):
    return _NP_CODES.get(dtype.num)


def _torch_code(dtype):
    import torch  # only reached with torch tensors

    return {
        torch.float32: _capi.F32,
        torch.float16: _capi.F16,
        torch.bfloat16: _capi.BF16,
        torch.int32: _capi.I32,
        torch.uint8: _capi.U8,
    }.get(dtype)


class Operand:
    """One input or output: the object that owns the memory (kept alive for
    the call), its dtype code, shape, element strides and address."""

    __slots__ = ("owner", "code", "shape", "strides", "address", "device")

    def __init__(self, owner, code, shape, strides, address, device="cpu"):
        self.owner = owner
        self.code = code
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.address = address
        self.device = device

    @property
    def ndim(self):
        return len(self.shape)


def _numpy_operand(a, code):
    itemsize = a.itemsize
    return Operand(
        a,
        code,
        a.shape,
        tuple(map(itemsize.__rfloordiv__, a.strides)),
        a.ctypes.data if a.size else 0,
    )


def as_operand(x, name, float_only=True):
    """x (numpy array, torch tensor or array-like) as an Operand, converting
    only when its dtype is unsupported or its strides are not whole
    elements."""
    if is_torch(x):
        code = _torch_code(x.dtype)
        if float_only and code not in (_capi.F32, _capi.F16, _capi.BF16):
            x = x.float()
            code = _capi.F32
        return Operand(
            x, code, x.shape, x.stride(), x.data_ptr(), "cuda" if x.is_cuda else "cpu"
        )
    a = x if type(x) is np.ndarray else np.asarray(x)
    code = _NP_CODES.get(a.dtype.num)
    if code is None and not float_only:
        code = _NP_INT_CODES.get(a.dtype.num)
    if code is None and float_only:
        if a.dtype.kind not in "fiub":
            raise ValueError(f"{name}: dtype {a.dtype} is not numeric")
        a = a.astype(np.float32)
        code = _capi.F32
    itemsize = a.itemsize
    if any(s % itemsize for s in a.strides):
        a = np.ascontiguousarray(a)
    return _numpy_operand(a, code)


def quantized_code_of(x):
    """The dtype code x's own dtype gives quantized K/V: I8 for int8, the
    fp8 codes for float8 dtypes (torch's, ml_dtypes'), U8 for uint8 (codes
    of a format the caller names), None for anything else."""
    if is_torch(x):
        import torch

        codes = {torch.int8: _capi.I8, torch.uint8: _capi.U8}
        for name, code in (("float8_e4m3fn", _capi.F8E4M3), ("float8_e5m2", _capi.F8E5M2)):
            if hasattr(torch, name):
                codes[getattr(torch, name)] = code
        return codes.get(x.dtype)
    dtype = x.dtype if type(x) is np.ndarray else np.asarray(x).dtype
    if dtype == np.int8:
        return _capi.I8
    if dtype == np.uint8:
        return _capi.U8
    return {"float8_e4m3fn": _capi.F8E4M3, "float8_e5m2": _capi.F8E5M2}.get(dtype.name)


def quantized_operand(x, name, code):
    """Quantized K or V storage (int8 values or fp8 codes, one byte each) as
    an Operand of dtype `code`, by address: bytes have whole-element strides."""
    if is_torch(x):
        return Operand(x, code, x.shape, x.stride(), x.data_ptr(), "cuda" if x.is_cuda else "cpu")
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.itemsize != 1:
        raise ValueError(f"{name}: quantized storage has one byte per element; got {a.dtype}")
    return _numpy_operand(a, code)


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
    return _numpy_operand(np.empty(shape, dtype=_NP_DTYPES[code]), code)


_Dims = ctypes.c_int64 * 4


def tensor(op, shape4, strides4, code=None):
    """A _capi.Tensor over operand `op` seen as `shape4` with `strides4`."""
    return _capi.Tensor(
        op.address,
        op.code if code is None else code,
        len(shape4),
        _Dims(*shape4),
        _Dims(*strides4),
    )


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
