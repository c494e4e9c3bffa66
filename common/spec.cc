#include "common/spec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/status.h"

namespace dial {

void AppendJsonString(absl::string_view s, std::string& out) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

bool LooksLikeNumber(const std::string& s) {
  if (s.empty()) return false;
  // YAML 1.2 core schema numbers, minus hex/octal and .inf/.nan forms.
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  bool digits = false, dot = false, exp = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digits && !exp) {
      exp = true;
      digits = false;
      if (i + 1 < s.size() && (s[i + 1] == '-' || s[i + 1] == '+')) ++i;
    } else {
      return false;
    }
  }
  return digits;
}

bool IsPlain(const YAML::Node& node) { return node.Tag() == "?"; }

// Converts a YAML node of unknown schema (google.protobuf.Struct and friends)
// to JSON, inferring scalar types as YAML 1.2 does.
absl::Status GenericToJson(const YAML::Node& node, const std::string& path,
                           std::string& out) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += "null";
      return absl::OkStatus();
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (IsPlain(node)) {
        if (s == "true" || s == "false") {
          out += s;
          return absl::OkStatus();
        }
        if (s == "True" || s == "TRUE") {
          out += "true";
          return absl::OkStatus();
        }
        if (s == "False" || s == "FALSE") {
          out += "false";
          return absl::OkStatus();
        }
        if (s == "null" || s == "~") {
          out += "null";
          return absl::OkStatus();
        }
        if (LooksLikeNumber(s)) {
          out += s[0] == '+' ? s.substr(1) : s;
          return absl::OkStatus();
        }
      }
      AppendJsonString(s, out);
      return absl::OkStatus();
    }
    case YAML::NodeType::Sequence: {
      out.push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i) out.push_back(',');
        DIAL_RETURN_IF_ERROR(
            GenericToJson(node[i], absl::StrCat(path, "[", i, "]"), out));
      }
      out.push_back(']');
      return absl::OkStatus();
    }
    case YAML::NodeType::Map: {
      out.push_back('{');
      bool first = true;
      for (const auto& kv : node) {
        if (!first) out.push_back(',');
        first = false;
        if (!kv.first.IsScalar()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": keys must be plain strings"));
        }
        AppendJsonString(kv.first.Scalar(), out);
        out.push_back(':');
        DIAL_RETURN_IF_ERROR(GenericToJson(
            kv.second, absl::StrCat(path, ".", kv.first.Scalar()), out));
      }
      out.push_back('}');
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

bool IsWellKnownDynamic(const Descriptor* d) {
  const std::string& n = d->full_name();
  return n == "google.protobuf.Struct" || n == "google.protobuf.Value" ||
         n == "google.protobuf.ListValue";
}

absl::Status MessageToJson(const YAML::Node& node, const Descriptor* desc,
                           const std::string& path, std::string& out);

std::string Where(const std::string& path) {
  return path.empty() ? "spec" : path;
}

// One value (not a repeated container) of `field`'s type.
absl::Status ValueToJson(const YAML::Node& node, const FieldDescriptor* field,
                         const std::string& path, std::string& out) {
  if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
    if (IsWellKnownDynamic(field->message_type())) {
      return GenericToJson(node, path, out);
    }
    return MessageToJson(node, field->message_type(), path, out);
  }
  if (!node.IsScalar()) {
    if (node.IsNull()) {
      out += "null";
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a single value, not a ",
                     node.IsMap() ? "mapping" : "list"));
  }
  const std::string& s = node.Scalar();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      AppendJsonString(s, out);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      AppendJsonString(s, out);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      if (s == "true" || s == "True" || s == "TRUE") {
        out += "true";
      } else if (s == "false" || s == "False" || s == "FALSE") {
        out += "false";
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": expected true or false, got '", s, "'"));
      }
      break;
    default:  // numbers
      if (!LooksLikeNumber(s)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": expected a number, got '", s, "'"));
      }
      out += s[0] == '+' ? s.substr(1) : s;
  }
  return absl::OkStatus();
}

absl::Status MessageToJson(const YAML::Node& node, const Descriptor* desc,
                           const std::string& path, std::string& out) {
  if (node.IsNull()) {
    out += "{}";
    return absl::OkStatus();
  }
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path), ": expected a mapping of fields"));
  }
  out.push_back('{');
  bool first = true;
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string field_path = path.empty() ? key : path + "." + key;
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(key);
    if (field == nullptr) {
      std::vector<std::string> names;
      for (int i = 0; i < desc->field_count(); ++i) {
        names.push_back(desc->field(i)->name());
      }
      return absl::InvalidArgumentError(
          absl::StrCat(field_path, ": unknown field; expected one of ",
                       absl::StrJoin(names, ", ")));
    }
    if (!seen.insert(field->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_path, ": given twice"));
    }
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(field->name(), out);
    out.push_back(':');
    const YAML::Node& value = kv.second;
    if (field->is_map()) {
      if (value.IsNull()) {
        out += "{}";
        continue;
      }
      if (!value.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field_path, ": expected a mapping"));
      }
      const FieldDescriptor* value_field = field->message_type()->map_value();
      out.push_back('{');
      bool first_entry = true;
      for (const auto& entry : value) {
        if (!first_entry) out.push_back(',');
        first_entry = false;
        const std::string k = entry.first.Scalar();
        AppendJsonString(k, out);
        out.push_back(':');
        DIAL_RETURN_IF_ERROR(
            ValueToJson(entry.second, value_field, field_path + "." + k, out));
      }
      out.push_back('}');
    } else if (field->is_repeated()) {
      if (value.IsNull()) {
        out += "[]";
        continue;
      }
      if (!value.IsSequence()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field_path, ": expected a list"));
      }
      out.push_back('[');
      for (size_t i = 0; i < value.size(); ++i) {
        if (i) out.push_back(',');
        DIAL_RETURN_IF_ERROR(ValueToJson(
            value[i], field, absl::StrCat(field_path, "[", i, "]"), out));
      }
      out.push_back(']');
    } else {
      DIAL_RETURN_IF_ERROR(ValueToJson(value, field, field_path, out));
    }
  }
  out.push_back('}');
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::StudySpec> ParseStudySpec(absl::string_view text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec is not valid YAML or JSON: ", e.what()));
  }
  std::string json;
  DIAL_RETURN_IF_ERROR(
      MessageToJson(root, v1::StudySpec::descriptor(), "", json));
  v1::StudySpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status =
      google::protobuf::util::JsonStringToMessage(json, &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: ", std::string(status.message())));
  }
  return spec;
}

absl::StatusOr<v1::StudySpec> LoadStudySpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read spec file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseStudySpec(buffer.str());
}

}  // namespace dial
