#include "backends/auto_select.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/builtin.h"
#include "core/status_macros.h"
#include "google/protobuf/text_format.h"
#include "io/config_io.h"
#include "platform/machine_info.h"

namespace attnkit {
namespace {

// The record at `path` and the orders already derived from it, re-read only
// when the file changes (modification time, size or inode: a record saved
// twice within the clock's resolution still differs, since SaveTuneRecord
// renames a new file into place). The layer and the C API ask per call.
struct CachedRecord {
  std::string path;
  int64_t mtime_ns = -1, size = -1, inode = -1;
  absl::StatusOr<TuneRecord> record = absl::NotFoundError("not read");
  std::map<std::pair<std::string, std::string>, AutoOrder> orders;  // (class, kv dtype)
};

std::string KvDtypeName(const AttentionProblem& p) { return std::string(DTypeName(p.kv_dtype)); }

}  // namespace

std::string ShapeClass(const AttentionProblem& p) {
  if (p.q_len <= kDecodeMaxQLen) return "decode";
  if (p.q_len >= kLongPrefillMinQLen) return "long_prefill";
  return "short_prefill";
}

std::string ShapeClassBoundaries() {
  return absl::StrFormat(
      "decode: q_len <= %d; short_prefill: %d < q_len < %d; long_prefill: q_len >= %d",
      kDecodeMaxQLen, kDecodeMaxQLen, kLongPrefillMinQLen, kLongPrefillMinQLen);
}

std::string TuneRecordPath(int threads) {
  return CachePath("tune", absl::StrCat("-t", ThreadsOrEveryCore(threads), ".textproto"));
}

absl::StatusOr<TuneRecord> LoadTuneRecord(const std::string& path) {
  ATTNKIT_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  TuneRecord record;
  const absl::Status parsed = ParseTextProto(text, "", &record);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is unreadable (", parsed.message(), ")"));
  }
  return record;
}

absl::Status SaveTuneRecord(const std::string& path, const TuneRecord& record) {
  if (!EnsureCacheDir()) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", CacheDir()));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(record, &text);
  const absl::Status s = WriteFileAtomically(path, text);
  InvalidateTuneRecordCache();
  return s;
}

namespace {

// The order for (shape_class, kv) from `record` (read from `path` for `n`
// threads).
AutoOrder ComputeAutoOrder(const absl::StatusOr<TuneRecord>& record, const std::string& path, int n,
                           const std::string& shape_class, const std::string& kv) {
  AutoOrder result;
  std::string why_static = absl::StrCat("no tuning record for ", shape_class, " at ", path,
                                        "; run `attnkit tune --threads=", n, "`");
  if (!record.ok() && record.status().code() != absl::StatusCode::kNotFound) {
    why_static = absl::StrCat(record.status().message(), "; using the static order");
  } else if (record.ok() && (record->cpu_model() != CpuModel() || record->threads() != n)) {
    why_static = absl::StrFormat("%s was measured on %s with %d threads, not %s with %d", path,
                                 record->cpu_model(), record->threads(), CpuModel(), n);
  } else if (record.ok()) {
    // The entry for this class and kv dtype; else the class's f32 entry.
    const TuneEntry* match = nullptr;
    const TuneEntry* fallback = nullptr;
    for (const TuneEntry& e : record->entries()) {
      if (e.shape_class() != shape_class) continue;
      const std::string e_kv = e.kv_dtype().empty() ? "f32" : e.kv_dtype();
      if (e_kv == kv) match = &e;
      if (e_kv == "f32") fallback = &e;
    }
    const TuneEntry* e = match != nullptr ? match : fallback;
    if (e != nullptr) {
      result.order.assign(e->order().begin(), e->order().end());
      result.source =
          absl::StrCat("the tuning record ", path, " (", shape_class, ", kv ",
                       match != nullptr ? kv : absl::StrCat("f32; ", kv, " not measured"), ", ", n,
                       " threads, measured ", record->measured_at(), ")");
    }
  }
  if (result.order.empty()) result.source = absl::StrCat("the static order (", why_static, ")");
  // Backends the record does not name follow in the static order.
  for (const std::string& name : DefaultAutoOrder()) {
    if (std::find(result.order.begin(), result.order.end(), name) == result.order.end()) {
      result.order.push_back(name);
    }
  }
  return result;
}

absl::Mutex cache_mu(absl::kConstInit);
CachedRecord* cache ABSL_GUARDED_BY(cache_mu) = nullptr;
std::chrono::steady_clock::time_point cache_checked ABSL_GUARDED_BY(cache_mu);

}  // namespace

void InvalidateTuneRecordCache() {
  absl::MutexLock lock(&cache_mu);
  if (cache != nullptr) cache->path.clear();
}

AutoOrder AutoOrderFor(const AttentionProblem& p, int threads) {
  const int n = ThreadsOrEveryCore(threads);
  const std::string path = TuneRecordPath(n);
  const std::pair<std::string, std::string> key(ShapeClass(p), KvDtypeName(p));
  absl::MutexLock lock(&cache_mu);
  if (cache == nullptr) cache = new CachedRecord();
  // The file is looked at again (a stat: microseconds, as much as the rest
  // of the selection) at most every kRecheck; SaveTuneRecord and
  // InvalidateTuneRecordCache make the next call look at once.
  constexpr auto kRecheck = std::chrono::milliseconds(200);
  const auto now = std::chrono::steady_clock::now();
  if (cache->path != path || now - cache_checked >= kRecheck) {
    cache_checked = now;
    struct stat st;
    const bool exists = stat(path.c_str(), &st) == 0;
    const int64_t mtime =
        exists ? int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec : -2;
    const int64_t size = exists ? int64_t{st.st_size} : -2;
    const int64_t inode = exists ? static_cast<int64_t>(st.st_ino) : -2;
    if (cache->path != path || cache->mtime_ns != mtime || cache->size != size ||
        cache->inode != inode) {
      cache->path = path;
      cache->mtime_ns = mtime;
      cache->size = size;
      cache->inode = inode;
      cache->record = exists ? LoadTuneRecord(path)
                             : absl::StatusOr<TuneRecord>(absl::NotFoundError("no file"));
      cache->orders.clear();
    }
  }
  auto it = cache->orders.find(key);
  if (it == cache->orders.end()) {
    it = cache->orders.emplace(key, ComputeAutoOrder(cache->record, path, n, key.first, key.second))
             .first;
  }
  return it->second;
}

absl::StatusOr<Selection> SelectBackend(const BackendRegistry& registry, const std::string& name,
                                        const AttentionProblem& p, int threads,
                                        bool host_memory_only, const SelectionCheck& check) {
  if (!name.empty() && name != "auto") return registry.Select(name, p, {}, false, check);
  const AutoOrder order = AutoOrderFor(p, threads);
  ATTNKIT_ASSIGN_OR_RETURN(Selection s,
                           registry.Select("auto", p, order.order, host_memory_only, check));
  absl::StrAppend(&s.reason, "; ", ShapeClass(p), " order from ", order.source);
  if (host_memory_only) {
    absl::StrAppend(&s.reason, "; host backends only (name a device backend for device memory)");
  }
  return s;
}

}  // namespace attnkit
