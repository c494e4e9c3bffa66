// TrialPolicy: which commands a worker runs, which of its variables a trial
// sees, where secrets come from, and which restore checkpoints it accepts.
// Pure functions; the secrets and checkpoint tests use a scoped directory.
#include "worker/trial_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Finding 1: `argv: [sh, -c, "id; env"]` ran on any worker. Now a command
// runs only when a --allow-command glob matches argv[0].
TEST(CheckCommandTest, OnlyAllowedProgramsRun) {
  TrialPolicy policy;
  absl::Status refused = CheckCommand(policy, {"sh", "-c", "id; env"});
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("'sh' is not allowed"));
  EXPECT_THAT(refused.message(), HasSubstr("--allow-command"));
  EXPECT_THAT(refused.message(), HasSubstr("--allow-any-command"));

  policy.allowed_commands = {"/usr/bin/python3*", "/opt/train/*"};
  EXPECT_TRUE(CheckCommand(policy, {"/usr/bin/python3", "x.py"}).ok());
  EXPECT_TRUE(CheckCommand(policy, {"/usr/bin/python3.11"}).ok());
  EXPECT_TRUE(CheckCommand(policy, {"/opt/train/run"}).ok());
  // '*' does not cross '/', and ".." never passes.
  EXPECT_FALSE(CheckCommand(policy, {"/opt/train/sub/run"}).ok());
  EXPECT_EQ(CheckCommand(policy, {"/opt/train/../../bin/sh"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CheckCommand(policy, {"python3"}).ok());
  EXPECT_THAT(CheckCommand(policy, {"sh"}).message(),
              HasSubstr("/usr/bin/python3*, /opt/train/*"));

  TrialPolicy any;
  any.allow_any_command = true;
  EXPECT_TRUE(CheckCommand(any, {"sh", "-c", "true"}).ok());
  EXPECT_EQ(CheckCommand(any, {}).code(), absl::StatusCode::kInvalidArgument);
}

// Finding 1: a variable set only in the worker's environment reached the
// trial. Now only --pass-env names pass, and never the worker's DIAL_*.
TEST(PassedEnvironmentTest, OnlyListedVariablesPass) {
  const std::map<std::string, std::string> worker_env = {
      {"PATH", "/usr/bin:/bin"}, {"HOME", "/home/w"},
      {"LC_ALL", "C.UTF-8"},     {"WORKER_ONLY", "leak"},
      {"DIAL_TOKEN", "t0ken"},   {"AWS_SECRET_ACCESS_KEY", "k"}};
  TrialPolicy policy;  // the default list
  auto env = PassedEnvironment(policy, worker_env);
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"},
                                                     {"HOME", "/home/w"},
                                                     {"LC_ALL", "C.UTF-8"}}));
  policy.pass_env = {"WORKER_*", "DIAL_*"};
  env = PassedEnvironment(policy, worker_env);
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"WORKER_ONLY", "leak"}}));
}

class PolicyDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dial-policy-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }
  fs::path dir_;
};

google::protobuf::Map<std::string, std::string> Secrets(
    std::initializer_list<std::pair<const std::string, std::string>> list) {
  google::protobuf::Map<std::string, std::string> m;
  for (const auto& [k, v] : list) m[k] = v;
  return m;
}

// Security round two, C1: the spec's env set BASH_ENV, LD_PRELOAD,
// PYTHONSTARTUP and the like, which run code before the allowed program.
TEST(CheckTrialEnvTest, StartUpVariablesAreRefusedUnlessNamedExactly) {
  TrialPolicy policy;  // no --allow-env
  for (const char* name :
       {"BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP",
        "PYTHONPATH", "PYTHONWARNINGS", "BROWSER", "PERL5OPT", "NODE_OPTIONS",
        "IFS", "PATH", "BASH_FUNC_ls%%", "GCONV_PATH", "JAVA_TOOL_OPTIONS"}) {
    absl::Status s = CheckTrialEnv(policy, "trial.command.env", name);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << name;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("trial.command.env.", name)));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("--allow-env=", name)));
  }
  for (const char* name : {"STEPS", "WANDB_PROJECT", "PYTHONUNBUFFERED",
                           "CUDA_LAUNCH_BLOCKING", "NCCL_DEBUG"}) {
    EXPECT_TRUE(CheckTrialEnv(policy, "trial.command.env", name).ok()) << name;
  }
  // A glob never lets an unsafe name through; the exact name does.
  policy.allowed_env = {"*", "PYTHONPATH"};
  EXPECT_FALSE(CheckTrialEnv(policy, "f", "LD_PRELOAD").ok());
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "PYTHONPATH").ok());
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "ANYTHING").ok());
  // --allow-env extends the default; it never narrows it.
  policy.allowed_env = {"WANDB_*"};
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "WANDB_MODE").ok());
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "STEPS").ok());
}

// Finding 13: library loaders of the runtimes a trainer loads slipped past
// the deny-list. The default is now plain names outside the reserved
// families, so new names of those families are refused too.
TEST(CheckTrialEnvTest, RuntimeLoaderVariablesAreRefusedByDefault) {
  TrialPolicy policy;
  for (const char* name :
       {"CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
        "OMP_TOOL_LIBRARIES", "ZDOTDIR",
        // Unknown names of the same families, and loader words anywhere.
        "CUDA_SOMETHING_NEW", "NCCL_NEW_KNOB", "OMP_TOOL", "TORCH_HOME",
        "TORCH_EXTENSIONS_DIR", "ACME_PLUGIN_PATH", "XLA_FLAGS",
        "cuda_injection64_path", "MY_LIBRARY_PATH", "BASH_FUNC_ls%%"}) {
    absl::Status s = CheckTrialEnv(policy, "trial.command.env", name);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << name;
    EXPECT_TRUE(IsRefused(s)) << name;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("trial.command.env.", name)));
  }
  // What a demanding user sets: their own names, tracking tools, and the
  // runtimes' tuning knobs known to load nothing.
  for (const char* name :
       {"MY_FLAG", "WANDB_MODE", "WANDB_API_KEY", "MLFLOW_TRACKING_URI",
        "HF_HUB_OFFLINE", "DATA_DIR", "lr_schedule", "NCCL_DEBUG",
        "NCCL_SOCKET_IFNAME", "OMP_PROC_BIND", "CUDA_LAUNCH_BLOCKING",
        "PYTORCH_CUDA_ALLOC_CONF", "TF_CPP_MIN_LOG_LEVEL"}) {
    EXPECT_TRUE(CheckTrialEnv(policy, "trial.command.env", name).ok()) << name;
  }
  // Names that are not plain names pass only through --allow-env.
  EXPECT_FALSE(CheckTrialEnv(policy, "f", "my.var").ok());
  EXPECT_FALSE(CheckTrialEnv(policy, "f", "1ST").ok());
  policy.allowed_env = {"my.*", "NCCL_NET_PLUGIN", "CUDA_*"};
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "my.var").ok());
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "NCCL_NET_PLUGIN").ok());
  // A glob never re-opens a reserved family.
  EXPECT_FALSE(CheckTrialEnv(policy, "f", "CUDA_INJECTION64_PATH").ok());
}

// Security round three review, item 11: names the worker sets itself were
// refused (the study waited for ever), ordinary names were caught by
// substring globs, and loader families were missing.
TEST(CheckTrialEnvTest, WorkerSetNamesAndOrdinaryNamesPassLoadersDoNot) {
  TrialPolicy policy;
  // Overridden by the worker's own values, as before the allow-list; the
  // worker's DIAL_* names were accepted (and overridden) then too.
  for (const char* name :
       {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES", "DIAL_SEED", "DIAL_CPU_THREADS",
        // Ordinary names that the old substring globs caught.
        "DATALOADER_WORKERS", "USE_PLUGINS", "MY_TOOL_NAME", "WEB_HOOK_URL",
        "PRELOAD_DATA", "NUM_LOADERS"}) {
    absl::Status s = CheckTrialEnv(policy, "trial.command.env", name);
    EXPECT_TRUE(s.ok()) << name << ": " << s;
  }
  for (const char* name : {"VK_ICD_FILENAMES",
                           "VK_LAYER_PATH",
                           "__EGL_VENDOR_LIBRARY_FILENAMES",
                           "__GLX_VENDOR_LIBRARY_NAME",
                           "OCL_ICD_VENDORS",
                           "OCL_ICD_FILENAMES",
                           "OMPI_MCA_plm_rsh_agent",
                           "PMIX_MCA_ptl",
                           "UCX_MODULES",
                           "TRITON_LIBCUDA_PATH",
                           "LIBGL_DRIVERS_PATH",
                           "GTK_MODULES",
                           "GIO_EXTRA_MODULES",
                           "GST_PLUGIN_PATH",
                           "QT_PLUGIN_PATH",
                           "PYTHON_MODULES",
                           "ACME_MODULES",
                           "MPLBACKEND",
                           "CC",
                           "CXX",
                           "CFLAGS",
                           "CXXFLAGS",
                           "LDFLAGS",
                           "NVCC_PREPEND_FLAGS",
                           "CPATH",
                           "LIBRARY_PATH",
                           "ACME_PLUGIN_PATH",
                           "MY_LIBRARY_PATH",
                           "JEMALLOC_PRELOAD",
                           "NCCL_NET_PLUGIN",
                           "ACME_HOOK",
                           "ACME_LOADER_PATH"}) {
    absl::Status s = CheckTrialEnv(policy, "trial.command.env", name);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << name;
    EXPECT_TRUE(IsRefused(s)) << name;
  }
  // --allow-env names one exactly to let it through.
  policy.allowed_env = {"CC", "VK_*"};
  EXPECT_TRUE(CheckTrialEnv(policy, "f", "CC").ok());
  EXPECT_FALSE(CheckTrialEnv(policy, "f", "VK_ICD_FILENAMES").ok());
}

TEST_F(PolicyDirTest, SecretsComeFromTheDirectoryThenTheEnvironment) {
  Write(dir_ / "secrets" / "api-key", "s3cret\n");
  TrialPolicy policy;
  policy.secrets_dir = (dir_ / "secrets").string();
  policy.secrets_from_env = true;
  const std::map<std::string, std::string> worker_env = {
      {"HF_TOKEN", "hf"}, {"api-key", "not this one"}};
  auto resolved = ResolveSecrets(
      policy, Secrets({{"API_KEY", "api-key"}, {"HF", "HF_TOKEN"}}),
      worker_env);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, (std::map<std::string, std::string>{
                           {"API_KEY", "s3cret"}, {"HF", "hf"}}));

  auto missing = ResolveSecrets(policy, Secrets({{"X", "nope"}}), worker_env);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("secret 'nope' is not on this worker"));

  policy.secrets_from_env = false;
  EXPECT_EQ(ResolveSecrets(policy, Secrets({{"HF", "HF_TOKEN"}}), worker_env)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PolicyDirTest, SecretNamesCannotLeaveTheDirectory) {
  Write(dir_ / "outside", "do not read\n");
  TrialPolicy policy;
  policy.secrets_dir = (dir_ / "secrets").string();
  fs::create_directories(policy.secrets_dir);
  for (const char* bad : {"../outside", "a/b", "..", ".", "", ".hidden"}) {
    auto r = ResolveSecrets(policy, Secrets({{"X", bad}}), {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // The worker's own credentials are not secrets a study can ask for.
  policy.secrets_from_env = true;
  auto token = ResolveSecrets(policy, Secrets({{"X", "DIAL_TOKEN"}}),
                              {{"DIAL_TOKEN", "t0ken"}});
  EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(token.status().message(), Not(HasSubstr("t0ken")));
}

TEST_F(PolicyDirTest, RestoreCheckpointsMustBeTheTrialsOwn) {
  auto store = storage::FileCheckpointStore::Create({(dir_ / "ckpt").string()});
  ASSERT_TRUE(store.ok()) << store.status();
  const storage::FileCheckpointStore* s = store->get();
  EXPECT_TRUE(CheckRestoreCheckpoint("", "s", 7, s).ok());
  EXPECT_TRUE(CheckRestoreCheckpoint("s/7/100", "s", 7, s).ok());
  EXPECT_TRUE(CheckRestoreCheckpoint("s/7/from-3-100", "s", 7, s).ok());
  const std::string path = (dir_ / "ckpt" / "s" / "7" / "ck-10.json").string();
  for (const std::string& bad :
       {std::string("../../../../etc/shadow"), std::string("/etc/shadow"),
        std::string("s/8/100"), std::string("other/7/100"),
        std::string("s/7/../../x"), std::string("s/07/100"), path,
        std::string("../7/100")}) {
    absl::Status refused = CheckRestoreCheckpoint(bad, "s", 7, s);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << bad;
    EXPECT_THAT(refused.message(), HasSubstr("refused")) << bad;
  }
  EXPECT_FALSE(CheckRestoreCheckpoint("s/7/100", "s", 7, nullptr).ok());
}

TEST_F(PolicyDirTest, ASymlinkOutOfTheRootIsRefused) {
  auto store = storage::FileCheckpointStore::Create({(dir_ / "ckpt").string()});
  ASSERT_TRUE(store.ok()) << store.status();
  fs::create_directories(dir_ / "elsewhere" / "7");
  fs::create_symlink(dir_ / "elsewhere", dir_ / "ckpt" / "s");
  EXPECT_FALSE(CheckRestoreCheckpoint("s/7/100", "s", 7, store->get()).ok());
}

}  // namespace
}  // namespace dial::worker
