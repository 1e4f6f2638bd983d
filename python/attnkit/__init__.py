"""attnkit from Python: PyTorch-compatible scaled dot-product attention on
numpy arrays and torch tensors, on any attnkit backend (highway, blas,
reference, cuda, plugins), over the C API in libattnkit.so.

    import numpy as np, attnkit
    q = np.random.rand(2, 8, 128, 64).astype(np.float32)
    k = v = np.random.rand(2, 2, 128, 64).astype(np.float32)
    o = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    attnkit.last_run()   # {'backend': 'highway', 'kernel': ..., 'reason': ...}

With torch tensors that require grad, the output is differentiable (the
backward runs attnkit's backward pass); for numpy,
scaled_dot_product_attention(..., return_lse=True) and
scaled_dot_product_attention_backward give the gradients.
"""

from ._capi import lib as _lib
from ._config import AttentionConfig
from ._config import MaskSpec
from ._config import suite
from ._jobs import CheckReport
from ._jobs import CompareReport
from ._jobs import check
from ._jobs import compare
from ._jobs import machine_limits
from ._layer import KVCache
from ._layer import MultiHeadAttention
from ._ops import attention
from ._ops import backends
from ._ops import last_run
from ._ops import scaled_dot_product_attention
from ._ops import scaled_dot_product_attention_backward
from ._ops import set_num_threads

__version__ = "0.29.0"  # the VERSION file; checked against the library at import


def library_version():
    """The loaded libattnkit.so's version text."""
    return _lib.attnkit_version().decode()


__all__ = [
    "AttentionConfig",
    "CheckReport",
    "CompareReport",
    "KVCache",
    "MaskSpec",
    "MultiHeadAttention",
    "attention",
    "backends",
    "check",
    "compare",
    "last_run",
    "library_version",
    "machine_limits",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "set_num_threads",
    "suite",
]
