"""attnkit's Python package as the GPU bundle carries it (python/attnkit over
lib/libattnkit.so, its libraries preloaded from lib/ by ATTNKIT_DEPS_DIR).

Always: SDPA on numpy arrays against a float64 numpy reference, and the
package's native libraries loaded from the bundle. With
ATTNKIT_REQUIRE_BACKENDS set (run.sh: a usable GPU), also the CUDA path:
torch CUDA tensors (f16, bf16, f32; GQA; causal; boolean masks) through
`auto` and the cuda backend against torch's SDPA, attention() with
kv_lengths and a window, a call on a non-default torch stream, host backends
refusing CUDA tensors, and a decode timing beside torch. Prints one line per
check and gtest-style totals for run.sh's summary; exit 1 on any failure.
"""

import os
import sys
import time

try:
    import torch  # first, so that torch's own libstdc++ is the one loaded
except ImportError:
    torch = None
import numpy as np

import attnkit

RESULTS = []


def record(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"[ {'OK' if ok else 'FAILED'} ] {name}{': ' + detail if detail else ''}", flush=True)


def ref_sdpa(q, k, v, mask=None, causal=False, scale=None):
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


def host_part():
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (2, 8, 33, 64)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 2, 33, 64)).astype(np.float32)
    o = attnkit.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
    err = float(np.abs(o - ref_sdpa(q, k, k, causal=True)).max())
    record("host sdpa vs numpy fp64", err < 1e-5, f"max err {err:.2e} on "
           f"{attnkit.last_run()['backend']}")
    deps = os.environ.get("ATTNKIT_DEPS_DIR", "")
    maps = open("/proc/self/maps").read()
    ours = [ln.split()[-1] for ln in maps.splitlines() if "libprotobuf" in ln]
    record("native libraries from the bundle", bool(ours) and all(
        p.startswith(deps) for p in ours), ", ".join(sorted(set(ours))))


def cuda_part():
    if torch is None or not torch.cuda.is_available():
        record("torch with CUDA", False, "torch is missing or sees no GPU")
        return
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape, dtype):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(dtype)

    cases = [  # (B, Hq, Hkv, L, S, E, causal, bool mask)
        (2, 8, 8, 128, 128, 64, False, False),
        (2, 32, 8, 77, 300, 128, False, True),
        (1, 16, 2, 256, 256, 128, True, False),
        (4, 32, 8, 1, 1000, 128, False, False),
    ]
    for dtype, tol in ((torch.float16, 4e-3), (torch.bfloat16, 3e-2), (torch.float32, 1e-4)):
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
                want = torch.nn.functional.scaled_dot_product_attention(
                    q.float(), k.float().repeat_interleave(hq // hkv, 1),
                    v.float().repeat_interleave(hq // hkv, 1), attn_mask=mask,
                    is_causal=causal)
                err = (o.float() - want).abs().max().item()
                record(name, o.is_cuda and o.dtype == dtype and ran == "cuda" and err < tol,
                       f"{ran}, max err {err:.2e} (tol {tol:g})")
            except Exception as e:  # noqa: BLE001 - report and go on
                record(name, False, f"{type(e).__name__}: {e}")
    # attention(): kv_lengths and a sliding window, bottom-right.
    q, k = rand(2, 8, 16, 64, dtype=torch.float16), rand(2, 8, 40, 64, dtype=torch.float16)
    lengths = [40, 25]
    o = attnkit.attention(q, k, k, window=(8, 0), kv_lengths=lengths, backend="cuda")
    # Bottom-right: the diagonal of sequence b sits at i + lengths[b] - 16.
    j = torch.arange(40, device=dev)[None, :]
    masks = []
    for n in lengths:
        i = torch.arange(16, device=dev)[:, None] + n - 16
        masks.append((j <= i) & (j >= i - 8) & (j < n))
    masks = torch.stack(masks)[:, None]
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), k.float(),
                                                            attn_mask=masks)
    rows = masks.any(-1, keepdim=True)
    err = ((o.float() - want) * rows).abs().max().item()
    record("cuda attention window+kv_lengths", err < 4e-3, f"max err {err:.2e}")
    # A non-default stream: attnkit runs on torch's current stream.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q2 = q * 2
        o2 = attnkit.scaled_dot_product_attention(q2, k, k)
    s.synchronize()
    want2 = torch.nn.functional.scaled_dot_product_attention(q2.float(), k.float(), k.float())
    err = (o2.float() - want2).abs().max().item()
    record("cuda sdpa on a side stream", err < 4e-3, f"max err {err:.2e}")
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


def main():
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
