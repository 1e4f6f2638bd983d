// `attnkit backends`: what is registered, whether it can run here, where it
// came from and what it supports, as text or (--json) as data.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "io/json_writer.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

template <class T, class NameOf>
void NameArray(JsonWriter& w, const char* key, const std::vector<T>& values, NameOf name) {
  w.Key(key).BeginArray();
  for (const T& v : values) w.String(name(v));
  w.EndArray();
}

void WriteCaps(JsonWriter& w, const Capabilities& c) {
  w.Key("capabilities").BeginObject();
  NameArray(w, "dtypes", c.dtypes, DTypeName);
  NameArray(w, "kv_dtypes", c.kv_dtypes, DTypeName);
  // compute FAST computes in the storage type for these K/V types; for the
  // others (f32 too) a backend computes EXACT, and refuses FAST but for f32.
  NameArray(w, "fast_kv_dtypes", c.fast_kv_dtypes, DTypeName);
  NameArray(w, "masks", c.masks, MaskKindName);
  NameArray(w, "alignments", c.alignments,
            [](Alignment a) { return a == Alignment::kTopLeft ? "top_left" : "bottom_right"; });
  NameArray(w, "layouts", c.layouts, [](Layout l) { return l == Layout::kBHTD ? "BHTD" : "BTHD"; });
  w.Key("head_dims").BeginObject();
  w.Field("min", c.min_head_dim).Field("max", c.max_head_dim);
  w.Key("only").BeginArray();  // empty: any in [min, max]
  for (int64_t d : c.head_dims) w.Int(d);
  w.EndArray().EndObject();
  w.Key("max_group_size");
  if (c.max_group_size > 0) {
    w.Int(c.max_group_size);
  } else {
    w.Null();  // any
  }
  w.Field("lse", c.lse).Field("kv_lengths", c.kv_lengths).Field("blocked_mask", c.blocked_mask);
  w.Field("additive_bias", c.additive_bias).Field("softcap", c.softcap);
  w.Field("deterministic", c.deterministic);
  w.EndObject();
}

std::string BackendsJson(const BackendRegistry& registry) {
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Key("backends").BeginArray();
  for (Backend* b : registry.All()) {
    const absl::Status available = b->Available();
    w.BeginObject();
    w.Field("name", b->Name()).Field("description", b->Description());
    w.Field("available", available.ok());
    w.Field("unavailable_reason", std::string(available.message()));
    w.Field("origin", registry.Origin(b->Name()));
    w.Field("memory", b->UsesHostMemory() ? "host" : "device");
    WriteCaps(w, b->Caps());
    w.EndObject();
  }
  w.EndArray();
  w.Key("plugin_failures").BeginArray();
  for (const PluginFailure& f : registry.plugin_failures()) w.String(f.status.message());
  w.EndArray();
  w.EndObject();
  return w.str();
}

}  // namespace

absl::Status BackendsCommand(const BackendRegistry& registry, const CliOptions& options,
                             std::ostream& out) {
  if (!JsonToStdout(options)) {
    for (Backend* b : registry.All()) {
      const absl::Status available = b->Available();
      out << b->Name() << ": "
          << (available.ok() ? std::string("available")
                             : absl::StrCat("unavailable: ", available.message()))
          << "\n  " << b->Description() << "\n  from: " << registry.Origin(b->Name()) << "\n  "
          << absl::StrReplaceAll(absl::StripSuffix(b->Caps().Describe(), "\n"), {{"\n", "\n  "}});
      out << "\n";
    }
    for (const PluginFailure& f : registry.plugin_failures()) {
      out << "plugin failed: " << f.status.message() << "\n";
    }
  }
  return EmitJson(options, BackendsJson(registry), out);
}

}  // namespace attnkit
