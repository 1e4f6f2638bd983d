#!/usr/bin/env bash
# The CLI as a new user meets it (issue 16): version and per-command help
# that match the README, flags honoured or refused, --json for every report,
# messages that say what to do, the inputs people have (torch masks, float64,
# no config), tables that fit a terminal, a baseline from another machine
# refused, and the compare chart and page (rendered by headless Chromium).
# Arguments: README.md, VERSION.
set -uo pipefail
bin=$PWD/tools/attnkit
readme=$PWD/$1
version=$(tr -d '[:space:]' < "$2")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
export ATTNKIT_CACHE_DIR=$tmp/cache  # never the user's limits or tuning record
fail() { echo "FAIL: $*"; exit 1; }
py() { /usr/bin/python3 - "$@"; }
# json FILE EXPR: evaluates a Python expression over the parsed JSON `j`.
json() { py "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v)
sys.exit(0 if v else 1)
PY
}

# ---- version and help ---------------------------------------------------------
out=$($bin --version) || fail "--version exited $?"
[[ $out == "attnkit $version (commit "*")" ]] || fail "--version printed: $out"
for cmd in $($bin help | sed -n 's/^  \([a-z]*\)\( .*\)\{0,1\}$/\1/p'); do
  [[ $cmd == help ]] && continue
  $bin help "$cmd" > "$tmp/help_$cmd.txt" || fail "help $cmd exited $?"
  $bin "$cmd" --help | cmp -s - "$tmp/help_$cmd.txt" || fail "$cmd --help differs from help $cmd"
  grep -q '^examples:' "$tmp/help_$cmd.txt" || fail "help $cmd has no example"
  # Every flag the help lists has a default (or says it is required), and the
  # README's row for the command names it.
  flags=$(sed -n 's/^  --\([a-z_]*\) .*/\1/p' "$tmp/help_$cmd.txt")
  n_flags=$(wc -w <<< "$flags")
  n_defaults=$(grep -cE '^ +\((default: .*|required)\)$' "$tmp/help_$cmd.txt")
  [[ $n_flags -eq $n_defaults ]] || fail "help $cmd: $n_flags flags but $n_defaults defaults"
  row=$(grep -m1 "^| \`$cmd" "$readme") || fail "README has no row for $cmd"
  for f in $flags; do
    [[ $f == plugins ]] && continue  # one README paragraph covers --plugins for all
    grep -q -- "--$f" <<< "$row" || fail "README's $cmd row does not mention --$f"
  done
done
grep -q -- '--plugins' "$readme" || fail "README does not mention --plugins"

# ---- flags honoured or refused -----------------------------------------------
$bin cost --prompt_len=5 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 2 ]] || fail "cost --prompt_len exited $rc, want 2"
grep -q -- '--prompt_len is not a flag of cost' "$tmp/err.txt" || fail "$(cat "$tmp/err.txt")"
[[ $(wc -l < "$tmp/err.txt") -eq 1 ]] || fail "want one line: $(cat "$tmp/err.txt")"
$bin check --noallow_skip --backends=reference > /dev/null || fail "--noallow_skip refused"
$bin check --allow_skip > /dev/null 2> "$tmp/err.txt" && fail "--allow_skip without --backends passed"
grep -q -- '--allow_skip only applies to the backends --backends names' "$tmp/err.txt" ||
  fail "$(cat "$tmp/err.txt")"

cat > "$tmp/small.textproto" <<'PB'
name: "small gqa" num_heads: 4 num_kv_heads: 2 head_dim: 16 q_len: 9 mask { kind: CAUSAL }
PB
$bin inputs --config="$tmp/small.textproto" --dir="$tmp/in" > /dev/null || fail "inputs exited $?"
$bin run --config="$tmp/small.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" \
  --v="$tmp/in/v.npy" --out="$tmp/o.npy" --backend=highway --threads=1 > "$tmp/run.txt" ||
  fail "run exited $?"
grep -q 'threads=1' "$tmp/run.txt" || fail "run ignored --threads: $(cat "$tmp/run.txt")"
grep -q '(small gqa) on highway' "$tmp/run.txt" || fail "run does not name the config"
$bin generate --config="$tmp/small.textproto" --layers=1 --prompt_len=20 --new_tokens=2 \
  --threads=1 > "$tmp/gen.txt" || fail "generate exited $?"
grep -q 'threads=1' "$tmp/gen.txt" || fail "generate ignored --threads: $(cat "$tmp/gen.txt")"

# ---- --json everywhere --------------------------------------------------------
$bin backends --json=- > "$tmp/backends.json" || fail "backends --json exited $?"
json "$tmp/backends.json" "j['attnkit']['version'] == '$version' and any(b['name'] == 'highway' and 'f32' in b['capabilities']['dtypes'] for b in j['backends'])" > /dev/null || fail "backends json: $(head -c 600 "$tmp/backends.json")"
$bin backends --json > "$tmp/backends_bare.json" || fail "backends --json (bare) exited $?"
cmp -s "$tmp/backends.json" "$tmp/backends_bare.json" || fail "a bare --json printed other than --json=-: $(head -c 300 "$tmp/backends_bare.json")"
$bin check --config="$tmp/small.textproto" --backends=highway --json > "$tmp/check.json" || fail "check --json"
json "$tmp/check.json" "j['results'][0]['status'] == 'pass' and j['config']['num_heads'] == 4 and j['config']['memory_budget_bytes'] == 16 << 30" > /dev/null || fail "check json: $(head -c 600 "$tmp/check.json")"
$bin cost --config="$tmp/small.textproto" --json="$tmp/cost.json" > "$tmp/cost.txt" || fail "cost --json"
grep -q "wrote $tmp/cost.json" "$tmp/cost.txt" || fail "cost did not say it wrote the file"
json "$tmp/cost.json" "j['useful_flops'] > 0 and isinstance(j['bytes']['moved'], int)" > /dev/null || fail "cost json"
$bin generate --config="$tmp/small.textproto" --layers=1 --prompt_len=20 --new_tokens=2 \
  --json=- > "$tmp/gen.json" || fail "generate --json"
json "$tmp/gen.json" "j['verify']['ok'] and j['decode']['steps'] == 2 and j['prefill']['backend']" > /dev/null || fail "generate json"
$bin fuzz --count=3 --backends=highway --json=- > "$tmp/fuzz.json" || fail "fuzz --json"
json "$tmp/fuzz.json" "j['problems'] == 3 and j['mismatches'] == []" > /dev/null || fail "fuzz json"
$bin run --config="$tmp/small.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" \
  --v="$tmp/in/v.npy" --out="$tmp/o_json.npy" --backend=highway --json=- > "$tmp/run.json" || fail "run --json"
json "$tmp/run.json" "j['backend'] == 'highway' and j['name'] == 'small gqa' and j['wrote'] == ['$tmp/o_json.npy']" > /dev/null || fail "run json: $(cat "$tmp/run.json")"
$bin verify --config="$tmp/small.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" \
  --v="$tmp/in/v.npy" --o="$tmp/o_json.npy" --json=- > "$tmp/verify.json" || fail "verify --json"
json "$tmp/verify.json" "j['passed'] and j['checked'] > 0" > /dev/null || fail "verify json: $(cat "$tmp/verify.json")"
$bin peak --threads=1 --json=- > "$tmp/peak.json" || fail "peak --json"
json "$tmp/peak.json" "j['limits']['read_gbps'] > 0 and j['limits']['read_passes'] == 7 and j['machine']['threads'] == 1" > /dev/null || fail "peak json: $(cat "$tmp/peak.json")"
$bin tune --threads=1 --backends=highway,blas --json=- > "$tmp/tune.json" 2> /dev/null || fail "tune --json"
json "$tmp/tune.json" "'decode: q_len <= 16' in j['shape_classes'] and {e['kv_dtype'] for e in j['record']['entries']} >= {'f32', 'bf16'}" > /dev/null || fail "tune json: $(cat "$tmp/tune.json")"

# ---- messages that say what to do ----------------------------------------------
echo 'num_heads: 4 head_dim: 16 q_len: 9 blocked_mask: true' > "$tmp/masked.textproto"
$bin run --config="$tmp/masked.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" \
  --v="$tmp/in/v.npy" --out="$tmp/o.npy" 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 1 ]] && grep -q 'pass --mask=FILE' "$tmp/err.txt" || fail "blocked_mask: $(cat "$tmp/err.txt")"
record=$(json "$tmp/tune.json" "j['path']")
echo 'entries { shape_class: ' > "$record"
$bin run --config="$tmp/small.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" \
  --v="$tmp/in/v.npy" --out="$tmp/o.npy" --threads=1 > "$tmp/run2.txt" 2> "$tmp/err.txt" ||
  fail "run with a corrupt record exited $?"
grep -q 'is unreadable (line 2.*); using the static order' "$tmp/run2.txt" ||
  fail "corrupt record: $(cat "$tmp/run2.txt")"
[[ ! -s $tmp/err.txt ]] || fail "corrupt record logged: $(cat "$tmp/err.txt")"
plugin=$PWD/backends/plugins/libattnkit_reference.so
$bin backends --plugins="$plugin:$plugin" > "$tmp/b.txt" 2> "$tmp/err.txt" || fail "backends"
[[ ! -s $tmp/err.txt ]] || fail "a plugin named twice: $(cat "$tmp/err.txt")"
mkdir -p "$tmp/away" && cp "$bin" "$tmp/away/attnkit"
env -u RUNFILES_DIR -u TEST_SRCDIR -u RUNFILES_MANIFEST_FILE "$tmp/away/attnkit" backends \
  > "$tmp/away.txt" 2>&1 || fail "a copied binary exited $?"
grep -q "from: linked into attnkit (no plugin for it in .*$tmp/away/plugins)" "$tmp/away.txt" ||
  fail "copied binary does not say where it looked: $(cat "$tmp/away.txt")"

# ---- inputs people have -------------------------------------------------------
py "$tmp" <<'PY' || fail "making inputs"
import sys, numpy as np
d = sys.argv[1]
mask = np.random.default_rng(0).random((9, 9)) < 0.3
mask[:, 0] = False
np.save(f"{d}/blocked.npy", mask)           # attnkit: True = blocked
np.save(f"{d}/keep.npy", ~mask)             # torch: True = take part
for n in "qkv":
    np.save(f"{d}/{n}64.npy", np.load(f"{d}/in/{n}.npy").astype(np.float64))
PY
echo 'num_heads: 4 num_kv_heads: 2 head_dim: 16 q_len: 9' > "$tmp/nomask.textproto"
common=(--config="$tmp/nomask.textproto" --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" --v="$tmp/in/v.npy" --backend=highway)
$bin run "${common[@]}" --mask="$tmp/blocked.npy" --out="$tmp/o_attnkit.npy" > /dev/null || fail "run --mask"
$bin run "${common[@]}" --mask="$tmp/keep.npy" --mask_convention=torch --out="$tmp/o_torch.npy" \
  > "$tmp/torch.txt" || fail "run --mask_convention=torch"
cmp -s "$tmp/o_attnkit.npy" "$tmp/o_torch.npy" || fail "torch mask convention differs"
grep -q 'torch convention' "$tmp/torch.txt" || fail "no note on the mask convention"
$bin run --config="$tmp/nomask.textproto" --q="$tmp/q64.npy" --k="$tmp/k64.npy" --v="$tmp/v64.npy" \
  --backend=highway --out="$tmp/o64.npy" > "$tmp/f64.txt" || fail "float64 run exited $?"
grep -q 'note: --q=.*float64 converted to float32' "$tmp/f64.txt" || fail "no float64 note"
$bin run --q="$tmp/in/q.npy" --k="$tmp/in/k.npy" --v="$tmp/in/v.npy" --out="$tmp/o_inf.npy" \
  --backend=highway > "$tmp/inferred.txt" || fail "run without --config exited $?"
grep -q 'config inferred from the arrays' "$tmp/inferred.txt" || fail "no inferred config"
grep -q 'num_heads: 4' "$tmp/inferred.txt" && grep -q 'num_kv_heads: 2' "$tmp/inferred.txt" ||
  fail "inferred config: $(cat "$tmp/inferred.txt")"
echo 'num_heads: 4 head_dim: 16' > "$tmp/unmasked.textproto"
$bin generate --config="$tmp/unmasked.textproto" --layers=1 --prompt_len=8 --new_tokens=1 \
  > "$tmp/gen2.txt" || fail "generate exited $?"
grep -q 'mask  *causal (the config sets none' "$tmp/gen2.txt" || fail "generate: $(cat "$tmp/gen2.txt")"

# ---- tables, baseline, chart, page -----------------------------------------------
$bin check --config="$tmp/small.textproto" > "$tmp/check.txt" || fail "check"
awk 'length > 120 { print; exit 1 }' "$tmp/check.txt" || fail "check is wider than 120 columns"
$bin compare --config="$tmp/small.textproto" --backends=highway,reference --threads=1 \
  --json="$tmp/c.json" --svg="$tmp/c.svg" --html="$tmp/c.html" > "$tmp/compare.txt" 2> /dev/null ||
  fail "compare exited $?"
grep -v '^wrote ' "$tmp/compare.txt" | awk 'length > 120 { print; exit 1 }' ||
  fail "compare is wider than 120 columns"
grep -qE '^  auto +[0-9.]+ ' "$tmp/compare.txt" || fail "compare has no auto row: $(cat "$tmp/compare.txt")"
if command -v rsvg-convert > /dev/null; then
  [[ -s $tmp/c.png ]] || fail "no PNG twin of the chart"
fi
py "$tmp/c.json" "$tmp/other.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["machine"]["cpu_model"] = "Some Other CPU"
json.dump(j, open(sys.argv[2], "w"))
PY
$bin compare --config="$tmp/small.textproto" --backends=highway --threads=1 \
  --baseline="$tmp/other.json" > /dev/null 2> "$tmp/err.txt"; rc=$?
[[ $rc -eq 1 ]] && grep -q 'was measured on Some Other CPU' "$tmp/err.txt" ||
  fail "baseline from another machine: exit $rc, $(cat "$tmp/err.txt")"
if command -v chromium > /dev/null; then
  HOME=$tmp/chromium-home timeout 120 chromium --headless --no-sandbox --disable-gpu \
    --disable-dev-shm-usage --dump-dom "file://$tmp/c.html" > "$tmp/dom.html" 2> /dev/null ||
    fail "chromium could not render the page"
  py "$tmp/dom.html" "$tmp/c.json" <<'PY' || fail "the rendered page disagrees with the report"
import html.parser, json, sys

class Rows(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.table = None
        self.rows, self.svg = [], False
    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.table = dict(attrs).get("id")
        if tag == "svg":
            self.svg = True
        if tag == "tr" and self.table == "results":
            self.rows.append([])
        if tag == "td" and self.table == "results":
            self.rows[-1].append("")
    def handle_data(self, data):
        if self.table == "results" and self.rows and self.rows[-1] is not None and self.lasttag == "td":
            self.rows[-1][-1] += data

p = Rows()
p.feed(open(sys.argv[1]).read())
rows = [r for r in p.rows if r]
report = json.load(open(sys.argv[2]))
want = [(res["backend"], res["status"], res["median_s"]) for prob in report["problems"]
        for res in prob["results"]]
assert p.svg, "no chart in the rendered page"
assert len(rows) == len(want), (rows, want)
for row, (backend, status, median) in zip(rows, want):
    assert row[1] == backend and row[2] == status, (row, backend, status)
    if status == "ok":
        # The page rounds to 3 decimals in ms and the report to 3 significant
        # digits: a median near a tie (9.35e-05 s shown as 0.093) is still right.
        assert abs(float(row[3]) - median * 1e3) <= 5e-4 + 5e-3 * median * 1e3 + 1e-9, (row, median)
print("rendered rows:", len(rows))
PY
fi
echo "PASS"
