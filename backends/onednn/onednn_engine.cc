#include "backends/onednn/onednn_engine.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "platform/amx.h"

namespace attnkit {
namespace onednn {
namespace {

using dt = dnnl::memory::data_type;

const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

// One GEMM as a matmul: its shape, operand layouts, types and the two
// scalars (baked into the primitive: alpha as an output scale, beta as a sum
// post-op). A u8 GEMM (U8S8DotBatch) is `batch` products: a and c dense
// [batch, m, k] and [batch, m, n], b's entries stride_b apart.
struct Key {
  int64_t m, n, k, lda, ldb, ldc;
  bool trans_a, trans_b;
  dt a_type, c_type;
  uint32_t alpha_bits, beta_bits;
  int64_t batch = 1, stride_b = 0;

  template <typename H>
  friend H AbslHashValue(H h, const Key& x) {
    return H::combine(std::move(h), x.m, x.n, x.k, x.lda, x.ldb, x.ldc, x.trans_a, x.trans_b,
                      static_cast<int>(x.a_type), static_cast<int>(x.c_type), x.alpha_bits,
                      x.beta_bits, x.batch, x.stride_b);
  }
  friend bool operator==(const Key& x, const Key& y) {
    return x.m == y.m && x.n == y.n && x.k == y.k && x.lda == y.lda && x.ldb == y.ldb &&
           x.ldc == y.ldc && x.trans_a == y.trans_a && x.trans_b == y.trans_b &&
           x.a_type == y.a_type && x.c_type == y.c_type && x.alpha_bits == y.alpha_bits &&
           x.beta_bits == y.beta_bits && x.batch == y.batch && x.stride_b == y.stride_b;
  }
};

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

struct Entry {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
  std::atomic<int64_t> last_use{0};
};

// Row-major [rows, cols] with row stride ld, or its transpose (stored
// [cols, rows]) when `trans`.
dnnl::memory::desc Matrix(int64_t rows, int64_t cols, int64_t ld, bool trans, dt type) {
  return dnnl::memory::desc({rows, cols}, type,
                            trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
}

// oneDNN 2.6 dispatches to AMX where CPUID shows it but does not ask Linux
// for the tile state, so its first AMX kernel faulted with SIGILL in a
// process where nothing else had asked (Intel Xeon with AMX: a bf16
// backward's brgemm). Asked here before oneDNN's first primitive; where
// Linux refuses, oneDNN is capped below AMX (set_max_cpu_isa works only
// before its first use), and the note says so.
// A cap that fails (oneDNN already used, or ONEDNN_MAX_CPU_ISA set) leaves
// the engine unusable: AmxFaults().
const std::string& AmxNote() {
  static const std::string* note = [] {
    if (!CpuHasAmxBF16() || AmxTilesGranted()) return new std::string();
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
    } catch (const dnnl::error&) {
    }
    if (dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx) {
      return new std::string(
          "Linux refused the AMX tile state (arch_prctl), and oneDNN could not be capped below "
          "AMX, whose first instruction would fault");
    }
    return new std::string(
        "Linux refused the AMX tile state (arch_prctl), so oneDNN is capped at "
        "avx512_core_bf16");
  }();
  return *note;
}
bool AmxFaults() {
  return !AmxNote().empty() && dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
}

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = [] {
    AmxNote();
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

// A stream and a scratchpad for one GEMM at a time: taken from the engine's
// free list by a calling thread for one GEMM and handed back after it, so
// the list holds as many as GEMMs ever ran at once and their scratchpads are
// touched once and reused. (Not thread_local: LeakSanitizer's tracer faults
// on the dynamic TLS of a dlopen'ed plugin's pool threads at exit.)
struct Slot {
  std::unique_ptr<dnnl::stream> stream;
  std::vector<char> scratchpad;
};

// oneDNN 2.6.3's AMX kernels fault (SIGILL: a tdpbf16ps or tdpbusd on
// tiles it configured with unequal shapes) where a row of the reduction
// holds 125 to 127 bytes and M has a tail past 32 rows: bf16 k = 63, int8
// k = 125..127 (Intel Xeon with AMX, about 8,800 matmuls: bf16 of M 1..129,
// N 1..64, all four layouts, every k up to 140 and even k up to 520; int8
// of k up to 520). No k whose bytes are a multiple of 4 ever did. So
// on AMX the GEMMs run the first k - r columns in oneDNN, r the fewest that
// leave a multiple of 4 bytes, and add the last r columns' products here.
int64_t AmxSafeK(bool amx, int64_t k, int64_t value_bytes) {
  if (!amx) return k;
  const int64_t per4 = 4 / value_bytes;  // values in 4 bytes
  return k - k % per4;
}

}  // namespace

struct OneDnnEngine::State {
  EngineOptions options;
  std::atomic<int> gemm_threads{1};
  bool int8_exact = false;
  std::string int8_note;
  bool u8_exact = false;
  std::string u8_note;
  bool bf16 = false;
  std::string bf16_note;
  bool amx = false;  // oneDNN dispatches to AMX here (AmxSafeK)

  mutable absl::Mutex mu;
  absl::flat_hash_map<Key, std::shared_ptr<Entry>, absl::Hash<Key>> cache ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> clock{0};
  CacheStats stats ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);
  absl::Mutex slots_mu;
  std::vector<std::unique_ptr<Slot>> free_slots ABSL_GUARDED_BY(slots_mu);

  std::unique_ptr<Slot> TakeSlot() {
    {
      absl::MutexLock lock(&slots_mu);
      if (!free_slots.empty()) {
        std::unique_ptr<Slot> slot = std::move(free_slots.back());
        free_slots.pop_back();
        return slot;
      }
    }
    auto slot = std::make_unique<Slot>();
    slot->stream = std::make_unique<dnnl::stream>(CpuEngine());
    return slot;
  }

  void ReturnSlot(std::unique_ptr<Slot> slot) {
    absl::MutexLock lock(&slots_mu);
    free_slots.push_back(std::move(slot));
  }

  void RecordError(const std::string& what) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = absl::InternalError(what);
  }

  // The message of the error recorded so far, cleared: a probe's primitive
  // that oneDNN cannot create is a missing capability, not a call's error.
  std::string TakeErrorMessage() {
    absl::MutexLock lock(&mu);
    std::string message(error.message());
    error = absl::OkStatus();
    return message;
  }

  // The cached primitive for `key`, created on a miss; null (and the error
  // recorded) when oneDNN cannot create it.
  std::shared_ptr<Entry> Get(const Key& key, dt b_type) {
    const int64_t now = clock.fetch_add(1, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&mu);
      auto it = cache.find(key);
      if (it != cache.end()) {
        ++stats.hits;
        it->second->last_use.store(now, std::memory_order_relaxed);
        return it->second;
      }
    }
    // Created outside the lock: two threads may both create a new shape's
    // primitive; the second one's is dropped.
    const auto start = std::chrono::steady_clock::now();
    auto entry = std::make_shared<Entry>();
    try {
      // Batched u8: c dense, a's rows lda apart (dense where lda == k, as
      // U8S8DotBatch asks but where AmxSafeK peels k; oneDNN 2.6 runs its
      // brgemm on dense operands).
      if (key.a_type == dt::u8) {
        using dims = dnnl::memory::dims;
        entry->a = dnnl::memory::desc({key.batch, key.m, key.k}, dt::u8,
                                      dims{key.m * key.lda, key.lda, 1});
        entry->b =
            dnnl::memory::desc({key.batch, key.k, key.n}, b_type, dims{key.stride_b, key.ldb, 1});
        entry->c = dnnl::memory::desc({key.batch, key.m, key.n}, key.c_type,
                                      dims{key.m * key.n, key.n, 1});
      } else {
        entry->a = Matrix(key.m, key.k, key.lda, key.trans_a, key.a_type);
        entry->b = Matrix(key.k, key.n, key.ldb, key.trans_b, b_type);
        entry->c = Matrix(key.m, key.n, key.ldc, false, key.c_type);
      }
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      float alpha, beta;
      std::memcpy(&alpha, &key.alpha_bits, sizeof(alpha));
      std::memcpy(&beta, &key.beta_bits, sizeof(beta));
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      if (beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(beta);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(entry->a, entry->b, entry->c), attr,
                                      CpuEngine());
      entry->scratchpad = pd.scratchpad_desc();
      entry->scratchpad_bytes = entry->scratchpad.get_size();
      entry->primitive = dnnl::matmul(pd);
    } catch (const dnnl::error& e) {
      RecordError(absl::StrFormat("oneDNN could not create a %dx%dx%d matmul: %s", key.m, key.n,
                                  key.k, e.what()));
      return nullptr;
    }
    entry->last_use.store(now, std::memory_order_relaxed);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    absl::MutexLock lock(&mu);
    ++stats.misses;
    stats.create_seconds += seconds;
    auto [it, inserted] = cache.emplace(key, entry);
    if (!inserted) return it->second;
    if (cache.size() > options.max_cached_primitives) {
      auto oldest = cache.begin();
      for (auto i = cache.begin(); i != cache.end(); ++i) {
        if (i->second->last_use.load(std::memory_order_relaxed) <
            oldest->second->last_use.load(std::memory_order_relaxed)) {
          oldest = i;
        }
      }
      if (oldest->second != entry) {  // users keep their shared_ptr alive
        cache.erase(oldest);
        ++stats.evictions;
      }
    }
    return entry;
  }

  // Runs `entry` on the calling thread, with a slot's stream and scratchpad
  // and `gemm_threads` OpenMP threads (omp_set_num_threads sets the calling
  // thread's own ICV; setting it each time costs a store).
  void Execute(const Entry& entry, const void* a, const void* b, void* c) {
    omp_set_num_threads(gemm_threads.load(std::memory_order_relaxed));
    std::unique_ptr<Slot> t;
    try {
      t = TakeSlot();
      if (t->scratchpad.size() < entry.scratchpad_bytes) {
        t->scratchpad.resize(entry.scratchpad_bytes);
      }
      const dnnl::engine& e = CpuEngine();
      dnnl::memory am(entry.a, e, const_cast<void*>(a));
      dnnl::memory bm(entry.b, e, const_cast<void*>(b));
      dnnl::memory cm(entry.c, e, c);
      dnnl::memory sm(entry.scratchpad, e, t->scratchpad.data());
      entry.primitive.execute(*t->stream, {{DNNL_ARG_SRC, am},
                                           {DNNL_ARG_WEIGHTS, bm},
                                           {DNNL_ARG_DST, cm},
                                           {DNNL_ARG_SCRATCHPAD, sm}});
      t->stream->wait();
    } catch (const dnnl::error& err) {
      RecordError(absl::StrFormat("oneDNN matmul failed: %s", err.what()));
    }
    if (t != nullptr) ReturnSlot(std::move(t));
  }

  // Whether the s8 x s8 -> s32 GEMM sums exactly here, on operands at the
  // ends of the int8 range (see HasInt8Dot in the header).
  void ProbeInt8() {
    constexpr int64_t kM = 4, kN = 8, kK = 128;
    std::vector<int8_t> a(kM * kK), b(kN * kK);
    for (int64_t i = 0; i < kM * kK; ++i) a[i] = (i / kK) % 2 == 0 ? 127 : -127;
    for (int64_t i = 0; i < kN * kK; ++i) b[i] = (i / kK) % 3 == 0 ? -128 : 127;
    std::vector<int32_t> c(kM * kN, 0);
    Key key{kM, kN, kK, kK, kK, kN, false, true, dt::s8, dt::s32, Bits(1.0f), Bits(0.0f)};
    std::shared_ptr<Entry> entry = Get(key, dt::s8);
    if (entry == nullptr) {
      int8_note =
          absl::StrFormat("oneDNN has no s8 x s8 -> s32 matmul here (%s)", TakeErrorMessage());
      return;
    }
    Execute(*entry, a.data(), b.data(), c.data());
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        int64_t want = 0;
        for (int64_t x = 0; x < kK; ++x) want += int64_t{a[i * kK + x]} * b[j * kK + x];
        if (want != c[i * kN + j]) {
          int8_note = absl::StrFormat(
              "oneDNN's int8 GEMM is not exact on this CPU (%s: a %d-term dot product of "
              "%d and %d gave %d, not %d; x86 int8 kernels without VNNI sum products in "
              "saturating 16-bit lanes)",
              IsaName(dnnl::get_effective_cpu_isa()), kK, a[i * kK], b[j * kK], c[i * kN + j],
              want);
          return;
        }
      }
    }
    int8_exact = true;
  }

  // Whether the batched u8 x s8 -> s32 GEMM sums exactly here, on weights
  // of 255 against the ends of the int8 range (without VNNI, oneDNN's x86
  // kernels saturate 255 * 127 + 255 * 127 in 16-bit lanes), in the shapes
  // attention_block.cc asks for: full 64-key blocks in a batch, and one
  // partial block of one row (oneDNN picks its kernel per shape).
  void ProbeU8() {
    struct Shape {
      int64_t batch, m, k;
    };
    for (const Shape& shape : {Shape{2, 4, 64}, Shape{1, 1, 23}}) {
      const int64_t kN = 16, kLdb = kN + 8;
      std::vector<uint8_t> a(shape.batch * shape.m * shape.k);
      std::vector<int8_t> b(shape.batch * shape.k * kLdb);
      for (size_t i = 0; i < a.size(); ++i) a[i] = i % 5 == 0 ? 254 : 255;
      for (size_t i = 0; i < b.size(); ++i) b[i] = (i / kLdb) % 3 == 0 ? -128 : 127;
      std::vector<int32_t> c(shape.batch * shape.m * kN, 0);
      Key key{shape.m, kN,    shape.k, shape.k, kLdb,       kN,
              false,   false, dt::u8,  dt::s32, Bits(1.0f), Bits(0.0f)};
      key.batch = shape.batch;
      key.stride_b = shape.k * kLdb;
      std::shared_ptr<Entry> entry = Get(key, dt::s8);
      if (entry == nullptr) {
        u8_note =
            absl::StrFormat("oneDNN has no u8 x s8 -> s32 matmul here (%s)", TakeErrorMessage());
        return;
      }
      Execute(*entry, a.data(), b.data(), c.data());
      for (int64_t x = 0; x < shape.batch; ++x) {
        for (int64_t i = 0; i < shape.m; ++i) {
          for (int64_t j = 0; j < kN; ++j) {
            int64_t want = 0;
            for (int64_t y = 0; y < shape.k; ++y) {
              want += int64_t{a[(x * shape.m + i) * shape.k + y]} *
                      b[x * shape.k * kLdb + y * kLdb + j];
            }
            const int32_t got = c[(x * shape.m + i) * kN + j];
            if (want != got) {
              u8_note = absl::StrFormat(
                  "oneDNN's u8 x s8 GEMM is not exact on this CPU (%s: a %d-term sum gave %d, "
                  "not %d)",
                  IsaName(dnnl::get_effective_cpu_isa()), shape.k, got, want);
              return;
            }
          }
        }
      }
    }
    u8_exact = true;
  }
};

namespace {

// bf16 operands of small integers (exact in bf16 and in any f32 sum).
uint16_t SmallBf16(int64_t i) { return BF16FromF32(static_cast<float>(i % 7) - 3.0f); }

}  // namespace

void OneDnnEngine::ProbeBf16() {
  State& s = *state_;
  constexpr int64_t kM = 3, kN = 5, kK = 64;
  std::vector<uint16_t> a(kM * kK), b(kN * kK);
  for (int64_t i = 0; i < kM * kK; ++i) a[i] = SmallBf16(i);
  for (int64_t i = 0; i < kN * kK; ++i) b[i] = SmallBf16(3 * i + 1);
  std::vector<float> c(kM * kN, 0.0f);
  const Key key{kM, kN, kK, kK, kK, kN, false, true, dt::bf16, dt::f32, Bits(1.0f), Bits(0.0f)};
  std::shared_ptr<Entry> entry = s.Get(key, dt::bf16);
  if (entry == nullptr) {
    s.TakeErrorMessage();  // the note below says what is missing
    s.bf16_note = absl::StrFormat("oneDNN %s has no bf16 matmul on %s", Version(), Isa());
    return;
  }
  s.Execute(*entry, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      float want = 0;
      for (int64_t x = 0; x < kK; ++x)
        want += F32FromBF16(a[i * kK + x]) * F32FromBF16(b[j * kK + x]);
      if (c[i * kN + j] != want) {
        s.bf16_note = absl::StrFormat("oneDNN's bf16 matmul gave %g, not %g, in its self-test",
                                      c[i * kN + j], want);
        return;
      }
    }
  }
  s.bf16 = true;
}

absl::StatusOr<std::unique_ptr<OneDnnEngine>> OneDnnEngine::Create(const EngineOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  state->options.max_cached_primitives = std::max<size_t>(options.max_cached_primitives, 1);
  try {
    CpuEngine();  // first: it may cap oneDNN's ISA (AmxNote)
    state->amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  } catch (const dnnl::error& e) {
    return absl::UnavailableError(absl::StrFormat("oneDNN has no CPU engine: %s", e.what()));
  }
  if (AmxFaults()) return absl::UnavailableError(AmxNote());
  std::unique_ptr<OneDnnEngine> engine(new OneDnnEngine(std::move(state)));
  // One small f32 product: a library that cannot create it is unusable.
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0, 0, 0, 0};
  engine->Sgemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  if (absl::Status s = engine->TakeError(); !s.ok()) {
    return absl::UnavailableError(s.message());
  }
  if (c[0] != 1 || c[1] != 2 || c[2] != 3 || c[3] != 4) {
    return absl::UnavailableError("oneDNN's f32 matmul gave a wrong product in its self-test");
  }
  engine->state_->ProbeInt8();
  engine->state_->ProbeU8();
  engine->ProbeBf16();
  return engine;
}

OneDnnEngine::OneDnnEngine(std::unique_ptr<State> state) : state_(std::move(state)) {}
OneDnnEngine::~OneDnnEngine() = default;

std::string OneDnnEngine::Isa() const { return IsaName(dnnl::get_effective_cpu_isa()); }

std::string OneDnnEngine::Version() {
  const dnnl_version_t* v = dnnl::version();
  return absl::StrFormat("%d.%d.%d", v->major, v->minor, v->patch);
}

std::string OneDnnEngine::Library() const {
  return absl::StrFormat("oneDNN %s (%s)", Version(), Isa());
}

std::string OneDnnEngine::KernelTag() const { return absl::StrFormat("onednn/%s", Isa()); }

std::string OneDnnEngine::Remarks() const {
  const State& s = *state_;
  return absl::StrCat(s.bf16 ? "bf16 products in bf16 (Q.K when Q is bf16 or FAST; P.V under FAST; "
                               "in the all-bf16 backward S and dP, and under FAST dV, dK and dQ)"
                             : absl::StrCat("bf16 K/V widened to f32: ", s.bf16_note),
                      "; f16 K/V widened to f32 (oneDNN 2.6's f16 matmul is not used)",
                      s.int8_exact ? "; int8 Q.K as exact s8 GEMMs under FAST"
                                   : absl::StrCat("; int8 K dequantized to f32: ", s.int8_note),
                      s.u8_exact ? "; int8 P.V as exact u8 weights x s8 V GEMMs under FAST"
                                 : absl::StrCat("; int8 V dequantized to f32: ", s.u8_note),
                      AmxNote().empty() ? "" : absl::StrCat("; ", AmxNote()));
}

bool OneDnnEngine::HasGemm16(DType type) const { return type == DType::kBF16 && state_->bf16; }

std::string OneDnnEngine::Bf16Note() const { return state_->bf16_note; }

int64_t OneDnnEngine::PreferredRows16() const {
  return state_->amx && state_->bf16 ? kAmxRows16 : 0;
}

void OneDnnEngine::Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t* a, int64_t lda, const uint16_t* b,
                          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    Sgemm(false, false, m, n, 0, alpha, nullptr, 1, nullptr, 1, beta, c, ldc);
    return;
  }
  if (type != DType::kBF16 || !state_->bf16) {
    state_->RecordError(
        absl::StrFormat("Gemm16 asked for %s, which this engine does not take", DTypeName(type)));
    return;
  }
  const int64_t k0 = AmxSafeK(state_->amx, k, 2);
  if (k0 == 0) {
    Sgemm(false, false, m, n, 0, alpha, nullptr, 1, nullptr, 1, beta, c, ldc);
  } else {
    const Key key{m,       n,       k0,       lda,     ldb,         ldc,
                  trans_a, trans_b, dt::bf16, dt::f32, Bits(alpha), Bits(beta)};
    std::shared_ptr<Entry> entry = state_->Get(key, dt::bf16);
    if (entry == nullptr) return;
    state_->Execute(*entry, a, b, c);
  }
  // The columns AmxSafeK left out (bf16 products are exact in f32).
  for (int64_t kk = k0; kk < k; ++kk) {
    for (int64_t i = 0; i < m; ++i) {
      const float ai = F32FromBF16(trans_a ? a[kk * lda + i] : a[i * lda + kk]);
      for (int64_t j = 0; j < n; ++j) {
        const float bj = F32FromBF16(trans_b ? b[j * ldb + kk] : b[kk * ldb + j]);
        c[i * ldc + j] += alpha * (ai * bj);
      }
    }
  }
}

void OneDnnEngine::SetGemmThreads(int n) {
  state_->gemm_threads.store(std::max(1, n), std::memory_order_relaxed);
}

int OneDnnEngine::GemmThreads() const {
  return state_->gemm_threads.load(std::memory_order_relaxed);
}

void OneDnnEngine::Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum: c = beta * c (beta 0 overwrites NaN too)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  const Key key{m,       n,       k,       lda,     ldb,         ldc,
                trans_a, trans_b, dt::f32, dt::f32, Bits(alpha), Bits(beta)};
  std::shared_ptr<Entry> entry = state_->Get(key, dt::f32);
  if (entry != nullptr) state_->Execute(*entry, a, b, c);
}

bool OneDnnEngine::HasInt8Dot() const { return state_->int8_exact; }

std::string OneDnnEngine::Int8Note() const { return state_->int8_note; }

void OneDnnEngine::Int8DotTransB(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                                 const int8_t* b, int64_t ldb, int32_t* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const int64_t k0 = AmxSafeK(state_->amx, k, 1);
  if (k0 <= 0) {  // an empty sum (k <= 0), or columns all left to the loop below
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0);
  } else {
    const Key key{m, n, k0, lda, ldb, ldc, false, true, dt::s8, dt::s32, Bits(1.0f), Bits(0.0f)};
    std::shared_ptr<Entry> entry = state_->Get(key, dt::s8);
    if (entry == nullptr) return;
    state_->Execute(*entry, a, b, c);
  }
  for (int64_t i = 0; i < m; ++i) {  // the columns AmxSafeK left out, exact
    for (int64_t j = 0; j < n; ++j) {
      int32_t sum = 0;
      for (int64_t kk = k0; kk < k; ++kk) sum += int32_t{a[i * lda + kk]} * b[j * ldb + kk];
      c[i * ldc + j] += sum;
    }
  }
}

bool OneDnnEngine::HasU8S8Dot() const { return state_->u8_exact; }

std::string OneDnnEngine::U8Note() const { return state_->u8_note; }

void OneDnnEngine::U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                                const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  const int64_t k0 = AmxSafeK(state_->amx, k, 1);
  if (k0 <= 0) {  // an empty sum (k <= 0), or columns all left to the loop below
    std::fill(c, c + batch * m * n, 0);
  } else {  // a's rows stay k apart
    Key key{m, n, k0, k, ldb, n, false, false, dt::u8, dt::s32, Bits(1.0f), Bits(0.0f)};
    key.batch = batch;
    key.stride_b = stride_b;
    std::shared_ptr<Entry> entry = state_->Get(key, dt::s8);
    if (entry == nullptr) return;
    state_->Execute(*entry, a, b, c);
  }
  for (int64_t x = 0; x < batch; ++x) {  // the columns AmxSafeK left out, exact
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int32_t sum = 0;
        for (int64_t kk = k0; kk < k; ++kk) {
          sum += int32_t{a[(x * m + i) * k + kk]} * b[x * stride_b + kk * ldb + j];
        }
        c[(x * m + i) * n + j] += sum;
      }
    }
  }
}

absl::Status OneDnnEngine::TakeError() {
  absl::MutexLock lock(&state_->mu);
  absl::Status s = std::move(state_->error);
  state_->error = absl::OkStatus();
  return s;
}

CacheStats OneDnnEngine::Stats() const {
  absl::MutexLock lock(&state_->mu);
  CacheStats s = state_->stats;
  s.entries = static_cast<int64_t>(state_->cache.size());
  return s;
}

}  // namespace onednn
}  // namespace attnkit
