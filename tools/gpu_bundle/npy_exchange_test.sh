#!/usr/bin/env bash
# The .npy exchange torch_compare.py relies on, without torch or a GPU:
# `attnkit inputs` writes a bf16 problem's inputs, the script's own .npy
# reader and writer (parse_npy, npy_bytes) read them and rewrite the output
# `attnkit run` made, `attnkit verify` accepts the rewritten file and refuses
# it with one value changed.
set -uo pipefail
bin=tools/attnkit
script=tools/gpu_bundle/torch_compare.py
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

cat > "$tmp/cfg.textproto" << 'PB'
batch: 2 num_heads: 4 num_kv_heads: 2 head_dim: 32 q_len: 7 kv_len: 19 dtype: BF16
kv_dtype: BF16 mask { kind: CAUSAL } alignment: BOTTOM_RIGHT seed: 3
PB
$bin inputs --config="$tmp/cfg.textproto" --dir="$tmp" > /dev/null || fail "inputs exited $?"
$bin run --config="$tmp/cfg.textproto" --q="$tmp/q.npy" --k="$tmp/k.npy" --v="$tmp/v.npy" \
  --out="$tmp/o.npy" --backend=reference > /dev/null || fail "run exited $?"

python3 - "$script" "$tmp" << 'PY' || fail "python side"
import importlib.util, struct, sys
spec = importlib.util.spec_from_file_location("tc", sys.argv[1])
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)
d = sys.argv[2]
descr, shape, body = tc.parse_npy(open(f"{d}/q.npy", "rb").read(), "q.npy")
assert (descr, shape) == ("<f4", (2, 4, 7, 32)), (descr, shape)
assert len(body) == 2 * 4 * 7 * 32 * 4
# bf16 inputs travel as float32 with the low 16 bits zero.
words = struct.unpack(f"<{len(body) // 4}I", body)
assert all(w & 0xFFFF == 0 for w in words), "q.npy holds values that are not bf16"
descr, shape, body = tc.parse_npy(open(f"{d}/o.npy", "rb").read(), "o.npy")
open(f"{d}/o_rewritten.npy", "wb").write(tc.npy_bytes(descr, shape, body))
values = bytearray(body)
x = struct.unpack_from("<f", values, 40)[0]
struct.pack_into("<f", values, 40, x * 1.01 + 0.01)
open(f"{d}/o_bad.npy", "wb").write(tc.npy_bytes(descr, shape, bytes(values)))
PY

args=(--config="$tmp/cfg.textproto" --q="$tmp/q.npy" --k="$tmp/k.npy" --v="$tmp/v.npy")
$bin verify "${args[@]}" --o="$tmp/o_rewritten.npy" > "$tmp/ok.txt" ||
  fail "verify refused the rewritten output: $(cat "$tmp/ok.txt")"
grep -q ': pass;' "$tmp/ok.txt" || fail "verify printed no pass"
if $bin verify "${args[@]}" --o="$tmp/o_bad.npy" > "$tmp/bad.txt" 2>&1; then
  fail "verify accepted a changed value"
fi
grep -q 'FAIL' "$tmp/bad.txt" || fail "verify printed no FAIL: $(cat "$tmp/bad.txt")"
echo PASS
