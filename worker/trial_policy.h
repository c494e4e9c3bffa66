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
#include "common/process.h"
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

// Globs of variable names a study may not set through trial.command.env or
// secret_env unless an --allow-env entry names the variable exactly: the
// dynamic loader's, shells' start-up and option variables, interpreters'
// start-up and module paths, and programs' hooks that run a command. Each
// can make an allowed program run code of the study's choosing before (or
// instead of) what it was allowed for.
inline constexpr char kUnsafeEnv[] =
    "LD_*,DYLD_*,GCONV_PATH,GLIBC_TUNABLES,LOCPATH,NLSPATH,HOSTALIASES,"
    "RESOLV_*,MALLOC_*,BASH_ENV,ENV,BASH_FUNC_*,SHELLOPTS,BASHOPTS,PS4,"
    "PROMPT_COMMAND,IFS,CDPATH,GLOBIGNORE,PATH,HOME,SHELL,XDG_CONFIG_*,"
    "PYTHON*,BROWSER,PERL*,RUBY*,GEM_*,NODE_*,NPM_*,JAVA_TOOL_OPTIONS,"
    "_JAVA_OPTIONS,JDK_JAVA_OPTIONS,CLASSPATH,LUA_*,TCL*,R_*,JULIA_*,GIT_*,"
    "EDITOR,VISUAL,PAGER,MANPAGER,LESSOPEN,LESSCLOSE,OPENSSL_*,SSL_*,"
    "IPYTHONDIR,JUPYTER_*";

// Exceptions to kUnsafeEnv that only change how an interpreter runs, not
// what it runs.
inline constexpr char kSafeInterpreterEnv[] =
    "PYTHONUNBUFFERED,PYTHONHASHSEED,PYTHONDONTWRITEBYTECODE,"
    "PYTHONIOENCODING,PYTHONFAULTHANDLER,PYTHONUTF8,PYTHONNOUSERSITE";

struct TrialPolicy {
  // fnmatch(3) globs (FNM_PATHNAME: '*' does not cross '/') that argv[0] of
  // a command trial must match.
  std::vector<std::string> allowed_commands;
  bool allow_any_command = false;
  // Names or globs of the worker's variables passed to trials. The
  // worker's own DIAL_* variables (its token among them) never pass.
  std::vector<std::string> pass_env = DefaultPassEnv();
  // Globs (fnmatch) of the variable names a study may set through
  // trial.command.env and secret_env (--allow-env). Empty: any name
  // outside kUnsafeEnv. A name in kUnsafeEnv passes only when an entry
  // names it exactly, never through a glob.
  std::vector<std::string> allowed_env;
  // Directory of secret files (<dir>/<secret-name>); empty: none.
  std::string secrets_dir;
  // Whether a secret not found in secrets_dir may come from the worker's
  // environment (never its DIAL_* variables).
  bool secrets_from_env = false;
  // The unprivileged user trials run as (--run-as); nullopt: the worker's
  // own. The worker gives that user the trial's checkpoint directory.
  std::optional<RunAs> run_as;
  // The processes one trial may have (--trial-max-pids): pids.max of its
  // cgroup scope where the pids controller is available; with run_as, also
  // the run-as user's RLIMIT_NPROC, times `slots` (the kernel counts every
  // process of that user). 0: no limit.
  int64_t max_pids = 4096;
};

// OK when a command trial with this argv may run here. PERMISSION_DENIED
// naming argv[0] and the flags that would allow it; INVALID_ARGUMENT for
// an empty argv or an argv[0] with a ".." component.
absl::Status CheckCommand(const TrialPolicy& policy,
                          const std::vector<std::string>& argv);

// OK when a study may set the variable `name` on this worker (see
// TrialPolicy::allowed_env). PERMISSION_DENIED naming `field`.`name`, the
// reason and the flag that would allow it.
absl::Status CheckTrialEnv(const TrialPolicy& policy, const std::string& field,
                           const std::string& name);

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
