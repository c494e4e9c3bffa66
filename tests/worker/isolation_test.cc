// Per-attempt users and what the worker says it enforces (findings 1 and
// 9): the isolation a worker announces, the uid pool, the directory
// hand-over that never follows a link, and a trial that requires isolation
// on a worker that cannot give it. The tests that switch users need root
// and skip themselves without it.
#include "worker/isolation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/process.h"
#include "worker/trial_attempt.h"
#include "worker/trial_users.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Unused on this host (see the e2e tests); a test takes a slice of its own.
constexpr uid_t kFirstUid = 61500;

std::vector<std::string> List(
    const google::protobuf::RepeatedPtrField<std::string>& r) {
  return {r.begin(), r.end()};
}

TEST(DescribeIsolationTest, AnUnenforcedExplicitPidLimitRefusesToStart) {
  IsolationInputs in;
  in.max_pids = 64;
  in.max_pids_explicit = true;  // no cgroup, no user of the trials' own
  auto refused = DescribeIsolation(in);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--trial-max-pids=64 cannot be enforced"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--allow-unenforced-limits"));
  in.allow_unenforced = true;
  auto allowed = DescribeIsolation(in);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_FALSE(allowed->isolated());
  EXPECT_EQ(allowed->method(), "none");
  EXPECT_THAT(List(allowed->unenforced_limits()),
              ElementsAre("memory", "pids"));
  // The default limit, not asked for explicitly: said, not refused.
  in.allow_unenforced = false;
  in.max_pids_explicit = false;
  auto by_default = DescribeIsolation(in);
  ASSERT_TRUE(by_default.ok());
  EXPECT_THAT(List(by_default->unenforced_limits()),
              ElementsAre("memory", "pids"));
}

TEST(DescribeIsolationTest, PerAttemptUsersEnforceNprocAndIsolate) {
  IsolationInputs in;
  in.root = true;
  in.uid_range = true;
  in.max_pids = 64;
  in.max_pids_explicit = true;
  auto got = DescribeIsolation(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->isolated());
  EXPECT_EQ(got->method(), "per-attempt-user");
  EXPECT_TRUE(got->reason().empty());
  EXPECT_THAT(List(got->enforced_limits()), ElementsAre("nproc"));
  in.cgroups = in.memory_controller = in.pids_controller = true;
  got = DescribeIsolation(in);
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(List(got->enforced_limits()),
              ElementsAre("memory", "pids", "nproc"));
  EXPECT_TRUE(got->unenforced_limits().empty());
}

TEST(DescribeIsolationTest, ASharedRunAsUserIsNotIsolation) {
  IsolationInputs in;
  in.root = true;
  in.run_as = "nobody";
  in.max_pids = 64;
  in.max_pids_explicit = true;
  auto got = DescribeIsolation(in);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->isolated());
  EXPECT_THAT(got->reason(), HasSubstr("one user nobody (--run-as)"));
  EXPECT_THAT(List(got->enforced_limits()), ElementsAre("nproc"));
  in.uid_range = true;
  EXPECT_EQ(DescribeIsolation(in).status().code(),
            absl::StatusCode::kInvalidArgument);
  in.run_as.clear();
  in.root = false;
  EXPECT_THAT(DescribeIsolation(in).status().message(),
              HasSubstr("must run as root"));
}

TEST(ParseUidRangeTest, AcceptsARangeOfUnprivilegedUids) {
  auto range = ParseUidRange("61000-61999");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->first, 61000u);
  EXPECT_EQ(range->last, 61999u);
  for (const char* bad :
       {"", "61000", "a-b", "2-1", "0-10", "65000-65535", "1-2-3"}) {
    auto got = ParseUidRange(bad);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(got.status().message(), HasSubstr("--run-as-range")) << bad;
  }
}

class RootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
    std::string tmpl = (fs::temp_directory_path() / "dial-iso-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }
  static uid_t Owner(const fs::path& p) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0 ? st.st_uid : ~0u;
  }
  fs::path dir_;
};

// A trial may plant links in its own directory; handing the directory to
// the next attempt's user (or back to root) changes no file elsewhere.
TEST_F(RootTest, HandOverChangesOwnersBelowWithoutFollowingLinks) {
  const fs::path trial = dir_ / "trial";
  const fs::path outside = dir_ / "outside";
  fs::create_directories(trial / "sub");
  fs::create_directories(outside);
  std::ofstream(outside / "victim") << "x";
  std::ofstream(trial / "sub" / "ckpt") << "y";
  fs::create_symlink(outside, trial / "link-dir");
  fs::create_symlink(outside / "victim", trial / "sub" / "link-file");
  std::ofstream(outside / "hard") << "z";
  fs::create_hard_link(outside / "hard", trial / "hard");

  ASSERT_TRUE(HandOverTree(trial.string(), kFirstUid, kFirstUid).ok());
  EXPECT_EQ(Owner(trial), kFirstUid);
  EXPECT_EQ(fs::status(trial).permissions() & fs::perms::all,
            fs::perms::owner_all);
  EXPECT_EQ(Owner(trial / "sub"), kFirstUid);
  EXPECT_EQ(Owner(trial / "sub" / "ckpt"), kFirstUid);
  EXPECT_EQ(Owner(trial / "link-dir"), kFirstUid);  // the link itself
  EXPECT_EQ(Owner(outside), 0u) << "followed a link to a directory";
  EXPECT_EQ(Owner(outside / "victim"), 0u) << "followed a link to a file";
  EXPECT_EQ(Owner(outside / "hard"), 0u) << "took a hard-linked inode";

  ASSERT_TRUE(HandOverTree(trial.string(), 0, 0).ok());
  EXPECT_EQ(Owner(trial / "sub" / "ckpt"), 0u);
  // A link in place of the directory itself is refused.
  fs::create_symlink(outside, dir_ / "planted");
  EXPECT_EQ(
      HandOverTree((dir_ / "planted").string(), kFirstUid, kFirstUid).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Owner(outside), 0u);
}

// A uid is never drawn while a lease holds it or a process runs as it;
// releasing a lease kills what still runs as its uid.
TEST_F(RootTest, AUidInUseIsNotDrawnAndReleaseKillsItsProcesses) {
  TrialUsers users({kFirstUid + 10, kFirstUid + 11});
  auto first = users.Acquire();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->uid(), kFirstUid + 10);
  // A process left running as the second uid (an attempt's escaped
  // child, another worker's trial) keeps it out of the pool.
  SpawnOptions sleeper;
  sleeper.argv = {"sleep", "300"};
  sleeper.run_as = RunAs{kFirstUid + 11, kFirstUid + 11, {}, "x", "/"};
  auto pid = Spawn(sleeper);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(users.Acquire().status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(KillUserProcesses(kFirstUid + 11));
  (void)WaitForExit(*pid);
  auto second = users.Acquire();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->uid(), kFirstUid + 11);

  // The first lease's processes die with it, its directory goes to root.
  const fs::path trial = dir_ / "t";
  ASSERT_TRUE((*first)->Give(trial.string()).ok());
  EXPECT_EQ(Owner(trial), kFirstUid + 10);
  sleeper.run_as = (*first)->run_as();
  auto child = Spawn(sleeper);
  ASSERT_TRUE(child.ok());
  (*first)->Release();
  auto status = WaitForExit(*child);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  EXPECT_EQ(Owner(trial), 0u);
  first->reset();
  EXPECT_TRUE(users.Acquire().ok()) << "the released uid came back";
}

// An attempt under TrialUsers runs as a uid of its own, in its own 0700
// work directory, with a /proc that shows no other user's process; when
// it stops its directories go back to root.
TEST_F(RootTest, AnAttemptRunsAsItsOwnUserInItsOwnDirectories) {
  chmod(dir_.c_str(), 0755);
  TrialUsers users({kFirstUid + 20, kFirstUid + 29});
  TrialAttemptOptions o;
  o.assignment.mutable_trial()->set_study("s");
  o.assignment.mutable_trial()->set_number(3);
  o.assignment.set_attempt(2);
  auto* command = o.assignment.mutable_run()->mutable_command();
  command->add_argv("/bin/sh");
  command->add_argv("-c");
  command->add_argv(
      "echo \"$(id -u) $(pwd) $HOME $TMPDIR\" > \"$DIAL_CHECKPOINT_DIR/who\"; "
      "cat /proc/1/cmdline > /dev/null 2>&1; "
      "echo $? > \"$DIAL_CHECKPOINT_DIR/proc1\"; "
      "touch \"$DIAL_CHECKPOINT_DIR/ckpt\"");
  o.policy.allow_any_command = true;
  o.policy.max_pids = 16;
  o.work_dir = (dir_ / "work").string();
  o.checkpoint_root = (dir_ / "ckpt").string();
  o.users = &users;
  fs::create_directories(o.work_dir);
  fs::create_directories(o.checkpoint_root);
  auto attempt = TrialAttempt::Start(o);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  const fs::path work = dir_ / "work" / "s-3-a2.work";
  const fs::path ckpt = dir_ / "ckpt" / "s" / "3";
  EXPECT_EQ(Owner(work), kFirstUid + 20);
  EXPECT_EQ(Owner(ckpt), kFirstUid + 20);
  const int status = (*attempt)->Stop(false, absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::ifstream who(ckpt / "who");
  std::string uid, cwd, home, tmpdir;
  who >> uid >> cwd >> home >> tmpdir;
  EXPECT_EQ(uid, std::to_string(kFirstUid + 20));
  EXPECT_EQ(cwd, work.string());
  EXPECT_EQ(home, work.string());
  EXPECT_EQ(tmpdir, work.string());
  std::ifstream proc1(ckpt / "proc1");
  std::string rc;
  proc1 >> rc;
  EXPECT_NE(rc, "0") << "it read the command line of another user's process";
  EXPECT_TRUE(fs::exists(ckpt / "ckpt"));
  // Handed back to root once stopped (the work directory removed);
  // parents not listable by others.
  EXPECT_FALSE(fs::exists(work));
  EXPECT_EQ(Owner(ckpt), 0u);
  EXPECT_EQ(Owner(ckpt / "ckpt"), 0u);
  struct stat st;
  ASSERT_EQ(stat((dir_ / "ckpt" / "s").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  ASSERT_EQ(stat((dir_ / "work").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  ASSERT_EQ(stat((dir_ / "work" / "s-3-a2.out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "its log is readable by others";
}

// A trial's next attempt runs as another uid and is handed what the
// previous one left in its checkpoint directory, to read and to write.
TEST_F(RootTest, AResumedAttemptGetsANewUidAndItsCheckpoints) {
  chmod(dir_.c_str(), 0755);
  TrialUsers users({kFirstUid + 30, kFirstUid + 39});
  TrialAttemptOptions o;
  o.assignment.mutable_trial()->set_study("s");
  o.assignment.mutable_trial()->set_number(4);
  auto* command = o.assignment.mutable_run()->mutable_command();
  command->add_argv("/bin/sh");
  command->add_argv("-c");
  command->add_argv(
      "cd \"$DIAL_CHECKPOINT_DIR\" && mkdir -p sub && "
      "{ cat sub/state 2>/dev/null; id -u; } > sub/next && "
      "mv sub/next sub/state");
  o.policy.allow_any_command = true;
  o.work_dir = (dir_ / "work").string();
  o.checkpoint_root = (dir_ / "ckpt").string();
  o.users = &users;
  fs::create_directories(o.checkpoint_root);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    o.assignment.set_attempt(attempt);
    auto started = TrialAttempt::Start(o);
    ASSERT_TRUE(started.ok()) << started.status();
    const int status = (*started)->Stop(false, absl::Seconds(30));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << attempt;
  }
  std::ifstream state(dir_ / "ckpt" / "s" / "4" / "sub" / "state");
  std::string first, second;
  state >> first >> second;
  EXPECT_EQ(first, std::to_string(kFirstUid + 30));
  EXPECT_EQ(second, std::to_string(kFirstUid + 31));
}

// A spec that requires isolation is refused, not failed, by a worker
// without per-attempt users; nothing runs.
TEST(TrialAttemptIsolationTest, RequireIsolationIsRefusedWithoutUsers) {
  TrialAttemptOptions o;
  o.assignment.mutable_trial()->set_study("s");
  o.assignment.mutable_trial()->set_number(1);
  auto* run = o.assignment.mutable_run();
  run->mutable_command()->add_argv("/bin/true");
  run->mutable_resources()->set_require_isolation(true);
  o.policy.allow_any_command = true;
  o.work_dir = fs::temp_directory_path().string();
  auto attempt = TrialAttempt::Start(o);
  ASSERT_FALSE(attempt.ok());
  EXPECT_EQ(attempt.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(IsRefused(attempt.status()));
  EXPECT_THAT(attempt.status().message(),
              HasSubstr("trial.resources.require_isolation"));
  EXPECT_FALSE(IsRefused(absl::PermissionDeniedError("a log file")));
}

}  // namespace
}  // namespace dial::worker
