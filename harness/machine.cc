#include "harness/machine.h"

#include <cblas.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/tensor.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "harness/machine_kernels.h"
#include "harness/paired_read.h"
#include "hwy/highway.h"
#include "io/config_io.h"
#include "io/json_writer.h"
#include "io/proto_json.h"
#include "platform/machine_info.h"
#include "platform/median.h"

namespace attnkit {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ReadBandwidth MeasureReadBandwidth(int threads, int passes) {
  ReadBandwidth r;
  r.llc_bytes = LastLevelCacheBytes();
  // Four times the last-level cache, so no pass can be served from it; at
  // least 256 MiB and at most 2 GiB.
  const size_t bytes =
      std::clamp<size_t>(4 * static_cast<size_t>(r.llc_bytes), size_t{256} << 20, size_t{2} << 30);
  // The loop compare pairs with memory-bound problems (paired_read.h).
  PairedReadLoop loop(threads);
  if (!loop.Resize(static_cast<int64_t>(bytes))) return r;
  r.buffer_bytes = loop.bytes();
  const double gb = static_cast<double>(loop.bytes()) * 1e-9;
  loop.TimeOnePass();  // warm-up
  std::vector<double> rates;
  for (int pass = 0; pass < passes; ++pass) rates.push_back(gb / loop.TimeOnePass());
  std::sort(rates.begin(), rates.end());
  r.passes = passes;
  r.min_gbps = rates.front();
  r.max_gbps = rates.back();
  r.median_gbps = Median(rates);
  return r;
}

namespace {

double MeasureSgemmGflops(int threads) {
  constexpr int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.0f);
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);  // warm-up
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * double(n) / Seconds(start) * 1e-9);
  }
  return best;
}

}  // namespace

MachineFingerprint Fingerprint(int threads) {
  MachineFingerprint f;
  f.set_cpu_model(CpuModel());
  f.set_cores(static_cast<int>(std::thread::hardware_concurrency()));
  f.set_threads(threads);
  for (int64_t t : AvailableHighwayTargets()) f.add_highway_targets(HighwayTargetName(t));
  f.set_highway_dispatched(DispatchedHighwayTarget());
  f.set_openblas_core(openblas_get_corename());
  f.set_openblas_config(std::string(absl::StripAsciiWhitespace(openblas_get_config())));
  f.set_compiler(__VERSION__);
  f.set_highway_version(absl::StrCat(HWY_MAJOR, ".", HWY_MINOR, " (Debian libhwy-dev)"));
  f.set_abseil_version(absl::StrCat(ABSL_LTS_RELEASE_VERSION, ".", ABSL_LTS_RELEASE_PATCH_LEVEL));
  f.set_protobuf_version(google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION));
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  f.set_openblas_coretype_env(coretype != nullptr ? coretype : "(unset)");
  return f;
}

MachineLimits MeasureLimits(int threads) {
  MachineLimits l;
  l.set_cpu_model(CpuModel());
  l.set_threads(threads);
  double best = 0;
  for (int64_t target : AvailableHighwayTargets()) {
    const double g = MeasureFmaGflops(target, threads);
    (*l.mutable_fma_gflops())[HighwayTargetName(target)] = g;
    if (g > best) {
      best = g;
      l.set_best_target(HighwayTargetName(target));
    }
  }
  l.set_peak_fma_gflops(best);
  l.set_peak_bf16_dot_gflops(MeasureBF16DotGflops(threads));
  l.set_peak_amx_bf16_gflops(MeasureAmxBF16Gflops(threads));
  l.set_peak_amx_bf16_min_gflops(l.peak_amx_bf16_gflops());
  l.set_peak_passes(1);
  l.set_peak_fma_min_gflops(l.peak_fma_gflops());
  l.set_peak_bf16_dot_min_gflops(l.peak_bf16_dot_gflops());
  const ReadBandwidth read = MeasureReadBandwidth(threads);
  l.set_read_gbps(read.median_gbps);
  l.set_read_gbps_min(read.min_gbps);
  l.set_read_gbps_max(read.max_gbps);
  l.set_read_passes(read.passes);
  l.set_read_buffer_bytes(read.buffer_bytes);
  l.set_llc_bytes(read.llc_bytes);
  l.set_sgemm_gflops(MeasureSgemmGflops(threads));
  l.set_openblas_core(openblas_get_corename());
  l.set_measured_at(NowUtc());
  return l;
}

void AddPeakPass(int threads, MachineLimits* limits, int trials) {
  // The best target's loop, a quarter of `peak`'s length per trial.
  int64_t best_target = 0;
  for (int64_t target : AvailableHighwayTargets()) {
    if (HighwayTargetName(target) == limits->best_target()) best_target = target;
  }
  if (best_target == 0) return;  // limits of another machine (a test's)
  const double fma = MeasureFmaGflops(best_target, threads, trials, kFmaLoopIterations / 4);
  const double bf16 = limits->peak_bf16_dot_gflops() > 0
                          ? MeasureBF16DotGflops(threads, trials, kBF16DotLoopIterations / 4)
                          : 0.0;
  const double amx = limits->peak_amx_bf16_gflops() > 0
                         ? MeasureAmxBF16Gflops(threads, trials, kAmxBF16LoopIterations / 4)
                         : 0.0;
  if (limits->peak_passes() == 0) {  // a cache from before the spread was kept
    limits->set_peak_fma_min_gflops(limits->peak_fma_gflops());
    limits->set_peak_bf16_dot_min_gflops(limits->peak_bf16_dot_gflops());
    limits->set_peak_passes(1);
  }
  limits->set_peak_passes(limits->peak_passes() + 1);
  limits->set_peak_fma_gflops(std::max(limits->peak_fma_gflops(), fma));
  limits->set_peak_fma_min_gflops(std::min(limits->peak_fma_min_gflops(), fma));
  if (bf16 > 0) {
    limits->set_peak_bf16_dot_gflops(std::max(limits->peak_bf16_dot_gflops(), bf16));
    limits->set_peak_bf16_dot_min_gflops(std::min(limits->peak_bf16_dot_min_gflops(), bf16));
  }
  if (amx > 0) {
    limits->set_peak_amx_bf16_gflops(std::max(limits->peak_amx_bf16_gflops(), amx));
    limits->set_peak_amx_bf16_min_gflops(std::min(limits->peak_amx_bf16_min_gflops(), amx));
  }
  (*limits->mutable_fma_gflops())[limits->best_target()] = limits->peak_fma_gflops();
}

MachineLimits LoadOrMeasureLimits(int threads, bool refresh, std::string* how) {
  const std::string path = CachePath("limits", absl::StrCat("-t", threads, ".textproto"));
  if (!refresh) {
    auto text = ReadFile(path);
    MachineLimits cached;
    if (text.ok() && google::protobuf::TextFormat::ParseFromString(*text, &cached) &&
        cached.threads() == threads && cached.peak_fma_gflops() > 0 &&
        cached.read_passes() > 0 &&  // older caches lack the read spread: re-measure
        // and the AMX peak (a bf16 problem's limit where the CPU has AMX)
        (cached.peak_amx_bf16_gflops() > 0 || !HaveAmxBF16Peak())) {
      *how = absl::StrCat("cached in ", path, " (measured ", cached.measured_at(),
                          "; refresh with `attnkit peak --refresh`)");
      return cached;
    }
  }
  MachineLimits limits = MeasureLimits(threads);
  std::string text;
  google::protobuf::TextFormat::PrintToString(limits, &text);
  // The cache is a convenience: failing to write it is not an error.
  const bool saved = EnsureCacheDir() && WriteFileAtomically(path, text).ok();
  *how =
      saved ? absl::StrCat("measured now, saved to ", path) : "measured now (cache not writable)";
  return limits;
}

std::string MachineLimitsJson(const MachineFingerprint& machine, const MachineLimits& limits,
                              const std::string& how) {
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("how", how);
  w.Key("machine").Raw(ProtoToJson(machine));
  w.Key("limits").Raw(ProtoToJson(limits));
  w.EndObject();
  return w.str();
}

}  // namespace attnkit
