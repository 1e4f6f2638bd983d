// What `auto` costs per call: SelectBackend (the tuning record's order for
// the call's shape class and K/V dtype, then the first backend that supports
// the problem) against a lookup by name, on a registry of the built-in CPU
// backends. The layer and the C API pay it on every attention call.
#include <benchmark/benchmark.h>

#include "backends/auto_select.h"
#include "backends/builtin.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

AttentionProblem Decode(DType kv) {
  AttentionProblem p = BasicProblem(1, 32, 8, 1, 4096, 128);
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.kv_dtype = kv;
  return p;
}

const BackendRegistry& Registry() {
  static BackendRegistry* r = [] {
    auto* registry = new BackendRegistry;
    RegisterBuiltinBackends(registry);
    return registry;
  }();
  return *r;
}

void BM_SelectAuto(benchmark::State& state, DType kv) {
  const AttentionProblem p = Decode(kv);
  for (auto _ : state) benchmark::DoNotOptimize(SelectBackend(Registry(), "auto", p));
}

void BM_AutoOrderOnly(benchmark::State& state) {
  const AttentionProblem p = Decode(DType::kF32);
  for (auto _ : state) benchmark::DoNotOptimize(AutoOrderFor(p));
}
BENCHMARK(BM_AutoOrderOnly);

void BM_RecordPathOnly(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(TuneRecordPath(2));
}
BENCHMARK(BM_RecordPathOnly);

void BM_SelectByName(benchmark::State& state) {
  const AttentionProblem p = Decode(DType::kF32);
  for (auto _ : state) benchmark::DoNotOptimize(SelectBackend(Registry(), "highway", p));
}

// A whole decode call through auto and by name, alternating per iteration
// pair so that both see the same machine state.
void BM_DecodeCall(benchmark::State& state, DType kv, bool via_auto) {
  const AttentionProblem p = Decode(kv);
  static ProblemData* data = nullptr;
  static DType data_kv = DType::kI32;
  if (data == nullptr || data_kv != kv) {
    delete data;
    data = new ProblemData(*ProblemData::Random(p, 1));
    data_kv = kv;
  }
  for (auto _ : state) {
    auto s = SelectBackend(Registry(), via_auto ? "auto" : "highway", p);
    RunInfo info;
    benchmark::DoNotOptimize(s->backend->Forward(p, data->args(), &info));
  }
}

BENCHMARK_CAPTURE(BM_DecodeCall, bf16_auto, DType::kBF16, true);
BENCHMARK_CAPTURE(BM_DecodeCall, bf16_by_name, DType::kBF16, false);
BENCHMARK_CAPTURE(BM_DecodeCall, bf16_auto_again, DType::kBF16, true);
BENCHMARK_CAPTURE(BM_SelectAuto, decode_f32, DType::kF32);
BENCHMARK_CAPTURE(BM_SelectAuto, decode_bf16_kv, DType::kBF16);
BENCHMARK(BM_SelectByName);

}  // namespace
}  // namespace attnkit

BENCHMARK_MAIN();
