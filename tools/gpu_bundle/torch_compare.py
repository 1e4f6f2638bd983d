#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention next to attnkit's CUDA backends.

Run by the GPU bundle's run.sh when `import torch` works. For each problem
and dtype (bf16, f16) it
  1. writes the problem's config and has `attnkit inputs` write its inputs
     (the same random data `check` and `compare` use),
  2. runs torch.nn.functional.scaled_dot_product_attention on them (the flash
     backend when torch can use it), times it with CUDA events, and checks
     its output with `attnkit verify` (the fp64 reference and attnkit's
     oracle) under compute FAST: torch's flash kernel rounds P to the 16-bit
     type before P V, which FAST permits and EXACT does not,
  3. times `cuda` and `cuda-cublas` on the same config with `attnkit compare`,
     under EXACT, and for bf16 under FAST too (rows "<backend> fast"),
then prints one table: milliseconds, useful TFLOP/s, % of the GPU's dense
bf16 peak and of its copy bandwidth (both measured here, in the same run,
with a torch (cuBLAS) GEMM and a device-to-device copy), and the ratio of each
attnkit backend's time to torch's.

Needs torch only (no numpy): .npy files are read and written here.
  python3 torch_compare.py --attnkit=bin/attnkit --plugin=lib/libattnkit_cuda.so --out=DIR
  [--json=FILE] [--keep] [--device=cpu]
DIR is scratch: each problem's inputs and outputs (hundreds of MiB) are
removed once it is done unless --keep. --json writes the numbers (a few KiB)
for run.sh's results.json. --device=cpu runs the same steps on the CPU (a
check of this script).
"""

import argparse
import ast
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import time

torch = None  # imported in main(): the .npy helpers below are tested without it
F = None

# name, B, H, Hkv, Tq, Tk, d, causal: the shapes of benchmarks/cuda_bench (B = 1
# for the prefill, so its inputs stay at 100 MiB of .npy).
PROBLEMS = [
    ("prefill_causal_b1_h32_t4096_d128", 1, 32, 32, 4096, 4096, 128, True),
    ("prefill_b1_h16_t2048_d64", 1, 16, 16, 2048, 2048, 64, False),
    ("decode_gqa_b8_h32_8_k8192_d128", 8, 32, 8, 1, 8192, 128, False),
]
SMALL = [  # --device=cpu: the same kinds of problem, small enough for a CPU
    ("prefill_causal_b1_h4_t256_d64", 1, 4, 4, 256, 256, 64, True),
    ("decode_gqa_b2_h8_2_k512_d64", 2, 8, 2, 1, 512, 64, False),
]
DTYPES = {"bf16": ("bfloat16", "BF16"), "f16": ("float16", "F16")}


def parse_npy(data, source="npy"):
    """(descr, shape, body) of .npy bytes: versions 1 to 3, C order only."""
    if data[:6] != b"\x93NUMPY" or data[6] not in (1, 2, 3):
        raise ValueError(f"{source}: not a .npy file")
    size = 2 if data[6] == 1 else 4
    hlen = int.from_bytes(data[8:8 + size], "little")
    header = data[8 + size:8 + size + hlen].decode("latin1")
    meta = ast.literal_eval(header)
    if meta.get("fortran_order"):
        raise ValueError(f"{source}: Fortran order is not supported")
    return meta["descr"], tuple(meta["shape"]), data[8 + size + hlen:]


def npy_bytes(descr, shape, body):
    """A version 1.0 .npy file holding `body` (C order) as `descr` of `shape`."""
    dims = "".join(f"{s}, " for s in shape)
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"  # 64-byte aligned body
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + body


def read_npy(path):
    with open(path, "rb") as f:
        descr, shape, body = parse_npy(f.read(), path)
    kinds = {"<f4": torch.float32, "<f2": torch.float16, "<i4": torch.int32, "|u1": torch.uint8,
             "|b1": torch.bool}
    return torch.frombuffer(bytearray(body), dtype=kinds[descr]).reshape(shape).clone()


def write_npy(path, t):
    t = t.detach().to("cpu").contiguous()
    descr = {torch.float32: "<f4", torch.float16: "<f2"}[t.dtype]
    body = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())
    with open(path, "wb") as f:
        f.write(npy_bytes(descr, tuple(t.shape), body))


def timed_ms(fn, device, iters):
    """Median milliseconds of fn() over `iters` runs after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def machine_limits(device):
    """Dense bf16 GEMM TFLOP/s (cuBLAS through torch) and copy GB/s, measured now."""
    n = 8192 if device == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = timed_ms(lambda: a @ b, device, 10)
    tflops = 2 * n**3 / (ms * 1e-3) / 1e12
    src = torch.empty(256 << 20 if device == "cuda" else 16 << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src), device, 10)
    gbps = 2 * src.numel() / (ms * 1e-3) / 1e9  # read + write
    return tflops, gbps


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    global torch, F
    import torch  # noqa: F811 (module-level placeholder above)
    import torch.nn.functional as F  # noqa: F811

    ap = argparse.ArgumentParser()
    ap.add_argument("--attnkit", required=True)
    ap.add_argument("--plugin", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("torch_compare: torch sees no CUDA device")
        return 1
    os.makedirs(args.out, exist_ok=True)
    plugins = [f"--plugins={args.plugin}"] if args.plugin else []
    peak, bandwidth = machine_limits(device)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}: bf16 GEMM {peak:.1f} TFLOP/s, copy "
          f"{bandwidth:.0f} GB/s (measured now)", flush=True)
    rows, failures = [], 0
    for (pname, B, H, G, Tq, Tk, d, causal) in (PROBLEMS if device == "cuda" else SMALL):
        for dname, (tname, cdtype) in DTYPES.items():
            tdtype = getattr(torch, tname)
            tag = f"{pname}_{dname}"
            work = os.path.join(args.out, tag)
            os.makedirs(work, exist_ok=True)
            config = os.path.join(work, "config.textproto")
            with open(config, "w") as f:
                f.write(f'name: "{tag}" batch: {B} num_heads: {H} num_kv_heads: {G} '
                        f"head_dim: {d} q_len: {Tq} kv_len: {Tk} dtype: {cdtype} "
                        f"kv_dtype: {cdtype} seed: 1\n")
                if causal:
                    f.write("mask { kind: CAUSAL } alignment: TOP_LEFT\n")
            rc, text = run([args.attnkit, "inputs", f"--config={config}", f"--dir={work}"])
            if rc != 0:
                print(f"{tag}: attnkit inputs failed: {text}")
                failures += 1
                continue
            q, k, v = (read_npy(os.path.join(work, f"{x}.npy")).to(device, tdtype)
                       for x in "qkv")
            def sdpa():
                try:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                          enable_gqa=G != H)
                except TypeError:  # torch < 2.5: no enable_gqa; repeat K/V heads
                    r = H // G
                    return F.scaled_dot_product_attention(
                        q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=causal)
            o = sdpa()
            torch_ms = timed_ms(sdpa, device, args.iters)
            write_npy(os.path.join(work, "o_torch.npy"), o.float())
            rc, text = run([args.attnkit, "verify", f"--config={config}"] +
                           [f"--{x}={os.path.join(work, x + '.npy')}" for x in "qkv"] +
                           [f"--o={os.path.join(work, 'o_torch.npy')}", "--sample_rows=256",
                            "--compute=fast"])
            verdict = text.splitlines()[0] if text else f"exit {rc}"
            failures += rc != 0
            # attnkit's CUDA backends on the same config, checked then timed.
            ours = {}
            modes = ["exact", "fast"] if dname == "bf16" else ["exact"]
            for mode in (modes if device == "cuda" else []):
                report = os.path.join(work, f"compare_{mode}.json")
                rc2, text2 = run([args.attnkit, "compare", f"--config={config}",
                                  "--backends=cuda,cuda-cublas", f"--compute={mode}",
                                  f"--json={report}"] + plugins)
                if rc2 != 0:
                    print(f"{tag}: attnkit compare --compute={mode} failed: "
                          f"{text2.splitlines()[-1:]}", flush=True)
                    failures += 1
                if os.path.exists(report):
                    for r in json.load(open(report))["problems"][0]["results"]:
                        if r.get("status") == "ok":
                            name = r["backend"] + ("" if mode == "exact" else " fast")
                            ours[name] = r["median_s"] * 1e3
            # Useful FLOPs as attnkit counts them: 4 d per visible (query, key) pair.
            pairs = B * H * (Tq * (Tq + 1) // 2 if causal and Tq == Tk else Tq * Tk)
            flops = 4 * d * pairs
            rows.append((tag, torch_ms, ours, flops, verdict))
            # One line per problem as it finishes: a run cut off by its cap
            # still shows what it measured.
            print(f"{tag}: torch-sdpa {torch_ms:.3f} ms; " +
                  "; ".join(f"{b} {ms:.3f} ms" for b, ms in sorted(ours.items())) +
                  f"; torch output: {verdict}", flush=True)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'problem':40} {'backend':12} {'ms':>9} {'TFLOP/s':>8} {'%peak':>6} "
          f"{'speedup vs torch':>16}")
    for tag, torch_ms, ours, flops, verdict in rows:
        for backend, ms in [("torch-sdpa", torch_ms)] + sorted(ours.items()):
            tf = flops / (ms * 1e-3) / 1e12
            print(f"{tag:40} {backend:12} {ms:9.3f} {tf:8.1f} {100 * tf / peak:5.1f}% "
                  f"{torch_ms / ms:15.2f}x")
        print(f"{'':40} torch output: {verdict}")
    print(f"\ntorch_compare: {len(rows)} problems, {failures} failure(s)")
    print(f"[  PASSED  ] {max(len(rows) - failures, 0)} tests.")  # for run.sh's summary
    if failures:
        print(f"[  FAILED  ] {failures} tests, listed above")
    if args.json:
        problems = [{"problem": tag, "torch_ms": round(torch_ms, 4), "torch_output": verdict,
                     "attnkit_ms": {b: round(ms, 4) for b, ms in sorted(ours.items())},
                     "useful_tflop": flops / 1e12}
                    for tag, torch_ms, ours, flops, verdict in rows]
        with open(args.json, "w") as f:
            json.dump({"source": "torch_compare", "torch": torch.__version__, "device": name,
                       "bf16_gemm_tflops": round(peak, 2), "copy_gbps": round(bandwidth, 1),
                       "failures": failures, "problems": problems}, f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
