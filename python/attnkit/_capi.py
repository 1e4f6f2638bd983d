"""ctypes bindings to libattnkit.so (include/attnkit/attnkit.h and plugin.h).

The structs are not written here: at import the library describes each one
(attnkit_struct_layout) and the ctypes structures are built from that, each
field's offset checked, so a field added to a header reaches Python with no
change to this file. Calls go through ctypes.CDLL, which releases the GIL
for the duration of each call.
"""

import ctypes
import os
import pathlib
import threading

_HERE = pathlib.Path(__file__).resolve().parent

# Status codes (absl numbering) and enum values of include/attnkit/plugin.h.
OK = 0
INVALID_ARGUMENT = 3
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12

F32, F16, BF16, I32, U8, I8, F8E4M3, F8E5M2 = 0, 1, 2, 3, 4, 5, 6, 7
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", U8: "u8", I8: "i8",
               F8E4M3: "f8e4m3", F8E5M2: "f8e5m2"}
MASK_NONE, MASK_CAUSAL, MASK_SLIDING_WINDOW = 0, 1, 2
MASK_NAMES = {MASK_NONE: "none", MASK_CAUSAL: "causal", MASK_SLIDING_WINDOW: "window"}
ALIGN_TOP_LEFT, ALIGN_BOTTOM_RIGHT = 0, 1
LAYOUT_BHTD, LAYOUT_BTHD = 0, 1
COMPUTE_EXACT, COMPUTE_FAST = 0, 1

_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
# A `char**` the library fills with a string the caller frees
# (attnkit_string_free); call_string() handles it.
_out_str = ctypes.POINTER(ctypes.c_void_p)


# The C structs, built at import from the layouts the library exports
# (attnkit_struct_layout: name, offset, size and type of every field, from
# the field tables that declare the structs in attnkit/plugin.h and
# attnkit/attnkit.h), so nothing here restates a header. Each is a
# ctypes.Structure with the C field names; _load() fills these in.
Problem = Tensor = Args = Caps = BackendInfo = RunResult = Grads = None

_STRUCT_NAMES = {
    "attnkit_tensor": "Tensor",  # first: the others hold tensors
    "attnkit_problem": "Problem",
    "attnkit_args": "Args",
    "attnkit_caps": "Caps",  # before attnkit_backend_info, which holds one
    "attnkit_backend_info": "BackendInfo",
    "attnkit_run_result": "RunResult",
    "attnkit_grads": "Grads",
}

_SCALAR_TYPES = {
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "ptr": ctypes.c_void_p,
    "ptr_i64": ctypes.POINTER(ctypes.c_int64),
    "cstr": ctypes.c_char_p,
}


def _ctype(type_name, built):
    """The ctypes type of a layout's field type: a scalar, char[N], i64[N]
    or a struct built before."""
    if type_name in _SCALAR_TYPES:
        return _SCALAR_TYPES[type_name]
    if type_name in built:
        return built[type_name]
    for prefix, element in (("char[", ctypes.c_char), ("i64[", ctypes.c_int64)):
        if type_name.startswith(prefix) and type_name.endswith("]"):
            return element * int(type_name[len(prefix) : -1])
    raise ImportError(f"attnkit: the library describes a field of unknown type {type_name!r}")


def _build_structs(lib, path):
    """Builds each struct from the library's layout and checks that ctypes
    placed every field where the C compiler did."""
    import json

    built = {}
    for cname, pyname in _STRUCT_NAMES.items():
        text = lib.attnkit_struct_layout(cname.encode())
        if text is None:
            raise ImportError(f"attnkit: {path} does not describe {cname}")
        layout = json.loads(text.decode())
        fields = [(f["name"], _ctype(f["type"], built)) for f in layout["fields"]]
        struct = type(pyname, (ctypes.Structure,), {"_fields_": fields, "__doc__": cname})
        for f in layout["fields"]:
            got = getattr(struct, f["name"])
            if (got.offset, got.size) != (f["offset"], f["size"]):
                raise ImportError(
                    f"attnkit: {cname}.{f['name']} is at {f['offset']} ({f['size']} bytes) in "
                    f"{path} but ctypes put it at {got.offset} ({got.size} bytes)"
                )
        if ctypes.sizeof(struct) != layout["size"]:
            raise ImportError(
                f"attnkit: {cname} is {layout['size']} bytes in {path} but "
                f"{ctypes.sizeof(struct)} as built by ctypes"
            )
        built[cname] = struct
        globals()[pyname] = struct


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
    if not hasattr(lib, "attnkit_struct_layout"):
        raise ImportError(
            f"attnkit: {path} exports no attnkit_struct_layout; the package and the "
            "library come from different versions"
        )
    lib.attnkit_struct_layout.restype = ctypes.c_char_p
    lib.attnkit_struct_layout.argtypes = [ctypes.c_char_p]
    _build_structs(lib, path)
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
        "attnkit_config_schema": (_c_int32, [_out_str, err, ctypes.c_size_t]),
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
