"""attnkit's Python package as the GPU bundle carries it (python/attnkit over
lib/libattnkit.so, its libraries preloaded from lib/ by ATTNKIT_DEPS_DIR).

Every output is judged by attnkit's oracle: the arrays go to `attnkit verify`
(the bundle's CLI, $ATTNKIT_CLI), which checks them against the fp64
reference with the bound `check` uses, scaled to the storage type and the
reduction length. (Absolute tolerances such as 3e-2 for bf16 passed a
dropped key or a 2 % scale error: --planted shows it.)

Always: SDPA on numpy arrays on the host, and the package's native
libraries loaded from the bundle. With ATTNKIT_REQUIRE_BACKENDS set (run.sh:
a usable GPU), also the CUDA path: torch CUDA tensors (f16, bf16, f32; GQA;
causal; boolean masks) through `auto`, attention() with kv_lengths and a
window, a call on a non-default torch stream, calls alternating between two
torch streams without synchronisation (split-K decode), host backends
refusing CUDA tensors, and a decode timing beside torch. Prints one line per
check and gtest-style totals for run.sh's summary; exit 1 on any failure.

  python3 python_check.py --planted --attnkit=PATH
runs only the oracle's demonstration on the CPU (numpy and the CLI, no
torch, no GPU): bf16 outputs with planted bugs that the old absolute
tolerance passes and `attnkit verify` fails (//tools:gpu_bundle_python_check_test).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

RESULTS = []
CLI = os.environ.get("ATTNKIT_CLI", "attnkit")
torch = None  # imported in main() before attnkit, so that torch's libstdc++ is the one loaded


def record(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"[ {'OK' if ok else 'FAILED'} ] {name}{': ' + detail if detail else ''}", flush=True)


def as_f32(x):
    """A host float32 array of a numpy array or torch tensor (bf16 and f16
    values are exact in float32)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def verify(q, k, v, o, dtype, causal=False, torch_mask=None, scale=None, window=None,
           kv_lengths=None, alignment=None):
    """(passed, attnkit verify's first line) for output o of SDPA(q, k, v):
    q [B, H, Tq, d], k/v [B, G, Tk, d], stored as `dtype` (F32, F16, BF16).
    torch_mask: bool [Tq, Tk], True = takes part (PyTorch's convention).
    causal: PyTorch's is_causal (top-left); window=(left, right) with
    alignment (bottom-right by default, as attnkit.attention)."""
    work = tempfile.mkdtemp(prefix="attnkit_verify_")
    try:
        args = [CLI, "verify", f"--config.dtype={dtype}", f"--config.kv_dtype={dtype}"]
        for name, x in (("q", q), ("k", k), ("v", v), ("o", o)):
            path = os.path.join(work, name + ".npy")
            np.save(path, as_f32(x))
            args.append(f"--{name}={path}")
        if causal:
            args += ["--config.mask.kind=CAUSAL", "--config.alignment=TOP_LEFT"]
        if window is not None:
            args += ["--config.mask.kind=SLIDING_WINDOW", f"--config.mask.window_left={window[0]}",
                     f"--config.mask.window_right={window[1]}",
                     f"--config.alignment={alignment or 'BOTTOM_RIGHT'}"]
        if scale is not None:
            args.append(f"--config.scale={scale!r}")
        if torch_mask is not None:
            m = np.asarray(as_f32(torch_mask) != 0)
            path = os.path.join(work, "mask.npy")
            np.save(path, m.reshape((1, 1) + m.shape))
            args += [f"--mask={path}", "--mask_convention=torch"]
        if kv_lengths is not None:
            path = os.path.join(work, "kv_lengths.npy")
            np.save(path, np.asarray(kv_lengths, dtype=np.int32))
            args.append(f"--kv_lengths={path}")
        env = dict(os.environ)
        deps = os.environ.get("ATTNKIT_DEPS_DIR")
        if deps:  # the bundle's CLI loads its libraries from there
            env["LD_LIBRARY_PATH"] = deps + ":" + env.get("LD_LIBRARY_PATH", "")
        r = subprocess.run(args, capture_output=True, text=True, env=env)
        text = (r.stdout + r.stderr).strip().splitlines()
        return r.returncode == 0, (text[0] if text else f"exit {r.returncode}")[:300]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ref_sdpa(q, k, v, mask=None, causal=False, scale=None):
    """float64 SDPA: q [B, H, L, E], k/v [B, G, S, E], mask True = takes part."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    rep = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def to_bf16(x):
    """x rounded to bfloat16 (to nearest even), held in float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def host_part():
    import attnkit

    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (2, 8, 33, 64)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 2, 33, 64)).astype(np.float32)
    o = attnkit.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
    ok, line = verify(q, k, k, o, "F32", causal=True)
    record("host sdpa, attnkit verify", ok, f"{attnkit.last_run()['backend']}: {line}")
    deps = os.environ.get("ATTNKIT_DEPS_DIR", "")
    maps = open("/proc/self/maps").read()
    ours = [ln.split()[-1] for ln in maps.splitlines() if "libprotobuf" in ln]
    record("native libraries from the bundle", bool(ours) and all(
        p.startswith(deps) for p in ours), ", ".join(sorted(set(ours))))


def cuda_part():
    if torch is None or not torch.cuda.is_available():
        record("torch with CUDA", False, "torch is missing or sees no GPU")
        return
    import attnkit

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    names = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}

    def rand(*shape, dtype):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(dtype)

    cases = [  # (B, Hq, Hkv, L, S, E, causal, bool mask)
        (2, 8, 8, 128, 128, 64, False, False),
        (2, 32, 8, 77, 300, 128, False, True),
        (1, 16, 2, 256, 256, 128, True, False),
        (4, 32, 8, 1, 1000, 128, False, False),
    ]
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for b, hq, hkv, L, S, E, causal, use_mask in cases:
            q, k, v = rand(b, hq, L, E, dtype=dtype), rand(b, hkv, S, E, dtype=dtype), rand(
                b, hkv, S, E, dtype=dtype)
            mask = (torch.rand(L, S, generator=g, device=dev) > 0.2) if use_mask else None
            if mask is not None:
                mask[:, 0] = True
            name = f"cuda sdpa {str(dtype)[6:]} b{b} h{hq}/{hkv} L{L} S{S} E{E}" + (
                " causal" if causal else "") + (" mask" if use_mask else "")
            try:
                o = attnkit.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                         is_causal=causal, enable_gqa=True)
                ran = attnkit.last_run()["backend"]
                ok, line = verify(q, k, v, o, names[dtype], causal=causal, torch_mask=mask)
                record(name, o.is_cuda and o.dtype == dtype and ran == "cuda" and ok,
                       f"{ran}: {line}")
            except Exception as e:  # noqa: BLE001 - report and go on
                record(name, False, f"{type(e).__name__}: {e}")
    # attention(): kv_lengths and a sliding window, bottom-right.
    q, k = rand(2, 8, 16, 64, dtype=torch.float16), rand(2, 8, 40, 64, dtype=torch.float16)
    lengths = [40, 25]
    o = attnkit.attention(q, k, k, window=(8, 0), kv_lengths=lengths, backend="cuda")
    ok, line = verify(q, k, k, o, "F16", window=(8, 0), kv_lengths=lengths)
    record("cuda attention window+kv_lengths", ok, line)
    # A non-default stream: attnkit runs on torch's current stream.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q2 = q * 2
        o2 = attnkit.scaled_dot_product_attention(q2, k, k)
    s.synchronize()
    ok, line = verify(q2, k, k, o2, "F16")
    record("cuda sdpa on a side stream", ok, line)
    # Two streams alternating without synchronisation, split-K decode (the
    # backend's scratch is shared; the stream switch must order it).
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    kv = [rand(1, 8, 8192, 128, dtype=torch.bfloat16) for _ in range(2)]
    qs = [rand(1, 32, 1, 128, dtype=torch.bfloat16) for _ in range(8)]
    outs = []
    for i, qi in enumerate(qs):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(attnkit.scaled_dot_product_attention(qi, kv[i % 2], kv[i % 2],
                                                             enable_gqa=True))
    torch.cuda.synchronize()
    bad = [f"call {i}: {line}" for i, (qi, oi) in enumerate(zip(qs, outs))
           for ok, line in [verify(qi, kv[i % 2], kv[i % 2], oi, "BF16")] if not ok]
    record("cuda sdpa alternating two streams (split-K decode)", not bad,
           "; ".join(bad) if bad else f"{len(qs)} calls verified")
    try:
        attnkit.scaled_dot_product_attention(q, k, k, backend="highway")
        record("host backend refuses CUDA tensors", False, "no error")
    except ValueError as e:
        record("host backend refuses CUDA tensors", "runs on the host" in str(e), str(e))
    # Decode timing beside torch (B8 H32/8 Tk4096 d128 f16).
    q, k, v = (rand(8, 32, 1, 128, dtype=torch.float16), rand(8, 8, 4096, 128, dtype=torch.float16),
               rand(8, 8, 4096, 128, dtype=torch.float16))

    def ms(fn, reps=50):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / reps

    a = ms(lambda: attnkit.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    t = ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    gbytes = 2 * k.numel() * 2 / 1e9
    print(f"decode B8 H32/8 Tk4096 d128 f16: attnkit {a:.3f} ms ({gbytes / a * 1e3:.0f} GB/s), "
          f"torch {t:.3f} ms ({gbytes / t * 1e3:.0f} GB/s), per call incl. Python", flush=True)


def old_tolerance_passes(o, want, dtype):
    """The check this script made before: max |o - SDPA in f32| < an
    absolute tolerance per dtype (bf16 3e-2, f16 4e-3, f32 1e-4)."""
    tol = {"BF16": 3e-2, "F16": 4e-3, "F32": 1e-4}[dtype]
    return float(np.abs(np.asarray(o, np.float64) - want).max()) < tol


def planted():
    """bf16 outputs of the bundle's CUDA shapes on the CPU: a correct one
    (the fp64 reference rounded to bf16) must pass `attnkit verify`; with a
    planted bug (output x1.02, a dropped key, softmax scale x1.02) the old
    absolute tolerance still passes and verify must fail."""
    rng = np.random.default_rng(3)
    cases = [(2, 32, 8, 77, 300, 128, False, True), (1, 16, 2, 256, 256, 128, True, False),
             (4, 32, 8, 1, 1000, 128, False, False)]
    for b, hq, hkv, L, S, E, causal, use_mask in cases:
        q, k, v = (to_bf16(rng.uniform(-1, 1, shape)) for shape in
                   ((b, hq, L, E), (b, hkv, S, E), (b, hkv, S, E)))
        mask = None
        if use_mask:
            mask = rng.uniform(size=(L, S)) > 0.2
            mask[:, 0] = True
        name = f"bf16 b{b} h{hq}/{hkv} L{L} S{S} E{E}" + (" causal" if causal else "") + (
            " mask" if use_mask else "")
        want = ref_sdpa(q, k, v, mask, causal)
        dropped = np.ones((L, S), bool) if mask is None else mask.copy()
        dropped[:, S // 2] = False  # one key no query sees (causal rows keep key 0)
        outputs = {
            "correct": want,
            "output x1.02": want * 1.02,
            f"key {S // 2} dropped": ref_sdpa(q, k, v, dropped, causal),
            "softmax scale x1.02": ref_sdpa(q, k, v, mask, causal, scale=1.02 / np.sqrt(E)),
        }
        for bug, o in outputs.items():
            o = to_bf16(o)
            old = old_tolerance_passes(o, want, "BF16")
            new, line = verify(q, k, v, o, "BF16", causal=causal, torch_mask=mask)
            if bug == "correct":
                record(f"{name}: correct output", old and new, f"old tolerance "
                       f"{'passes' if old else 'FAILS'}; verify: {line}")
            else:
                record(f"{name}: {bug}", old and not new,
                       f"old tolerance {'passes' if old else 'fails'}; verify: {line}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--planted", action="store_true")
    ap.add_argument("--attnkit", default="")
    args = ap.parse_args()
    global CLI, torch
    CLI = args.attnkit or CLI
    if args.planted:
        planted()
    else:
        try:
            import torch  # noqa: F811 (the module-level placeholder above)
        except ImportError:
            torch = None
        host_part()
        if os.environ.get("ATTNKIT_REQUIRE_BACKENDS"):
            cuda_part()
        else:
            print("CUDA part: not run (no usable GPU)")
    passed, failed = sum(RESULTS), len(RESULTS) - sum(RESULTS)
    print(f"[  PASSED  ] {passed} tests.")
    if failed:
        print(f"[  FAILED  ] {failed} tests, listed above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
