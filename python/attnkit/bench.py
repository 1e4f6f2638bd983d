"""Timing from Python.

    python -m attnkit.bench               # every host backend on a few shapes
    python -m attnkit.bench --vs torch    # and torch's SDPA beside them
    python -m attnkit.bench --overhead    # what the Python layer adds per call

Times are medians of repeated calls on the same inputs (warm), in
milliseconds, with useful GFLOP/s (4 * d * visible pairs). The machine
limits and the standard suite's full report come from `attnkit compare`.
"""

import argparse
import ctypes
import statistics
import time

import numpy as np

from . import _capi
from . import _ops

# (name, batch, Hq, Hkv, L, S, E, causal)
SHAPES = [
    ("decode_b8_h32g8_k4096_d128", 8, 32, 8, 1, 4096, 128, False),
    ("decode_b1_h32g8_k512_d128", 1, 32, 8, 1, 512, 128, False),
    ("prefill_b1_h16_t1024_d64_causal", 1, 16, 16, 1024, 1024, 64, True),
    ("prefill_b1_h32g8_t512_d128_causal", 1, 32, 8, 512, 512, 128, True),
]


def _median_ms(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _useful_flops(b, hq, L, S, e, causal):
    pairs = L * S if not causal else sum(min(S, S - L + i + 1) for i in range(L))
    return 4.0 * e * pairs * b * hq


def run(vs_torch, reps):
    rng = np.random.default_rng(0)
    names = [b["name"] for b in _ops.backends() if b["available"] and b["memory"] == "host"]
    torch = None
    if vs_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            print("torch is not importable here: its column is left out")
    header = ["problem"] + names + (["torch-sdpa"] if torch is not None else [])
    print(" | ".join(f"{h:>34}" if i == 0 else f"{h:>16}" for i, h in enumerate(header)))
    for name, b, hq, hkv, L, S, e, causal in SHAPES:
        q = rng.uniform(-1, 1, (b, hq, L, e)).astype(np.float32)
        k = rng.uniform(-1, 1, (b, hkv, S, e)).astype(np.float32)
        v = rng.uniform(-1, 1, (b, hkv, S, e)).astype(np.float32)
        flops = _useful_flops(b, hq, L, S, e, causal)
        cells = []
        for backend in names:
            slow = backend == "reference"
            ms = _median_ms(
                lambda: _ops.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, enable_gqa=hq != hkv, backend=backend
                ),
                1 if slow else reps,
            )
            cells.append(f"{ms:8.3f} ms {flops / ms / 1e6:5.0f}G")
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            ms = _median_ms(
                lambda: torch.nn.functional.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=causal, enable_gqa=hq != hkv
                ),
                reps,
            )
            cells.append(f"{ms:8.3f} ms {flops / ms / 1e6:5.0f}G")
        print(" | ".join([f"{name:>34}"] + [f"{c:>16}" for c in cells]))


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
    parser.add_argument("--overhead", action="store_true", help="the Python layer's cost")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    if args.overhead:
        overhead(max(args.reps, 5000))
    else:
        run(args.vs == "torch", args.reps)


if __name__ == "__main__":
    main()
