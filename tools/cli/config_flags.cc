#include "tools/cli/config_flags.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace attnkit {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr absl::string_view kFlagPrefix = "config.";
// Message fields nest at most this deep in the help (a recursive message
// type would otherwise have no end).
constexpr int kMaxDepth = 8;

// "int64", "uint32", "string", ...; an enum or a message by its full name.
std::string TypeName(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_ENUM:
      return f.enum_type()->full_name();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return f.message_type()->full_name();
    default:
      return f.type_name();
  }
}

std::string EnumValueNames(const EnumDescriptor& e, absl::string_view separator) {
  std::vector<std::string> names;
  for (int i = 0; i < e.value_count(); ++i) names.push_back(e.value(i)->name());
  return absl::StrJoin(names, separator);
}

// What one value of `f` looks like in a flag: "INT64", "NONE|CAUSAL".
std::string ValuePlaceholder(const FieldDescriptor& f) {
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_ENUM) return EnumValueNames(*f.enum_type(), "|");
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_BOOL) return "true|false";
  return absl::AsciiStrToUpper(f.type_name());
}

std::string Usage(const FieldDescriptor& f, absl::string_view path) {
  if (f.is_repeated()) return absl::StrCat("--config.", path, "=", ValuePlaceholder(f), ",...");
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_BOOL)
    return absl::StrCat("--config.", path, "[=true|false]");
  return absl::StrCat("--config.", path, "=", ValuePlaceholder(f));
}

// Every flag path under `d` (leaves and message fields), for suggestions.
void CollectPaths(const Descriptor& d, const std::string& prefix, int depth,
                  std::vector<std::string>* out) {
  if (depth > kMaxDepth) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    out->push_back(prefix + f.name());
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f.is_repeated()) {
      CollectPaths(*f.message_type(), prefix + f.name() + ".", depth + 1, out);
    }
  }
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Up to three flag paths close to `path`: a few edits away, or whose last
// name contains the one typed (heads -> num_heads, num_kv_heads).
std::vector<std::string> CloseNames(const Descriptor& root, absl::string_view path) {
  std::vector<std::string> paths;
  CollectPaths(root, "", 0, &paths);
  const std::string typed = absl::AsciiStrToLower(path);
  const absl::string_view typed_last = absl::string_view(typed).substr(typed.rfind('.') + 1);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string& p : paths) {
    const size_t d = EditDistance(typed, p);
    const absl::string_view last = absl::string_view(p).substr(p.rfind('.') + 1);
    const bool contains = typed_last.size() >= 3 && absl::StrContains(last, typed_last);
    if (d <= std::max<size_t>(2, typed.size() / 4) || contains) scored.emplace_back(d, p);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < 3; ++i) out.push_back("--config." + scored[i].second);
  return out;
}

const FieldDescriptor* FindField(const Descriptor& d, absl::string_view name) {
  const FieldDescriptor* f = d.FindFieldByName(std::string(name));
  return f != nullptr ? f : d.FindFieldByName(absl::AsciiStrToLower(name));
}

template <typename T>
absl::Status ParseInteger(absl::string_view text, T* out) {
  if (absl::SimpleAtoi(text, out)) return absl::OkStatus();
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&digits, "-")) absl::ConsumePrefix(&digits, "+");
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return absl::InvalidArgumentError(absl::StrCat(text, " is out of range [",
                                                   std::numeric_limits<T>::min(), ", ",
                                                   std::numeric_limits<T>::max(), "]"));
  }
  return absl::InvalidArgumentError(absl::StrCat(text, " is not a decimal integer"));
}

// Parses `text` as one value of `f` and sets it in `m` (adds it, for a
// repeated field). The error says why `text` is no such value.
absl::Status SetOrAddValue(const FieldDescriptor& f, absl::string_view text, Message* m) {
  const Reflection& r = *m->GetReflection();
  const bool add = f.is_repeated();
  if (f.cpp_type() != FieldDescriptor::CPPTYPE_STRING) text = absl::StripAsciiWhitespace(text);
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (absl::Status s = ParseInteger(text, &v); !s.ok()) return s;
      add ? r.AddInt32(m, &f, v) : r.SetInt32(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (absl::Status s = ParseInteger(text, &v); !s.ok()) return s;
      add ? r.AddInt64(m, &f, v) : r.SetInt64(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (absl::Status s = ParseInteger(text, &v); !s.ok()) return s;
      add ? r.AddUInt32(m, &f, v) : r.SetUInt32(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (absl::Status s = ParseInteger(text, &v); !s.ok()) return s;
      add ? r.AddUInt64(m, &f, v) : r.SetUInt64(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v)) {
        return absl::InvalidArgumentError(absl::StrCat(text, " is not a number"));
      }
      add ? r.AddFloat(m, &f, v) : r.SetFloat(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v)) {
        return absl::InvalidArgumentError(absl::StrCat(text, " is not a number"));
      }
      add ? r.AddDouble(m, &f, v) : r.SetDouble(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower != "true" && lower != "1" && lower != "false" && lower != "0") {
        return absl::InvalidArgumentError(
            absl::StrCat(text, " is not a bool: use true, false, 1 or 0"));
      }
      const bool v = lower == "true" || lower == "1";
      add ? r.AddBool(m, &f, v) : r.SetBool(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumDescriptor& e = *f.enum_type();
      const EnumValueDescriptor* v = e.FindValueByName(std::string(text));
      for (int i = 0; v == nullptr && i < e.value_count(); ++i) {
        if (absl::EqualsIgnoreCase(e.value(i)->name(), text)) v = e.value(i);
      }
      if (v == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(text, " is not a value of ", e.full_name(),
                                                       "; use one of ", EnumValueNames(e, ", "),
                                                       " (any case)"));
      }
      add ? r.AddEnum(m, &f, v) : r.SetEnum(m, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      add ? r.AddString(m, &f, std::string(text)) : r.SetString(m, &f, std::string(text));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return absl::InternalError(absl::StrCat(f.full_name(), " has no scalar type"));
}

// Sets the field `f` (of `m`, reached by flag.path) from the flag's value.
absl::Status SetField(const ConfigFlag& flag, const FieldDescriptor& f, Message* m) {
  const Reflection& r = *m->GetReflection();
  if (flag.has_value && flag.value.empty()) {
    r.ClearField(m, &f);
    return absl::OkStatus();
  }
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (f.is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat(flag.Text(), ": ", flag.path,
                                                     " is a repeated field of ", TypeName(f),
                                                     " messages; set it in the --config file"));
    }
    std::vector<std::string> fields;
    const Descriptor& d = *f.message_type();
    for (int i = 0; i < d.field_count(); ++i) {
      fields.push_back(absl::StrCat("--config.", flag.path, ".", d.field(i)->name()));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(flag.Text(), ": ", flag.path, " is a message (", TypeName(f),
                     "), which takes no value; set its fields (", absl::StrJoin(fields, ", "),
                     "), or clear it with --config.", flag.path, "="));
  }
  if (!flag.has_value) {
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_BOOL && !f.is_repeated()) {
      r.SetBool(m, &f, true);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(flag.Text(), " needs a value: ", Usage(f, flag.path)));
  }
  if (!f.is_repeated()) {
    const absl::Status s = SetOrAddValue(f, flag.value, m);
    if (s.ok()) return s;
    // An enum's error already lists its values.
    const std::string type = f.cpp_type() == FieldDescriptor::CPPTYPE_ENUM
                                 ? ""
                                 : absl::StrCat(" (", flag.path, " is ", TypeName(f), ")");
    return absl::InvalidArgumentError(absl::StrCat(flag.Text(), ": ", s.message(), type));
  }
  r.ClearField(m, &f);
  const std::vector<absl::string_view> items = absl::StrSplit(flag.value, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const absl::Status s = SetOrAddValue(f, items[i], m);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag.Text(), ": element ", i + 1, ": ", s.message(), " (", flag.path,
                       " is a comma-separated list of ", TypeName(f), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyConfigFlag(const ConfigFlag& flag, absl::string_view command, Message* root) {
  const std::vector<absl::string_view> names = absl::StrSplit(flag.path, '.');
  Message* m = root;
  for (size_t i = 0; i < names.size(); ++i) {
    const Descriptor& d = *m->GetDescriptor();
    const std::string parent =
        i == 0 ? std::string(d.full_name())
               : absl::StrCat(d.full_name(), " (--config.",
                              absl::StrJoin(names.begin(), names.begin() + i, "."), ")");
    const FieldDescriptor* f = FindField(d, names[i]);
    if (f == nullptr) {
      std::string message =
          absl::StrCat(flag.Text(), ": ", parent, " has no field '", names[i], "'");
      const std::vector<std::string> close = CloseNames(*root->GetDescriptor(), flag.path);
      if (!close.empty())
        absl::StrAppend(&message, "; did you mean ", absl::StrJoin(close, ", "), "?");
      if (!command.empty()) {
        absl::StrAppend(&message, " (attnkit help ", command, " lists every --config.* flag)");
      }
      return absl::InvalidArgumentError(message);
    }
    if (i + 1 == names.size()) return SetField(flag, *f, m);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag.Text(), ": ", f->name(), " is ", TypeName(*f),
                       ", not a message, so it has no field '", names[i + 1], "'"));
    }
    if (f->is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat(flag.Text(), ": ", f->name(),
                                                     " is a repeated field of ", TypeName(*f),
                                                     " messages; set it in the --config file"));
    }
    m = m->GetReflection()->MutableMessage(m, f);
  }
  return absl::OkStatus();
}

void AddDocs(const Descriptor& d, const std::string& prefix, int depth,
             std::vector<ConfigFlagDoc>* out) {
  if (depth > kMaxDepth) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    const std::string path = prefix + f.name();
    if (f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      out->push_back({path, Usage(f, path)});
    } else if (!f.is_repeated()) {
      AddDocs(*f.message_type(), path + ".", depth + 1, out);
    }
  }
}

}  // namespace

std::string ConfigFlag::Text() const {
  return has_value ? absl::StrCat("--config.", path, "=", value) : absl::StrCat("--config.", path);
}

SplitArgs SplitConfigFlags(int argc, char** argv) {
  SplitArgs out;
  bool flags_ended = false;
  for (int i = 0; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (i > 0 && !flags_ended) {
      if (a == "--") flags_ended = true;
      absl::string_view name = a;
      if ((absl::ConsumePrefix(&name, "--") || absl::ConsumePrefix(&name, "-")) &&
          absl::ConsumePrefix(&name, kFlagPrefix)) {
        ConfigFlag flag;
        const size_t eq = name.find('=');
        flag.path = std::string(name.substr(0, eq));
        flag.has_value = eq != absl::string_view::npos;
        if (flag.has_value) flag.value = std::string(name.substr(eq + 1));
        out.config_flags.push_back(std::move(flag));
        continue;
      }
    }
    out.rest.push_back(argv[i]);
  }
  out.rest.push_back(nullptr);
  return out;
}

absl::Status ApplyConfigFlags(const std::vector<ConfigFlag>& flags, absl::string_view command,
                              Message* message) {
  if (flags.empty()) return absl::OkStatus();
  // All or nothing: `message` changes only when every flag applies.
  std::unique_ptr<Message> copy(message->New());
  copy->CopyFrom(*message);
  for (const ConfigFlag& flag : flags) {
    if (absl::Status s = ApplyConfigFlag(flag, command, copy.get()); !s.ok()) return s;
  }
  message->GetReflection()->Swap(message, copy.get());
  return absl::OkStatus();
}

std::vector<ConfigFlagDoc> ConfigFlagDocs(const Descriptor& descriptor) {
  std::vector<ConfigFlagDoc> out;
  AddDocs(descriptor, "", 0, &out);
  return out;
}

}  // namespace attnkit
