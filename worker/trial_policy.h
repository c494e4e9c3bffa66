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

// What a study may set through trial.command.env and secret_env
// (docs/workers.md, "Variables a study may set"): by default any plain
// name (letters, digits and '_', not starting with a digit: MY_FLAG,
// WANDB_MODE, STEPS) outside the reserved families below, or one of
// kSafeEnv; --allow-env adds names and globs. This is not a closed list of
// known names: a plain name of no reserved family passes.
//
// Reserved families (fnmatch globs, case-insensitive): the dynamic
// loader's, shells' start-up and option variables, interpreters' start-up
// and module paths, programs' hooks that run a command, compilers that a
// JIT (torch.compile, Triton, cpp extensions) runs with the study's flags,
// and the runtimes a training program loads (CUDA, NCCL, OpenMP, MPI, UCX,
// PyTorch, TensorFlow, XLA, Triton, Vulkan, OpenCL, EGL, Mesa, GTK/GIO)
// whose variables name libraries, plugins and tools to load. Each can
// make an allowed program run code of the study's choosing before (or
// instead of) what it was allowed for; a name of these families that is
// not known to be safe is refused, new ones included. The suffix globs
// catch loader words in any family (a *_PLUGIN_PATH, a *_LIBRARY_PATH, a
// *_FILENAMES list of ICDs), as whole words, so that ordinary names
// (DATALOADER_WORKERS, USE_PLUGINS, MY_TOOL_NAME) stay plain.
inline constexpr char kReservedEnv[] =
    "LD_*,DYLD_*,GCONV_PATH,GLIBC_TUNABLES,LOCPATH,NLSPATH,HOSTALIASES,"
    "RESOLV_*,MALLOC_*,BASH*,ENV,SHELLOPTS,PS4,PROMPT_COMMAND,IFS,CDPATH,"
    "GLOBIGNORE,ZDOTDIR,ZSH*,KSH*,FPATH,PATH,HOME,SHELL,XDG_*,PYTHON*,"
    "BROWSER,PERL*,RUBY*,GEM_*,NODE_*,NPM_*,JAVA_TOOL_OPTIONS,_JAVA_OPTIONS,"
    "JDK_JAVA_OPTIONS,CLASSPATH,LUA_*,TCL*,R_*,JULIA_*,GIT_*,EDITOR,VISUAL,"
    "PAGER,MANPAGER,LESSOPEN,LESSCLOSE,OPENSSL_*,SSL_*,IPYTHONDIR,JUPYTER_*,"
    "CUDA_*,NCCL_*,OMP_*,KMP_*,GOMP_*,TORCH*,PYTORCH_*,TF_*,XLA_*,JAX_*,"
    "VK_*,__*,OCL_*,OMPI_*,PMIX_*,UCX_*,TRITON_*,LIBGL_*,GTK_*,GIO_*,"
    "MPLBACKEND,CC,CXX,CPP,FC,CFLAGS,CXXFLAGS,CPPFLAGS,LDFLAGS,LDSHARED,"
    "LIBS,CUDAHOSTCXX,NVCC_*,CPATH,C_INCLUDE_PATH,CPLUS_INCLUDE_PATH,"
    "LIBRARY_PATH,*_PRELOAD,*_PRELOAD_*,*_PLUGIN,*_PLUGIN_PATH*,"
    "*_PLUGIN_DIR*,*_PLUGIN_SYSTEM_PATH*,*_PLUGIN_LIB*,*_INJECTION*,"
    "*_LIBRARY,*_LIBRARY_PATH*,*_LIBRARIES,*_LIB_PATH,*_FILENAMES,"
    "*_MODULES,*_HOOK,*_HOOKS,*_HOOK_PATH,*_HOOKS_PATH,*_HOOK_COMMAND,"
    "*_LOADER,*_LOADER_PATH*";

// Names of the reserved families that only tune how a runtime runs, not
// what it loads, and names the worker sets itself for every trial
// (OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES: a study's value is overridden
// by the worker's): allowed by default.
inline constexpr char kSafeEnv[] =
    "PYTHONUNBUFFERED,PYTHONHASHSEED,PYTHONDONTWRITEBYTECODE,"
    "PYTHONIOENCODING,PYTHONFAULTHANDLER,PYTHONUTF8,PYTHONNOUSERSITE,"
    "CUDA_LAUNCH_BLOCKING,CUDA_DEVICE_ORDER,CUDA_MODULE_LOADING,"
    "CUDA_DEVICE_MAX_CONNECTIONS,CUDA_VISIBLE_DEVICES,OMP_NUM_THREADS,"
    "NCCL_DEBUG,NCCL_DEBUG_SUBSYS,"
    "NCCL_SOCKET_IFNAME,NCCL_IB_DISABLE,NCCL_P2P_DISABLE,NCCL_SHM_DISABLE,"
    "NCCL_ALGO,NCCL_PROTO,NCCL_MIN_NCHANNELS,NCCL_MAX_NCHANNELS,"
    "NCCL_BUFFSIZE,NCCL_NTHREADS,NCCL_ASYNC_ERROR_HANDLING,OMP_PROC_BIND,"
    "OMP_PLACES,OMP_SCHEDULE,OMP_DYNAMIC,OMP_STACKSIZE,OMP_WAIT_POLICY,"
    "OMP_MAX_ACTIVE_LEVELS,KMP_AFFINITY,KMP_BLOCKTIME,"
    "PYTORCH_CUDA_ALLOC_CONF,PYTORCH_NO_CUDA_MEMORY_CACHING,"
    "TORCH_SHOW_CPP_STACKTRACES,TORCH_CPP_LOG_LEVEL,"
    "TORCH_DISTRIBUTED_DEBUG,TF_CPP_MIN_LOG_LEVEL,"
    "TF_FORCE_GPU_ALLOW_GROWTH,XLA_PYTHON_CLIENT_PREALLOCATE,"
    "XLA_PYTHON_CLIENT_MEM_FRACTION";

struct TrialPolicy {
  // fnmatch(3) globs (FNM_PATHNAME: '*' does not cross '/') that argv[0] of
  // a command trial must match.
  std::vector<std::string> allowed_commands;
  bool allow_any_command = false;
  // Names or globs of the worker's variables passed to trials. The
  // worker's own DIAL_* variables (its token among them) never pass.
  std::vector<std::string> pass_env = DefaultPassEnv();
  // Names and globs (fnmatch) a study may set through trial.command.env
  // and secret_env besides the default (--allow-env). A name of a
  // kReservedEnv family passes only when an entry names it exactly, never
  // through a glob.
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
  // process of that user); under a per-attempt user, that user's
  // RLIMIT_NPROC exactly. 0: no limit.
  int64_t max_pids = 4096;
  // Under per-attempt users with private mounts: the size of the trial's
  // own /tmp, /var/tmp and /dev/shm (tmpfs, each), in MiB (--trial-tmp-mb).
  int64_t private_tmp_mb = 1024;
};

// A refusal by this worker's own policy (a command, a variable name, an
// isolation it does not allow or give), as opposed to a failure: the
// worker tells the scheduler (FinishTrialRequest.refused) so it does not
// count against the trial. `status` gets a payload that IsRefused finds.
absl::Status Refused(absl::Status status);
bool IsRefused(const absl::Status& status);

// OK when a command trial with this argv may run here. PERMISSION_DENIED
// (Refused) naming argv[0] and the flags that would allow it;
// INVALID_ARGUMENT for an empty argv or an argv[0] with a ".." component.
absl::Status CheckCommand(const TrialPolicy& policy,
                          const std::vector<std::string>& argv);

// OK when a study may set the variable `name` on this worker (see
// kReservedEnv and TrialPolicy::allowed_env). PERMISSION_DENIED naming
// `field`.`name`, the reason and the flag that would allow it, marked
// Refused.
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
