// What a worker lets a trial do, decided on the worker and never by the
// scheduler (see docs/workers.md, "Safe workers"): which programs it runs
// (--allow-command globs on argv[0]; the built-in trainer always), which of
// the worker's environment variables a trial sees (--pass-env), where its
// secrets come from (--secrets-dir, else the worker's environment), and
// which checkpoint it may be told to restore. Thread-safe: plain functions
// of their arguments (secrets read files).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/map.h"
#include "storage/checkpoint_store.h"

namespace dial::worker {

// The worker's variables a trial sees by default: the basics of a login
// environment, locale and time zone, temporary files, and the library path
// (CUDA installations often need it).
inline constexpr char kDefaultPassEnv[] =
    "PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,LC_*,TZ,TMPDIR,"
    "LD_LIBRARY_PATH";

// The default pass_env list, split.
std::vector<std::string> DefaultPassEnv();

struct TrialPolicy {
  // fnmatch(3) globs (FNM_PATHNAME: '*' does not cross '/') that argv[0] of
  // a command trial must match.
  std::vector<std::string> allowed_commands;
  bool allow_any_command = false;
  // Names or globs of the worker's variables passed to trials. The
  // worker's own DIAL_* variables (its token among them) never pass.
  std::vector<std::string> pass_env = DefaultPassEnv();
  // Directory of secret files (<dir>/<secret-name>); empty: none.
  std::string secrets_dir;
  // Whether a secret not found in secrets_dir may come from the worker's
  // environment (never its DIAL_* variables).
  bool secrets_from_env = true;
};

// OK when a command trial with this argv may run here. PERMISSION_DENIED
// naming argv[0] and the flags that would allow it; INVALID_ARGUMENT for
// an empty argv or an argv[0] with a ".." component.
absl::Status CheckCommand(const TrialPolicy& policy,
                          const std::vector<std::string>& argv);

// The variables of `worker_env` that policy.pass_env lets through.
std::map<std::string, std::string> PassedEnvironment(
    const TrialPolicy& policy,
    const std::map<std::string, std::string>& worker_env);

// The trial's secret variables: NAME -> the value of secret `secret_env
// [NAME]`, from <secrets_dir>/<secret> (a trailing newline stripped), else
// (with secrets_from_env) the worker's variable of that name.
// INVALID_ARGUMENT for a bad secret name (empty, '/', a leading '.', a
// character outside [A-Za-z0-9._-]) or a DIAL_* name from the environment;
// NOT_FOUND when it is nowhere; UNAVAILABLE when its file cannot be read.
// Messages name secrets, never their values.
absl::StatusOr<std::map<std::string, std::string>> ResolveSecrets(
    const TrialPolicy& policy,
    const google::protobuf::Map<std::string, std::string>& secret_env,
    const std::map<std::string, std::string>& worker_env);

// OK when `id` may be handed to the trial as DIAL_RESTORE_CHECKPOINT:
// empty, or a checkpoint id that CheckpointStore::ParseId accepts, of the
// same study and trial (its own checkpoint or a from-<t>-<s> copy in its
// directory), whose directory resolves inside the checkpoint root
// (symlinks followed). FAILED_PRECONDITION otherwise, with the reason.
// (The scheduler takes only such ids in reports; the worker checks again
// rather than trust it.)
absl::Status CheckRestoreCheckpoint(const std::string& id,
                                    const std::string& study, int64_t trial,
                                    const storage::FileCheckpointStore* store);

}  // namespace dial::worker
