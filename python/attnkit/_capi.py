"""ctypes bindings to libattnkit.so (capi/attnkit.h, core/attnkit_plugin.h).

The structs mirror the C headers field for field; at import the library is
asked for each struct's size (attnkit_struct_size), so a header change that
is not mirrored here fails loudly instead of corrupting memory. Calls go
through ctypes.CDLL, which releases the GIL for the duration of each call.
"""

import ctypes
import os
import pathlib
import threading

_HERE = pathlib.Path(__file__).resolve().parent

# Status codes (absl numbering) and enum values of core/attnkit_plugin.h.
OK = 0
INVALID_ARGUMENT = 3
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12

F32, F16, BF16, I32, U8, I8 = 0, 1, 2, 3, 4, 5
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", U8: "u8", I8: "i8"}
MASK_NONE, MASK_CAUSAL, MASK_SLIDING_WINDOW = 0, 1, 2
MASK_NAMES = {MASK_NONE: "none", MASK_CAUSAL: "causal", MASK_SLIDING_WINDOW: "window"}
ALIGN_TOP_LEFT, ALIGN_BOTTOM_RIGHT = 0, 1
LAYOUT_BHTD, LAYOUT_BTHD = 0, 1

_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
_c_uint32 = ctypes.c_uint32
# A `char**` the library fills with a string the caller frees
# (attnkit_string_free); call_string() handles it.
_out_str = ctypes.POINTER(ctypes.c_void_p)


class Problem(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_uint32),
        ("dtype", _c_int32),
        ("kv_dtype", _c_int32),
        ("layout", _c_int32),
        ("mask", _c_int32),
        ("alignment", _c_int32),
        ("batch", _c_int64),
        ("num_heads", _c_int64),
        ("num_kv_heads", _c_int64),
        ("head_dim", _c_int64),
        ("model_dim", _c_int64),
        ("q_len", _c_int64),
        ("kv_len", _c_int64),
        ("window_left", _c_int64),
        ("window_right", _c_int64),
        ("scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("kv_lengths", ctypes.POINTER(_c_int64)),
        ("num_kv_lengths", _c_int64),
        ("blocked_mask", _c_int32),
        ("additive_bias", _c_int32),
        ("return_lse", _c_int32),
        ("poison_blocked", _c_int32),
        ("nonfinite_inputs", _c_int64),
        ("memory_budget_bytes", _c_int64),
        ("seed", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("page_size", _c_int64),
        ("num_pages", _c_int64),
        ("q_lengths", ctypes.POINTER(_c_int64)),
        ("num_q_lengths", _c_int64),
        ("backward", _c_int32),  # since 0.26
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", _c_int32),
        ("rank", _c_int32),
        ("shape", _c_int64 * 4),
        ("strides", _c_int64 * 4),
    ]


class Args(ctypes.Structure):
    _fields_ = [("struct_size", _c_uint32)] + [
        (name, Tensor)
        for name in (
            "q",
            "k",
            "v",
            "o",
            "lse",
            "kv_lengths",
            "blocked_mask",
            "bias",
            "k_scale",
            "v_scale",
            "block_table",
            "cu_seqlens_q",
            "cu_seqlens_k",
        )
    ]


class Caps(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_uint32),
        ("dtypes", _c_uint32),
        ("kv_dtypes", _c_uint32),
        ("masks", _c_uint32),
        ("alignments", _c_uint32),
        ("layouts", _c_uint32),
        ("min_head_dim", _c_int64),
        ("max_head_dim", _c_int64),
        ("head_dims", ctypes.POINTER(_c_int64)),
        ("num_head_dims", _c_int64),
        ("max_group_size", _c_int64),
        ("lse", _c_int32),
        ("kv_lengths", _c_int32),
        ("blocked_mask", _c_int32),
        ("additive_bias", _c_int32),
        ("softcap", _c_int32),
        ("deterministic", _c_int32),
        ("paged_kv", _c_int32),
        ("ragged", _c_int32),
        # Since 0.26: the backward pass.
        ("bwd_supported", _c_int32),
        ("bwd_dtypes", _c_uint32),
        ("bwd_kv_dtypes", _c_uint32),
        ("bwd_masks", _c_uint32),
        ("bwd_kv_lengths", _c_int32),
        ("bwd_blocked_mask", _c_int32),
        ("bwd_additive_bias", _c_int32),
        ("bwd_bias_grad", _c_int32),
        ("bwd_softcap", _c_int32),
        ("bwd_ragged", _c_int32),
        ("bwd_deterministic", _c_int32),
    ]


class BackendInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_uint32),
        ("name", ctypes.c_char * 64),
        ("description", ctypes.c_char * 512),
        ("available", _c_int32),
        ("unavailable_reason", ctypes.c_char * 512),
        ("uses_host_memory", _c_int32),
        ("caps", Caps),
    ]


class RunResult(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_uint32),
        ("backend", ctypes.c_char * 64),
        ("kernel", ctypes.c_char * 256),
        ("reason", ctypes.c_char * 512),
        ("workspace_allocations", _c_int64),
    ]


class Grads(ctypes.Structure):
    """attnkit_grads (since 0.26): dL/dO in, dL/dQ, dK, dV (and dbias) out."""

    _fields_ = [("struct_size", _c_uint32)] + [
        (name, Tensor) for name in ("d_o", "dq", "dk", "dv", "dbias")
    ]


_STRUCTS = {
    b"attnkit_problem": Problem,
    b"attnkit_tensor": Tensor,
    b"attnkit_args": Args,
    b"attnkit_caps": Caps,
    b"attnkit_backend_info": BackendInfo,
    b"attnkit_run_result": RunResult,
    b"attnkit_grads": Grads,
}


def _library_path():
    """$ATTNKIT_LIBRARY, else the copy shipped inside the package."""
    env = os.environ.get("ATTNKIT_LIBRARY")
    if env:
        return env
    return str(_HERE / "_lib" / "libattnkit.so")


def _preload_bundled():
    """Loads the libraries a --bundle wheel carries (_lib/deps, or
    $ATTNKIT_DEPS_DIR, in the order its ORDER file lists: dependencies first),
    so that libattnkit.so finds them by soname without the Debian packages.
    One the process already has (libstdc++ loaded by torch, say) is not
    loaded twice."""
    folder = pathlib.Path(os.environ.get("ATTNKIT_DEPS_DIR") or _HERE / "_lib" / "deps")
    order = folder / "ORDER"
    if not order.is_file():
        return
    for name in order.read_text().split():
        try:
            ctypes.CDLL(name, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
            continue  # already in the process
        except OSError:
            pass
        try:
            ctypes.CDLL(str(folder / name), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise ImportError(f"attnkit: cannot load the bundled {name}: {e}") from e


def _load():
    path = _library_path()
    _preload_bundled()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"attnkit: cannot load {path}: {e}") from e
    err = ctypes.c_char_p
    sig = {
        "attnkit_version": (ctypes.c_char_p, []),
        "attnkit_struct_size": (ctypes.c_size_t, [ctypes.c_char_p]),
        "attnkit_context_create": (
            _c_int32,
            [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), err, ctypes.c_size_t],
        ),
        "attnkit_context_destroy": (None, [ctypes.c_void_p]),
        "attnkit_num_plugin_failures": (_c_int32, [ctypes.c_void_p]),
        "attnkit_plugin_failure": (
            _c_int32,
            [ctypes.c_void_p, _c_int32, err, ctypes.c_size_t],
        ),
        "attnkit_num_backends": (_c_int32, [ctypes.c_void_p]),
        "attnkit_backend_info_get": (
            _c_int32,
            [ctypes.c_void_p, _c_int32, ctypes.POINTER(BackendInfo), err, ctypes.c_size_t],
        ),
        "attnkit_problem_init": (None, [ctypes.POINTER(Problem)]),
        "attnkit_problem_validate": (
            _c_int32,
            [ctypes.POINTER(Problem), err, ctypes.c_size_t],
        ),
        "attnkit_run": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.POINTER(Problem),
                ctypes.POINTER(Args),
                ctypes.POINTER(RunResult),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_backward": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.POINTER(Problem),
                ctypes.POINTER(Args),
                ctypes.POINTER(Grads),
                ctypes.POINTER(RunResult),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_set_num_threads": (
            _c_int32,
            [ctypes.c_void_p, ctypes.c_char_p, _c_int32, err, ctypes.c_size_t],
        ),
        "attnkit_set_stream": (
            _c_int32,
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, err, ctypes.c_size_t],
        ),
        "attnkit_string_free": (None, [ctypes.c_void_p]),
        "attnkit_config_from_text": (_c_int32, [ctypes.c_char_p, _out_str, err, ctypes.c_size_t]),
        "attnkit_config_to_text": (_c_int32, [ctypes.c_char_p, _out_str, err, ctypes.c_size_t]),
        "attnkit_config_validate": (_c_int32, [ctypes.c_char_p, _out_str, err, ctypes.c_size_t]),
        "attnkit_config_cost": (_c_int32, [ctypes.c_char_p, _out_str, err, ctypes.c_size_t]),
        "attnkit_suite": (_c_int32, [ctypes.c_char_p, _out_str, err, ctypes.c_size_t]),
        "attnkit_machine_limits": (
            _c_int32,
            [_c_int32, _c_int32, _out_str, err, ctypes.c_size_t],
        ),
        "attnkit_check": (
            _c_int32,
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, _out_str, err, ctypes.c_size_t],
        ),
        "attnkit_compare": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_char_p,
                ctypes.c_char_p,
                _c_int32,
                _c_int32,
                _out_str,
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_layer_create": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.c_char_p,
                _c_int32,
                ctypes.c_uint64,
                ctypes.POINTER(ctypes.c_void_p),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_layer_destroy": (None, [ctypes.c_void_p]),
        "attnkit_layer_set_weight": (
            _c_int32,
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Tensor), err, ctypes.c_size_t],
        ),
        "attnkit_layer_get_weight": (
            _c_int32,
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Tensor), err, ctypes.c_size_t],
        ),
        "attnkit_layer_forward": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.POINTER(Tensor),
                ctypes.POINTER(Tensor),
                ctypes.POINTER(Tensor),
                ctypes.POINTER(RunResult),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_layer_forward_cached": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.POINTER(Tensor),
                ctypes.c_void_p,
                ctypes.POINTER(Tensor),
                ctypes.POINTER(RunResult),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_kv_cache_create": (
            _c_int32,
            [
                ctypes.c_void_p,
                _c_int64,
                _c_int64,
                _c_int32,
                ctypes.POINTER(ctypes.c_void_p),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_kv_cache_create_paged": (
            _c_int32,
            [
                ctypes.c_void_p,
                _c_int64,
                _c_int64,
                _c_int64,
                _c_int32,
                ctypes.POINTER(ctypes.c_void_p),
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_kv_cache_fork": (
            _c_int32,
            [ctypes.c_void_p, _c_int64, _c_int64, _c_int64, err, ctypes.c_size_t],
        ),
        "attnkit_kv_cache_destroy": (None, [ctypes.c_void_p]),
        "attnkit_kv_cache_info": (
            _c_int32,
            [
                ctypes.c_void_p,
                ctypes.POINTER(_c_int64),
                ctypes.POINTER(_c_int64),
                ctypes.POINTER(_c_int64),
                ctypes.POINTER(_c_int64),
                _c_int64,
                err,
                ctypes.c_size_t,
            ],
        ),
        "attnkit_kv_cache_set_lengths": (
            _c_int32,
            [ctypes.c_void_p, ctypes.POINTER(_c_int64), _c_int64, err, ctypes.c_size_t],
        ),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for cname, struct in _STRUCTS.items():
        expected = lib.attnkit_struct_size(cname)
        if expected != ctypes.sizeof(struct):
            raise ImportError(
                f"attnkit: {cname.decode()} is {expected} bytes in {path} but "
                f"{ctypes.sizeof(struct)} in attnkit/_capi.py; the package and the "
                "library come from different versions"
            )
    return lib


lib = _load()


def _error(code, message):
    """The Python exception for a C API status code."""
    if code in (INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND):
        return ValueError(message)
    if code in (UNIMPLEMENTED, FAILED_PRECONDITION):
        return NotImplementedError(message)
    if code == RESOURCE_EXHAUSTED:
        return MemoryError(message)
    return RuntimeError(f"attnkit error {code}: {message}")


def call(fn, *args):
    """Calls a C API function whose last two parameters are (err, err_size);
    raises the matching exception when it fails."""
    buf = ctypes.create_string_buffer(2048)
    code = fn(*args, buf, len(buf))
    if code != OK:
        raise _error(code, buf.value.decode("utf-8", "replace"))


def call_string(fn, *args):
    """Like call(), for a function whose last parameter before (err,
    err_size) is a `char**` out-string: returns it as str, freed."""
    out = ctypes.c_void_p()
    try:
        call(fn, *args, ctypes.byref(out))
        return ctypes.string_at(out.value).decode("utf-8") if out.value else None
    finally:
        lib.attnkit_string_free(out)


def _plugin_paths():
    """The plugins shipped in the package (_lib/plugins/*.so), ':'-joined."""
    folder = _HERE / "_lib" / "plugins"
    if not folder.is_dir():
        return b""
    return ":".join(str(p) for p in sorted(folder.glob("*.so"))).encode()


_context = None
_context_lock = threading.Lock()


def context():
    """The process-wide context, created on first use (thread-safe)."""
    global _context
    ctx = _context
    if ctx is not None:  # the common case: no lock
        return ctx
    with _context_lock:
        if _context is None:
            ctx = ctypes.c_void_p()
            call(lib.attnkit_context_create, _plugin_paths(), ctypes.byref(ctx))
            _context = ctx
        return _context
