#include "common/trial_protocol.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace dial {
namespace {

absl::StatusOr<google::protobuf::Struct> ParseObject(const std::string& line) {
  google::protobuf::Struct object;
  auto status = google::protobuf::util::JsonStringToMessage(line, &object);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", std::string(status.message())));
  }
  return object;
}

std::string ToJson(const google::protobuf::Struct& object) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(object, &out);
  return out;
}

}  // namespace

std::string EncodeReport(const TrialReport& report) {
  google::protobuf::Struct object;
  auto& fields = *object.mutable_fields();
  fields["step"].set_number_value(static_cast<double>(report.step));
  auto& metrics = *fields["metrics"].mutable_struct_value()->mutable_fields();
  for (const auto& [name, value] : report.metrics) {
    // JSON has no NaN or infinity: send them as strings.
    if (std::isfinite(value)) {
      metrics[name].set_number_value(value);
    } else {
      metrics[name].set_string_value(std::isnan(value) ? "NaN"
                                     : value > 0       ? "Infinity"
                                                       : "-Infinity");
    }
  }
  if (!report.checkpoint.empty()) {
    fields["checkpoint"].set_string_value(report.checkpoint);
  }
  return ToJson(object);
}

std::string CheckpointIdOf(const std::string& checkpoint,
                           const std::string& root, const std::string& study,
                           int64_t trial) {
  if (checkpoint.empty() || checkpoint[0] != '/' || root.empty()) {
    return checkpoint;
  }
  namespace fs = std::filesystem;
  // Lexically: "..", "." and doubled slashes resolved, so a path that
  // climbs out of the trial's directory is not taken for one inside it.
  const std::string path = fs::path(checkpoint).lexically_normal().string();
  const std::string base = fs::absolute(root).lexically_normal().string();
  const std::string dir = (fs::path(base) / study / std::to_string(trial))
                              .lexically_normal()
                              .string();
  if (path.size() <= dir.size() + 1 || path.compare(0, dir.size(), dir) != 0 ||
      path[dir.size()] != '/') {
    return checkpoint;
  }
  return path.substr(base.size() + (base.back() == '/' ? 0 : 1));
}

absl::StatusOr<TrialReport> ParseReport(const std::string& line) {
  auto object = ParseObject(line);
  if (!object.ok()) return object.status();
  const auto& fields = object->fields();
  TrialReport report;
  auto step = fields.find("step");
  if (step == fields.end() ||
      step->second.kind_case() != google::protobuf::Value::kNumberValue ||
      !(step->second.number_value() >= 0) ||
      step->second.number_value() != std::floor(step->second.number_value())) {
    return absl::InvalidArgumentError(
        "report: \"step\" must be a non-negative integer");
  }
  // Past 2^53 a double no longer holds every integer (and 1e300 would not
  // fit an int64 at all).
  if (step->second.number_value() > kMaxReportStep) {
    return absl::InvalidArgumentError(
        "report: \"step\" must be at most 2^53 (9007199254740992)");
  }
  report.step = static_cast<int64_t>(step->second.number_value());
  auto metrics = fields.find("metrics");
  if (metrics == fields.end() ||
      metrics->second.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError("report: \"metrics\" must be an object");
  }
  for (const auto& [name, value] : metrics->second.struct_value().fields()) {
    if (value.kind_case() == google::protobuf::Value::kNumberValue) {
      report.metrics[name] = value.number_value();
    } else if (value.kind_case() == google::protobuf::Value::kStringValue &&
               (value.string_value() == "NaN" ||
                value.string_value() == "Infinity" ||
                value.string_value() == "-Infinity")) {
      report.metrics[name] =
          std::stod(value.string_value() == "NaN"        ? "nan"
                    : value.string_value() == "Infinity" ? "inf"
                                                         : "-inf");
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("report: metric '", name, "' must be a number"));
    }
  }
  auto checkpoint = fields.find("checkpoint");
  if (checkpoint != fields.end()) {
    if (checkpoint->second.kind_case() !=
        google::protobuf::Value::kStringValue) {
      return absl::InvalidArgumentError(
          "report: \"checkpoint\" must be a string");
    }
    report.checkpoint = checkpoint->second.string_value();
  }
  return report;
}

std::string EncodeDecision(const TrialDecision& decision) {
  google::protobuf::Struct object;
  auto& fields = *object.mutable_fields();
  fields["action"].set_string_value(decision.action);
  if (!decision.reason.empty())
    fields["reason"].set_string_value(decision.reason);
  if (!decision.checkpoint.empty()) {
    fields["checkpoint"].set_string_value(decision.checkpoint);
  }
  if (!decision.params_json.empty() && decision.params_json != "{}") {
    google::protobuf::Struct params;
    if (google::protobuf::util::JsonStringToMessage(decision.params_json,
                                                    &params)
            .ok()) {
      *fields["params"].mutable_struct_value() = params;
    }
  }
  return ToJson(object);
}

absl::StatusOr<TrialDecision> ParseDecision(const std::string& line) {
  auto object = ParseObject(line);
  if (!object.ok()) return object.status();
  const auto& fields = object->fields();
  TrialDecision d;
  auto it = fields.find("action");
  if (it == fields.end() ||
      it->second.kind_case() != google::protobuf::Value::kStringValue) {
    return absl::InvalidArgumentError("decision: \"action\" is missing");
  }
  d.action = it->second.string_value();
  if ((it = fields.find("reason")) != fields.end()) {
    d.reason = it->second.string_value();
  }
  if ((it = fields.find("checkpoint")) != fields.end()) {
    d.checkpoint = it->second.string_value();
  }
  d.params_json = "{}";
  if ((it = fields.find("params")) != fields.end()) {
    d.params_json = ToJson(it->second.struct_value());
  }
  return d;
}

std::string ParamsJson(
    const google::protobuf::Map<std::string, v1::ParamValue>& params) {
  google::protobuf::Struct object;
  for (const auto& [name, value] : params) {
    auto& v = (*object.mutable_fields())[name];
    switch (value.value_case()) {
      case v1::ParamValue::kDoubleValue:
        v.set_number_value(value.double_value());
        break;
      case v1::ParamValue::kIntValue:
        v.set_number_value(static_cast<double>(value.int_value()));
        break;
      default:
        v.set_string_value(value.string_value());
    }
  }
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(object, &out);
  return out;
}

std::optional<TrialPipe> TrialPipe::FromEnv() {
  const char* rfd = std::getenv(kEnvReportFd);
  const char* dfd = std::getenv(kEnvDecisionFd);
  int report_fd = -1, decision_fd = -1;
  if (rfd == nullptr || dfd == nullptr || !absl::SimpleAtoi(rfd, &report_fd) ||
      !absl::SimpleAtoi(dfd, &decision_fd)) {
    return std::nullopt;
  }
  return TrialPipe(report_fd, decision_fd);
}

absl::StatusOr<TrialDecision> TrialPipe::Send(const TrialReport& report) {
  const std::string line = EncodeReport(report) + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = write(out_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("worker pipe closed");
    done += static_cast<size_t>(n);
  }
  std::string reply;
  char c;
  while (true) {
    ssize_t n = read(in_, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("worker pipe closed");
    if (c == '\n') break;
    reply.push_back(c);
  }
  return ParseDecision(reply);
}

}  // namespace dial
