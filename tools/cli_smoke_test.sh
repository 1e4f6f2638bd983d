#!/usr/bin/env bash
# The attnkit binary: exit codes and one-line errors on stderr.
set -uo pipefail
bin=tools/attnkit
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

$bin backends > "$tmp/backends.txt" || fail "backends exited $?"
grep -q '^reference: available' "$tmp/backends.txt" || fail "backends lists no reference"

cat > "$tmp/small.textproto" <<'PB'
num_heads: 4 num_kv_heads: 2 head_dim: 16 q_len: 9 mask { kind: CAUSAL }
PB
$bin check --config="$tmp/small.textproto" > "$tmp/check.txt" || fail "check exited $?"
grep -q 'pass' "$tmp/check.txt" || fail "check printed no pass"

# ATTNKIT_HWY_TARGET caps every Highway kernel: highway's and blas's softmax.
ATTNKIT_HWY_TARGET=SSE4 $bin check --config="$tmp/small.textproto" --backends=highway,blas --wide \
  > "$tmp/capped.txt" || fail "capped check exited $?"
grep -q 'flash/SSE4' "$tmp/capped.txt" || fail "highway not capped: $(cat "$tmp/capped.txt")"
grep -q 'softmax/SSE4' "$tmp/capped.txt" || fail "blas softmax not capped: $(cat "$tmp/capped.txt")"

# --config.FIELD=VALUE flags (read off the config proto) over the default or a --config file.
$bin cost --config.num_heads=32 --config.head_dim=128 --config.q_len=1 --config.kv_len=4096 \
  > "$tmp/cost_flags.txt" || fail "cost with --config.* flags exited $?"
grep -q 'h32_g4_q1_k4096_d128' "$tmp/cost_flags.txt" || fail "cost flags: $(cat "$tmp/cost_flags.txt")"
$bin check --config="$tmp/small.textproto" --config.mask.kind=sliding_window \
  --config.mask.window_left=3 --config.kv_lengths=7 --config.return_lse --backends=reference \
  > "$tmp/check_flags.txt" || fail "check with --config.* flags exited $?"
grep -q 'h4_g2_q9_k9_d16_window3x0_br_pad_lse' "$tmp/check_flags.txt" || fail "check flags: $(cat "$tmp/check_flags.txt")"
$bin cost --config.heads=4 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 2 ]] || fail "unknown config field exited $rc, want 2"
grep -q 'did you mean --config.num_heads' "$tmp/err.txt" || fail "config field: $(cat "$tmp/err.txt")"
$bin peak --config.num_heads=4 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 2 ]] && grep -q -- '--config.num_heads is not a flag of peak' "$tmp/err.txt" ||
  fail "peak took a config field: $(cat "$tmp/err.txt")"
$bin help check | grep -q -- '^  --config.mask.kind=KIND_UNSPECIFIED|NONE|CAUSAL|SLIDING_WINDOW$' ||
  fail "help check does not list the config fields"

$bin bogus 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 2 ]] || fail "unknown command exited $rc, want 2"

echo 'num_heads: 12 num_kv_heads: 5 head_dim: 8 q_len: 4' > "$tmp/bad.textproto"
$bin cost --config="$tmp/bad.textproto" 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 1 ]] || fail "invalid config exited $rc, want 1"
[[ $(wc -l < "$tmp/err.txt") -eq 1 ]] || fail "expected one error line, got: $(cat "$tmp/err.txt")"
grep -q 'num_heads (12) must be a multiple of num_kv_heads (5)' "$tmp/err.txt" || fail "message: $(cat "$tmp/err.txt")"

$bin generate --config="$tmp/small.textproto" --backend=reference --layers=2 --prompt_len=6 \
  --new_tokens=3 --chunk=2 > "$tmp/gen.txt" || fail "generate exited $?"
grep -q 'tokens/s' "$tmp/gen.txt" || fail "generate printed no tokens/s"
grep -q ': ok' "$tmp/gen.txt" || fail "generate did not verify: $(cat "$tmp/gen.txt")"

ATTNKIT_PLUGIN_PATH=/nonexistent/libx.so $bin backends > "$tmp/b2.txt" 2>&1 || fail "a missing plugin must not stop the tool"
grep -q 'plugin failed: plugin /nonexistent/libx.so: cannot load' "$tmp/b2.txt" || fail "missing plugin not reported"
# A bundled CUDA plugin is listed, available or with the reason it is not.
if [[ -e backends/cuda/libattnkit_cuda.so ]]; then
  grep -qE '^cuda: (available|unavailable: .+)' "$tmp/backends.txt" || fail "bundled cuda plugin not listed"
  grep -qE '^cuda-cublas: (available|unavailable: .+)' "$tmp/backends.txt" || fail "cuda-cublas not listed"
fi
echo "PASS"
