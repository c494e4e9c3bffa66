#include "worker/trial_policy.h"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/beneath.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxSecretBytes = 1 << 16;

bool ValidSecretName(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.size() > 255) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Whether `path` (made absolute and with symlinks resolved as far as it
// exists) lies inside `dir` (resolved the same way).
bool Inside(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  const fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  const std::string ps = p.lexically_normal().string();
  std::string ds = d.lexically_normal().string();
  if (ds.empty()) return false;
  if (ds.back() != '/') ds += '/';
  return absl::StartsWith(ps, ds);
}

}  // namespace

std::vector<std::string> DefaultPassEnv() {
  return absl::StrSplit(kDefaultPassEnv, ',', absl::SkipEmpty());
}

namespace {
constexpr char kRefusedPayload[] = "dial.worker/refused";

bool PlainName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}
}  // namespace

absl::Status Refused(absl::Status status) {
  status.SetPayload(kRefusedPayload, absl::Cord("1"));
  return status;
}

bool IsRefused(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kRefusedPayload).has_value();
}

absl::Status CheckTrialEnv(const TrialPolicy& policy, const std::string& field,
                           const std::string& name) {
  const std::string where = absl::StrCat(field, ".", name);
  for (const auto& allowed : policy.allowed_env) {
    if (allowed == name) return absl::OkStatus();
  }
  static const std::vector<std::string> safe =
      absl::StrSplit(kSafeEnv, ',', absl::SkipEmpty());
  if (std::find(safe.begin(), safe.end(), name) != safe.end()) {
    return absl::OkStatus();
  }
  static const std::vector<std::string> reserved =
      absl::StrSplit(kReservedEnv, ',', absl::SkipEmpty());
  for (const auto& glob : reserved) {
    if (fnmatch(glob.c_str(), name.c_str(), FNM_CASEFOLD) == 0) {
      return Refused(absl::PermissionDeniedError(absl::StrCat(
          where,
          ": refused by this worker: loader, shell, interpreter, runtime "
          "and hook variables (",
          glob,
          ") can make the allowed program load or run other code; a worker "
          "that trusts its studies with it allows it with --allow-env=",
          name)));
    }
  }
  if (PlainName(name)) return absl::OkStatus();
  for (const auto& glob : policy.allowed_env) {
    if (fnmatch(glob.c_str(), name.c_str(), 0) == 0) return absl::OkStatus();
  }
  return Refused(absl::PermissionDeniedError(absl::StrCat(
      where,
      ": not allowed on this worker: a study may set plain names (letters, "
      "digits and '_') outside the reserved families, and what --allow-env "
      "adds",
      policy.allowed_env.empty()
          ? std::string()
          : absl::StrCat(" (", absl::StrJoin(policy.allowed_env, ", "), ")"))));
}

absl::Status CheckCommand(const TrialPolicy& policy,
                          const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("trial.command.argv is empty");
  }
  const std::string& program = argv[0];
  for (absl::string_view part : absl::StrSplit(program, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "trial.command.argv[0] '", program,
          "': a '..' component is not allowed (name the program directly)"));
    }
  }
  if (policy.allow_any_command) return absl::OkStatus();
  for (const auto& glob : policy.allowed_commands) {
    if (fnmatch(glob.c_str(), program.c_str(), FNM_PATHNAME) == 0) {
      return absl::OkStatus();
    }
  }
  return Refused(absl::PermissionDeniedError(absl::StrCat(
      "command '", program,
      "' is not allowed on this worker: start dial-worker with "
      "--allow-command=GLOB matching it (e.g. --allow-command=",
      program, ") or --allow-any-command",
      policy.allowed_commands.empty()
          ? std::string(" (it allows only the built-in trainer)")
          : absl::StrCat(" (it allows ",
                         absl::StrJoin(policy.allowed_commands, ", "), ")"))));
}

std::map<std::string, std::string> PassedEnvironment(
    const TrialPolicy& policy,
    const std::map<std::string, std::string>& worker_env) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : worker_env) {
    if (absl::StartsWith(name, "DIAL_")) continue;
    for (const auto& glob : policy.pass_env) {
      if (fnmatch(glob.c_str(), name.c_str(), 0) == 0) {
        out[name] = value;
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ResolveSecrets(
    const TrialPolicy& policy,
    const google::protobuf::Map<std::string, std::string>& secret_env,
    const std::map<std::string, std::string>& worker_env) {
  std::map<std::string, std::string> out;
  for (const auto& [variable, secret] : secret_env) {
    const std::string where =
        absl::StrCat("trial.command.secret_env.", variable);
    if (!ValidSecretName(secret)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": secret name '", secret,
          "' must be 1-255 characters of [A-Za-z0-9._-], not starting "
          "with '.'"));
    }
    if (!policy.secrets_dir.empty()) {
      const std::string path = policy.secrets_dir + "/" + secret;
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::string value(kMaxSecretBytes + 1, '\0');
        in.read(value.data(), static_cast<std::streamsize>(value.size()));
        if (in.bad()) {
          return absl::UnavailableError(
              absl::StrCat(where, ": cannot read secret file ", path));
        }
        value.resize(static_cast<size_t>(in.gcount()));
        if (value.size() > kMaxSecretBytes) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": secret file ", path, " is over ",
                           kMaxSecretBytes, " bytes"));
        }
        while (!value.empty() &&
               (value.back() == '\n' || value.back() == '\r')) {
          value.pop_back();
        }
        out[variable] = std::move(value);
        continue;
      }
      if (errno != ENOENT) {
        return absl::UnavailableError(
            absl::StrCat(where, ": cannot read secret file ", path, ": ",
                         std::strerror(errno)));
      }
    }
    if (policy.secrets_from_env) {
      if (absl::StartsWith(secret, "DIAL_")) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": secret '", secret,
            "' would be the worker's own DIAL_* variable; those are never "
            "handed to trials"));
      }
      auto it = worker_env.find(secret);
      if (it != worker_env.end()) {
        out[variable] = it->second;
        continue;
      }
    }
    return absl::NotFoundError(absl::StrCat(
        where, ": secret '", secret, "' is not on this worker (",
        policy.secrets_dir.empty()
            ? std::string("no --secrets-dir")
            : absl::StrCat("no file ", policy.secrets_dir, "/", secret),
        policy.secrets_from_env ? absl::StrCat(", no variable ", secret,
                                               " in the worker's environment)")
                                : std::string(")")));
  }
  return out;
}

absl::Status CheckRestoreCheckpoint(const std::string& id,
                                    const std::string& study, int64_t trial,
                                    const storage::FileCheckpointStore* store) {
  if (id.empty()) return absl::OkStatus();
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("restore checkpoint '", id, "' refused: ", why));
  };
  if (store == nullptr) return refuse("this worker has no checkpoint root");
  const fs::path root = store->root();
  absl::Status own = storage::CheckpointStore::CheckOwnId(id, study, trial);
  if (!own.ok()) return refuse(own.message());
  // A store id resolves through the store; a command trial's path is
  // relative to the root. Either must stay inside the trial's directory
  // once symbolic links are followed.
  std::string path = (root / id).string();
  if (storage::CheckpointStore::ParseId(id).ok()) {
    auto resolved = store->PathOf(id);
    if (!resolved.ok()) return refuse(resolved.status().message());
    path = *resolved;
  }
  if (!Inside(path, root)) {
    return refuse(absl::StrCat("it resolves outside the checkpoint root ",
                               root.string()));
  }
  const fs::path trial_dir = root / study / std::to_string(trial);
  if (!Inside(path, trial_dir)) {
    return refuse(absl::StrCat("it resolves outside the trial's directory ",
                               trial_dir.string()));
  }
  // And reached through no link at all (a trial can plant them).
  absl::Status plain = CheckNoLinksBeneath(root.string(), path);
  if (absl::IsPermissionDenied(plain)) return refuse(plain.message());
  return absl::OkStatus();
}

}  // namespace dial::worker
