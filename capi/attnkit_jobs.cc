// The C API's configs and jobs (include/attnkit/attnkit.h): text proto <-> JSON,
// validation, check and compare, over the same library calls as the CLI.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "attnkit/attnkit.h"
#include "capi/internal.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/check.h"
#include "harness/compare.h"
#include "harness/machine.h"
#include "harness/records.pb.h"
#include "harness/suite.h"
#include "io/config_io.h"
#include "io/proto_json.h"
#include "ops/cost.h"
#include "platform/machine_info.h"

namespace attnkit::capi {

char* NewCString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

namespace {

absl::StatusOr<AttentionConfig> ConfigFromJson(const char* json) {
  ATTNKIT_RETURN_IF_ERROR(RequireNonNull(json, "config_json"));
  AttentionConfig config;
  ATTNKIT_RETURN_IF_ERROR(ProtoFromJson(json, "config_json", &config));
  return config;
}

// "a,b" -> {"a", "b"}; NULL or "" -> {} (every backend).
std::vector<std::string> BackendList(const char* backends) {
  if (backends == nullptr) return {};
  return absl::StrSplit(backends, ',', absl::SkipWhitespace());
}

absl::Status SetOut(char** out, const std::string& value) {
  *out = NewCString(value);
  return absl::OkStatus();
}

}  // namespace
}  // namespace attnkit::capi

using attnkit::capi::Guard;
using attnkit::capi::RequireNonNull;

extern "C" {

void attnkit_string_free(char* s) { std::free(s); }

int32_t attnkit_config_from_text(const char* text, char** json, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(json, "json"));
    *json = nullptr;
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(text, "text"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionConfig config,
                             attnkit::ParseConfigText(text, "config text"));
    return attnkit::capi::SetOut(json, attnkit::ProtoToJson(config, 0));
  });
}

int32_t attnkit_config_to_text(const char* config_json, char** text, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(text, "text"));
    *text = nullptr;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionConfig config,
                             attnkit::capi::ConfigFromJson(config_json));
    return attnkit::capi::SetOut(text, attnkit::ConfigToText(config));
  });
}

int32_t attnkit_config_validate(const char* config_json, char** id, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    if (id != nullptr) *id = nullptr;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionConfig config,
                             attnkit::capi::ConfigFromJson(config_json));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionProblem p, attnkit::ProblemFromConfig(config));
    if (id != nullptr) *id = attnkit::capi::NewCString(p.Id());
    return absl::OkStatus();
  });
}

int32_t attnkit_config_cost(const char* config_json, char** cost_json, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(cost_json, "cost_json"));
    *cost_json = nullptr;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionConfig config,
                             attnkit::capi::ConfigFromJson(config_json));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionProblem p, attnkit::ProblemFromConfig(config));
    const attnkit::CostReport c = attnkit::ComputeCost(p);
    return attnkit::capi::SetOut(
        cost_json,
        absl::StrFormat("{\"id\": \"%s\", \"useful_flops\": %.17g, \"dense_flops\": %.17g, "
                        "\"visible_pairs\": %d, \"bytes_moved\": %d, \"kv_cache_bytes\": %d, "
                        "\"score_entries\": %d}",
                        p.Id(), c.useful_flops, c.dense_flops, c.visible_pairs, c.bytes_moved,
                        c.kv_cache_bytes, c.score_entries));
  });
}

int32_t attnkit_suite(const char* name, char** configs_json, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(configs_json, "configs_json"));
    *configs_json = nullptr;
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(name, "name"));
    ATTNKIT_ASSIGN_OR_RETURN(const std::vector<attnkit::AttentionConfig> configs,
                             attnkit::LoadSuiteConfigs(name));
    std::string json = "[";
    for (size_t i = 0; i < configs.size(); ++i) {
      absl::StrAppend(&json, i > 0 ? ", " : "", attnkit::ProtoToJson(configs[i], 0));
    }
    return attnkit::capi::SetOut(configs_json, json + "]");
  });
}

int32_t attnkit_machine_limits(int32_t threads, int32_t refresh, char** json, char* err,
                               size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(json, "json"));
    *json = nullptr;
    if (threads < 0) {
      return absl::InvalidArgumentError(absl::StrCat("threads (", threads, ") must be >= 0"));
    }
    const int n = attnkit::ThreadsOrEveryCore(threads);
    std::string how;
    const attnkit::MachineLimits limits = attnkit::LoadOrMeasureLimits(n, refresh != 0, &how);
    return attnkit::capi::SetOut(json,
                                 attnkit::MachineLimitsJson(attnkit::Fingerprint(n), limits, how));
  });
}

int32_t attnkit_check(attnkit_context* ctx, const char* config_json, const char* backends,
                      char** report_json, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(report_json, "report_json"));
    *report_json = nullptr;
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireContext(ctx));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::AttentionConfig config,
                             attnkit::capi::ConfigFromJson(config_json));
    ATTNKIT_ASSIGN_OR_RETURN(
        const attnkit::CheckReport report,
        attnkit::RunCheck(ctx->registry, config, attnkit::capi::BackendList(backends)));
    return attnkit::capi::SetOut(report_json, attnkit::ProtoToJson(report));
  });
}

int32_t attnkit_compare(attnkit_context* ctx, const char* configs_json, const char* suite,
                        const char* backends, int32_t threads, int32_t progress, char** report_json,
                        char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(report_json, "report_json"));
    *report_json = nullptr;
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireContext(ctx));
    if (threads < 0) {
      return absl::InvalidArgumentError(absl::StrCat("threads (", threads, ") must be >= 0"));
    }
    std::vector<attnkit::AttentionProblem> problems;
    if (configs_json != nullptr) {
      attnkit::ConfigList list;
      ATTNKIT_RETURN_IF_ERROR(attnkit::ProtoFromJson(
          absl::StrCat("{\"configs\": ", configs_json, "}"), "configs_json", &list));
      if (list.configs().empty()) {
        return absl::InvalidArgumentError("configs_json is an empty list; give one config or more");
      }
      for (int i = 0; i < list.configs_size(); ++i) {
        auto p = attnkit::ProblemFromConfig(list.configs(i));
        if (!p.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("configs_json[", i, "]: ", p.status().message()));
        }
        problems.push_back(*std::move(p));
      }
    } else {
      ATTNKIT_ASSIGN_OR_RETURN(
          problems, attnkit::LoadSuite(suite == nullptr || *suite == '\0' ? "standard" : suite));
    }
    attnkit::CompareOptions options;
    options.backends = attnkit::capi::BackendList(backends);
    options.threads = attnkit::ThreadsOrEveryCore(threads);
    if (progress != 0) options.progress = &std::cerr;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::CompareReport report,
                             attnkit::MeasureAndCompare(ctx->registry, problems, options));
    return attnkit::capi::SetOut(report_json, attnkit::ProtoToJson(report));
  });
}

}  // extern "C"
