#include "benchmarks/machine.h"

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
#include "benchmarks/machine_kernels.h"
#include "core/config_io.h"
#include "core/machine_info.h"
#include "core/tensor.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "hwy/highway.h"

namespace attnkit {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Streaming read over a buffer much larger than the caches, split over threads.
double MeasureReadGbps(int threads) {
  constexpr size_t kFloats = size_t{64} << 20;  // 256 MiB
  auto buffer = AlignedBuffer::Allocate(kFloats * sizeof(float));
  if (!buffer.ok()) return 0;
  auto* data = static_cast<float*>(buffer->data());
  std::fill(data, data + kFloats, 1.0f);  // first touch outside the timing
  const size_t chunk = kFloats / threads;
  double best = 0;
  for (int trial = 0; trial < 4; ++trial) {
    constexpr int kPasses = 8;
    std::vector<float> sums(threads);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int pass = 0; pass < kPasses; ++pass) sums[t] += StreamingSum(data + t * chunk, chunk);
      });
    }
    for (std::thread& th : pool) th.join();
    const double bytes = double(chunk) * threads * kPasses * sizeof(float);
    best = std::max(best, bytes / Seconds(start) * 1e-9);
    volatile float sink = sums[0];
    (void)sink;
  }
  return best;
}

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
  l.set_read_gbps(MeasureReadGbps(threads));
  l.set_sgemm_gflops(MeasureSgemmGflops(threads));
  l.set_openblas_core(openblas_get_corename());
  l.set_measured_at(NowUtc());
  return l;
}

MachineLimits LoadOrMeasureLimits(int threads, bool refresh, std::string* how) {
  const std::string path = CachePath("limits", absl::StrCat("-t", threads, ".textproto"));
  if (!refresh) {
    auto text = ReadFile(path);
    MachineLimits cached;
    if (text.ok() && google::protobuf::TextFormat::ParseFromString(*text, &cached) &&
        cached.threads() == threads && cached.peak_fma_gflops() > 0) {
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

}  // namespace attnkit
