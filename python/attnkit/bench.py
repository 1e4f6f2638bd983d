"""Timing from Python: attnkit's backends (and torch's SDPA) side by side.

    python -m attnkit.bench               # every host backend on the standard suite
    python -m attnkit.bench --vs torch    # and torch's SDPA beside them
    python -m attnkit.bench --config F    # a text-format config instead of the suite
    python -m attnkit.bench --overhead    # what the Python layer adds per call
    python -m attnkit.bench --model       # end to end: a 0.5B Llama-style model generating

The machine's limits (peak FMA, read bandwidth, OpenBLAS sgemm) are measured
at the start of the same run. Each figure is the median of warm calls on the
same inputs; GFLOP/s count useful FLOPs (4 d per visible (query, key) pair);
"% lim" is of peak FMA, or of read bandwidth when the problem is
memory-bound (its FLOPs per byte below the machine's balance), as in
`attnkit compare`. torch runs the same problem with masks expressed as a
boolean attn_mask; a problem torch cannot express (softcap) says so.
"""

import argparse
import ctypes
import statistics
import time

import numpy as np

from . import _capi
from . import _ops
from ._config import AttentionConfig
from ._config import suite as _suite
from ._jobs import machine_limits


def _median_ms(fn, reps, budget_s=2.0):
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _visible(cfg, kv_length=None):
    """The [Tq, Tk] boolean visibility of cfg's mask (True = take part) for a
    sequence of kv_length valid keys (default: all Tk; bottom-right alignment
    puts the diagonal at kv_length - Tq, as core/mask.h does), or None when
    every key is visible to every query."""
    tq, tk = cfg.q_len, cfg.kv_len or cfg.q_len
    n = tk if kv_length is None else kv_length
    kind = cfg.mask.kind
    if kind in ("KIND_UNSPECIFIED", "NONE"):
        return None if n == tk else np.broadcast_to(np.arange(tk)[None, :] < n, (tq, tk))
    offset = n - tq if cfg.alignment != "TOP_LEFT" else 0
    i = np.arange(tq)[:, None] + offset
    j = np.arange(tk)[None, :]
    if kind == "CAUSAL":
        left, right = -1, 0
    else:
        left, right = cfg.mask.window_left, cfg.mask.window_right
    vis = np.broadcast_to(j < n, (tq, tk)).copy()
    if right >= 0:
        vis &= j <= i + right
    if left >= 0:
        vis &= j >= i - left
    return None if vis.all() else vis


class _Problem:
    """One config's inputs (numpy, or torch when a 16-bit dtype needs it)
    and how attnkit and torch each run it."""

    def __init__(self, cfg, torch):
        self.cfg = cfg
        self.skip = None
        if cfg.page_size or cfg.q_lengths or cfg.kv_dtype in ("INT8", "FP8_E4M3", "FP8_E5M2"):
            # attnkit.attention takes dense tensors; `attnkit compare` runs these.
            self.skip = "paged, ragged, int8 and fp8 problems: see `attnkit compare`"
            return
        if cfg.backward:
            # The Python layer has no backward entry yet; `attnkit compare` times it.
            self.skip = "backward problems: see `attnkit compare`"
            return
        b = cfg.batch or 1
        h, g = cfg.num_heads, cfg.num_kv_heads or cfg.num_heads
        tq, tk, d = cfg.q_len, cfg.kv_len or cfg.q_len, cfg.head_dim
        dv = cfg.value_head_dim or d  # V's own head dim (MLA), else d
        rng = np.random.default_rng(cfg.seed)
        arrays = [rng.uniform(-1, 1, s).astype(np.float32)
                  for s in ((b, h, tq, d), (b, g, tk, d), (b, g, tk, dv))]
        dt = "F32" if cfg.dtype == "DTYPE_UNSPECIFIED" else cfg.dtype
        kv_dt = dt if cfg.kv_dtype == "DTYPE_UNSPECIFIED" else cfg.kv_dtype
        self.skip = None
        if dt != "F32" or kv_dt != "F32":
            if torch is None:
                self.skip = f"{dt.lower()}/{kv_dt.lower()} inputs need torch here"
                return
            names = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
            arrays = [torch.from_numpy(arrays[0]).to(names[dt])] + [
                torch.from_numpy(a).to(names[kv_dt]) for a in arrays[1:]]
        self.q, self.k, self.v = arrays
        kind = cfg.mask.kind
        self.kwargs = dict(
            causal=kind == "CAUSAL",
            window=(cfg.mask.window_left, cfg.mask.window_right)
            if kind == "SLIDING_WINDOW" else None,
            alignment="top_left" if cfg.alignment == "TOP_LEFT" else "bottom_right",
            kv_lengths=cfg.kv_lengths or None,
            softcap=cfg.softcap,
            scale=cfg.scale,
            compute="fast" if cfg.compute == "FAST" else "exact",
        )
        self.torch_skip = None
        if torch is not None:
            self.torch_skip = "softcap" if cfg.softcap else None
            if cfg.kv_lengths:  # one mask per sequence: [B, 1, Tq, Tk]
                vis = np.stack([
                    np.ones((tq, tk), bool) if m is None else m
                    for m in (_visible(cfg, n) for n in cfg.kv_lengths)])[:, None]
            else:
                vis = _visible(cfg)
            self.torch_mask = None if vis is None else torch.from_numpy(vis)
            # torch has one dtype for q, k and v: the wider of the two here.
            tdt = self.q.dtype if not hasattr(self.k, "dtype") or str(self.k.dtype) == str(
                self.q.dtype) else torch.float32
            conv = (lambda x: x.to(tdt)) if dt != "F32" or kv_dt != "F32" else torch.from_numpy
            self.tq, self.tk, self.tv = (conv(x) for x in (self.q, self.k, self.v))

    def attnkit(self, backend):
        return _ops.attention(self.q, self.k, self.v, backend=backend, **self.kwargs)

    def torch(self, torch):
        return torch.nn.functional.scaled_dot_product_attention(
            self.tq, self.tk, self.tv, attn_mask=self.torch_mask,
            enable_gqa=self.tq.shape[1] != self.tk.shape[1], scale=self.cfg.scale)


def run(vs_torch, reps, configs, threads, with_reference):
    torch = None
    if vs_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            print("torch is not importable here: its column is left out")
    info = machine_limits(threads, refresh=True)
    m, lim = info["machine"], info["limits"]
    threads = m["threads"]
    balance = lim["peak_fma_gflops"] / lim["read_gbps"]
    print(f"{m['cpu_model']}, {threads} threads, Highway {m['highway_dispatched']}, OpenBLAS "
          f"{m['openblas_core']}: peak FMA {lim['peak_fma_gflops']:.1f} GFLOP/s, read "
          f"{lim['read_gbps']:.1f} GB/s, sgemm {lim['sgemm_gflops']:.1f} GFLOP/s (measured now)")
    names = [b["name"] for b in _ops.backends() if b["available"] and b["memory"] == "host"
             and (with_reference or b["name"] != "reference") and b["name"] != "c-naive"]
    for n in names:
        _ops.set_num_threads(n, threads)
    columns = names + (["torch"] if torch is not None else [])
    if torch is not None:
        torch.set_num_threads(threads)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("cells: median ms / GFLOP/s / % of limit (bw: memory-bound, % of read bandwidth)\n")
    print(f"{'problem':<38}" + "".join(f"{c:>26}" for c in columns))
    for cfg in configs:
        cost = cfg.cost()
        memory_bound = cost["useful_flops"] / cost["bytes_moved"] < balance
        prob = _Problem(cfg, torch)
        cells = []
        for c in columns:
            if prob.skip or (c == "torch" and prob.torch_skip):
                cells.append(f"n/a ({prob.skip or prob.torch_skip})")
                continue
            fn = (lambda: prob.torch(torch)) if c == "torch" else (lambda c=c: prob.attnkit(c))
            ms = _median_ms(fn, 3 if c == "reference" else reps)
            gflops = cost["useful_flops"] / ms / 1e6
            pct = (100 * cost["bytes_moved"] / ms / 1e6 / lim["read_gbps"] if memory_bound
                   else 100 * gflops / lim["peak_fma_gflops"])
            cells.append(f"{ms:8.3f} {gflops:6.1f} {pct:5.1f}%{' bw' if memory_bound else '   '}")
        print(f"{(cfg.name or cost['id'])[:37]:<38}" + "".join(f"{c:>26}" for c in cells))


def overhead(reps):
    """What the Python layer costs per call, for decode-sized problems: the
    whole of scaled_dot_product_attention with the C call replaced by a stub
    (argument checks, views, output allocation, the result record), and the
    ctypes round trip of attnkit_run itself (a call refused at the backend
    lookup). Minimum and median over `reps` calls."""
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, (1, 32, 1, 128)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, 8, 4096, 128)).astype(np.float32)
    v = rng.uniform(-1, 1, (1, 8, 4096, 128)).astype(np.float32)

    def times_us(fn):
        xs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            xs.append((time.perf_counter() - t0) * 1e6)
        return min(xs), statistics.median(xs)

    real_run = _ops._Call.run
    _ops._Call.run = lambda self, backend: None
    try:
        layer = times_us(
            lambda: _ops.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="highway")
        )
    finally:
        _ops._Call.run = real_run
    call = _ops._Call()
    err = ctypes.create_string_buffer(2048)
    ctx = _capi.context()
    trip = times_us(
        lambda: _capi.lib.attnkit_run(
            ctx, b"no-such-backend", ctypes.byref(call.problem), ctypes.byref(call.args), None,
            err, len(err),
        )
    )
    print(
        "decode B=1 H=32/8 Tk=4096 d=128 f32:\n"
        f"  Python layer (everything but the C call): min {layer[0]:.1f} us, median "
        f"{layer[1]:.1f} us\n"
        f"  ctypes round trip of attnkit_run:          min {trip[0]:.1f} us, median "
        f"{trip[1]:.1f} us"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vs", choices=["torch"], help="time torch's SDPA beside attnkit")
    parser.add_argument("--config", action="append", help="a text-format config (repeatable)")
    parser.add_argument("--suite", default="standard")
    parser.add_argument("--threads", type=int, default=0, help="0 = every core")
    parser.add_argument("--with_reference", action="store_true", help="time the fp64 reference")
    parser.add_argument("--overhead", action="store_true", help="the Python layer's cost")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--model", nargs="?", const="0.5b", choices=["0.5b", "tiny"],
                        help="end to end: a random Llama-style model generating with "
                        "Transformers, attention by attnkit, sdpa and eager (needs torch and "
                        "transformers; attnkit.model_bench)")
    parser.add_argument("--prompt", type=int, default=1024, help="--model: prompt tokens")
    parser.add_argument("--new_tokens", type=int, default=128, help="--model: tokens generated")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="--model: the model's dtype")
    args = parser.parse_args()
    if args.model:
        from . import model_bench

        model_bench.run(args.model, args.prompt, args.new_tokens, args.dtype, args.threads)
        return
    if args.overhead:
        overhead(max(args.reps, 5000))
        return
    configs = ([AttentionConfig.from_file(c) for c in args.config] if args.config
               else _suite(args.suite))
    run(args.vs == "torch", args.reps, configs, args.threads, args.with_reference)


if __name__ == "__main__":
    main()
