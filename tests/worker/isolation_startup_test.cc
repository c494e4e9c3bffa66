// Per-attempt users, the second review (security round three, items 1-10):
// work directories are fresh and removed, a trial's /tmp, /var/tmp and
// /dev/shm are its own, what a crashed run left is handed back at start-up,
// a range that is not the worker's alone is refused, the checkpoint root
// must be root's, an old attempt's release leaves a newer one's directory
// alone, shared directories are never changed, log and spill files are
// 0600 whatever existed, and --host is checked. The tests that switch
// users need root and skip themselves without it.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/process.h"
#include "worker/isolation.h"
#include "worker/report_buffer.h"
#include "worker/startup_checks.h"
#include "worker/trial_attempt.h"
#include "worker/trial_process.h"
#include "worker/trial_users.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Unused on this host; isolation_test.cc has 61500-61599.
constexpr uid_t kFirstUid = 61600;

class StartupRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
    std::string tmpl = (fs::temp_directory_path() / "dial-iso2-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }
  static uid_t Owner(const fs::path& p) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0 ? st.st_uid : ~0u;
  }
  static mode_t Mode(const fs::path& p) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  }
  TrialAttemptOptions Options(TrialUsers* users, const std::string& script) {
    TrialAttemptOptions o;
    o.assignment.mutable_trial()->set_study("s");
    o.assignment.mutable_trial()->set_number(1);
    o.assignment.set_attempt(1);
    auto* command = o.assignment.mutable_run()->mutable_command();
    command->add_argv("/bin/sh");
    command->add_argv("-c");
    command->add_argv(script);
    o.policy.allow_any_command = true;
    o.work_dir = (dir_ / "work").string();
    o.checkpoint_root = (dir_ / "ckpt").string();
    o.users = users;
    fs::create_directories(o.work_dir);
    fs::create_directories(o.checkpoint_root);
    return o;
  }
  // Runs one attempt to its end; returns its exit code.
  int Run(const TrialAttemptOptions& o) {
    auto attempt = TrialAttempt::Start(o);
    EXPECT_TRUE(attempt.ok()) << attempt.status();
    if (!attempt.ok()) return -1;
    const int status = (*attempt)->Stop(false, absl::Seconds(30));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string ReadText(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

// Item 1: a deleted and re-created study of the same name got the old
// <study>-<trial>-a<N>.work tree, with its HOME and TMPDIR contents, and
// the tree was never removed.
TEST_F(StartupRootTest, AWorkDirectoryIsFreshAndRemovedWhenTheAttemptEnds) {
  TrialUsers users({kFirstUid, kFirstUid + 9});
  const fs::path work = dir_ / "work" / "s-1-a1.work";
  const fs::path outside = dir_ / "outside";
  fs::create_directories(work / "old-home");
  fs::create_directories(outside);
  std::ofstream(work / "old-home" / "secret") << "old study's";
  std::ofstream(outside / "keep") << "not the trial's";
  fs::create_symlink(outside, work / "link");
  chown(work.c_str(), kFirstUid + 5, kFirstUid + 5);
  auto o = Options(&users,
                   "ls -A \"$HOME\" | wc -l > \"$DIAL_CHECKPOINT_DIR/seen\"");
  ASSERT_EQ(Run(o), 0);
  EXPECT_EQ(ReadText(dir_ / "ckpt" / "s" / "1" / "seen"), "0\n")
      << "the attempt was handed an earlier work directory's contents";
  EXPECT_FALSE(fs::exists(work)) << "the work directory was not removed";
  EXPECT_EQ(ReadText(outside / "keep"), "not the trial's");
  EXPECT_TRUE(fs::exists(dir_ / "work" / "s-1-a1.out")) << "logs stay";
}

// Item 3: what a trial leaves in /tmp, /var/tmp and /dev/shm (NCCL's and
// torch's shared memory) reached the next process of its uid.
TEST_F(StartupRootTest, ATrialsTmpIsItsOwnAndGoesWithIt) {
  TrialUsers users({kFirstUid + 10, kFirstUid + 10});  // one uid: reused
  const std::string name = "dial-tmp-probe-" + std::to_string(getpid());
  auto o = Options(&users, "echo left > /tmp/" + name + " && echo left > " +
                               "/dev/shm/" + name + " && stat -c %a /tmp > " +
                               "\"$DIAL_CHECKPOINT_DIR/mode\"");
  ASSERT_EQ(Run(o), 0);
  EXPECT_FALSE(fs::exists("/tmp/" + name)) << "the host sees the trial's /tmp";
  EXPECT_FALSE(fs::exists("/dev/shm/" + name));
  EXPECT_EQ(ReadText(dir_ / "ckpt" / "s" / "1" / "mode"), "1777\n");
  o.assignment.set_attempt(2);
  o.assignment.mutable_run()->mutable_command()->set_argv(
      2, "test ! -e /tmp/" + name + " && test ! -e /dev/shm/" + name);
  EXPECT_EQ(Run(o), 0) << "the next attempt of the same uid saw the files";
}

// Item 7: an old attempt's release handed the trial's directory back to
// root although a newer attempt had been given it meanwhile.
TEST_F(StartupRootTest, AnOldReleaseLeavesANewerAttemptsDirectory) {
  TrialUsers users({kFirstUid + 20, kFirstUid + 29});
  auto old_lease = users.Acquire();
  auto new_lease = users.Acquire();
  ASSERT_TRUE(old_lease.ok() && new_lease.ok());
  const fs::path trial = dir_ / "t";
  ASSERT_TRUE((*old_lease)->Give(trial.string()).ok());
  ASSERT_TRUE((*new_lease)->Give(trial.string()).ok());
  (*old_lease)->Release();
  EXPECT_EQ(Owner(trial), (*new_lease)->uid());
  (*new_lease)->Release();
  EXPECT_EQ(Owner(trial), 0u);
}

// Item 2: a crashed worker left directories (and processes) of range uids,
// which a later attempt of another study drawing the uid could reach.
TEST_F(StartupRootTest, StartUpReclaimsWhatRangeUidsHold) {
  const UidRange range{kFirstUid + 30, kFirstUid + 39};
  const fs::path root = dir_ / "ckpt";
  const fs::path work = dir_ / "work";
  fs::create_directories(root / "s" / "1" / "sub");
  fs::create_directories(root / "s" / "2");
  fs::create_directories(work / "s-1-a1.work");
  std::ofstream(root / "s" / "1" / "sub" / "ckpt") << "x";
  for (const fs::path& p :
       {root / "s" / "1", root / "s" / "1" / "sub",
        root / "s" / "1" / "sub" / "ckpt", work / "s-1-a1.work"}) {
    ASSERT_EQ(lchown(p.c_str(), range.first, range.first), 0);
  }
  // Not the range's: left alone.
  ASSERT_EQ(lchown((root / "s" / "2").c_str(), kFirstUid + 90, 0), 0);
  SpawnOptions sleeper;
  sleeper.argv = {"sleep", "300"};
  sleeper.run_as = RunAs{range.first + 1, range.first + 1, {}, "x", "/"};
  auto pid = Spawn(sleeper);
  ASSERT_TRUE(pid.ok()) << pid.status();

  EXPECT_TRUE(KillRangeProcesses(range).ok());
  auto status = WaitForExit(*pid);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  auto reclaimed = ReclaimRangeDirectories(range, root.string(), work.string());
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_EQ(*reclaimed, 2);
  EXPECT_EQ(Owner(root / "s" / "1"), 0u);
  EXPECT_EQ(Owner(root / "s" / "1" / "sub" / "ckpt"), 0u);
  EXPECT_EQ(Owner(work / "s-1-a1.work"), 0u);
  EXPECT_EQ(Owner(root / "s" / "2"), kFirstUid + 90);
}

// Item 4: a range overlapping real accounts, or smaller than --slots.
TEST(CheckUidRangeTest, ARangeMustHoldNoAccountAndEnoughUids) {
  EXPECT_TRUE(CheckUidRange({61000, 61999}, 8).ok());
  absl::Status small = CheckUidRange({61000, 61001}, 3);
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.message(), HasSubstr("--run-as-range=61000-61001"));
  EXPECT_THAT(small.message(), HasSubstr("--slots=3"));
  EXPECT_FALSE(CheckUidRange({61000, 61000 + kMaxRangeUids}, 1).ok());
  // uid 1 is daemon on Debian, and any host has some account below 1000.
  passwd* account = getpwuid(1);
  if (account != nullptr) {
    absl::Status taken = CheckUidRange({1, 10}, 1);
    EXPECT_EQ(taken.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(taken.message(), HasSubstr("passwd entry"));
    EXPECT_THAT(taken.message(), HasSubstr(account->pw_name));
  }
  // A group with no user of the same id (Debian's staff, 50).
  for (gid_t gid = 1; gid < 1000; ++gid) {
    group* g = getgrgid(gid);
    if (g == nullptr || getpwuid(gid) != nullptr) continue;
    absl::Status taken = CheckUidRange({gid, gid}, 1);
    EXPECT_THAT(taken.message(), HasSubstr("group entry")) << gid;
    break;
  }
}

TEST(ParseUidRangeTest, StillParsesAndRefusesRootAndNobody) {
  EXPECT_TRUE(ParseUidRange("61000-61999").ok());
  EXPECT_FALSE(ParseUidRange("0-5").ok());
}

// Item 5: the owner of a checkpoint root that is not root's could swap
// <root>/<study> for a link before the hand-over.
TEST_F(StartupRootTest, TheCheckpointRootMustBeRootsAndLinksAreRefused) {
  const fs::path root = dir_ / "ckpt";
  fs::create_directories(root);
  EXPECT_TRUE(CheckRootDirectory("--checkpoint-root", root.string()).ok());
  ASSERT_EQ(chown(root.c_str(), kFirstUid + 40, kFirstUid + 40), 0);
  absl::Status foreign = CheckRootDirectory("--checkpoint-root", root.string());
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.message(), HasSubstr("--checkpoint-root"));
  EXPECT_THAT(foreign.message(), HasSubstr("not root"));
  ASSERT_EQ(chown(root.c_str(), 0, 0), 0);
  // A study directory swapped for a link: nothing beyond it is touched.
  const fs::path outside = dir_ / "outside";
  fs::create_directories(outside / "1");
  fs::create_symlink(outside, root / "s");
  TrialUsers users({kFirstUid + 41, kFirstUid + 41});
  auto lease = users.Acquire();
  ASSERT_TRUE(lease.ok());
  absl::Status given = (*lease)->GiveBeneath(root.string(), {"s", "1"});
  EXPECT_EQ(given.code(), absl::StatusCode::kFailedPrecondition) << given;
  EXPECT_EQ(Owner(outside / "1"), 0u);
  EXPECT_FALSE((*lease)->GiveBeneath(root.string(), {"..", "1"}).ok());
}

// Item 8: --work-dir=/tmp was chmod'ed 0711.
TEST_F(StartupRootTest, ASharedDirectoryIsRefusedNotChanged) {
  const fs::path shared = dir_ / "shared";
  fs::create_directories(shared);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  absl::Status refused = MakeTraverseOnly(shared.string(), true);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("sticky or writable by others"));
  EXPECT_EQ(Mode(shared), 01777u);
  EXPECT_FALSE(CheckRootDirectory("--checkpoint-root", shared.string()).ok());
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  EXPECT_FALSE(MakeTraverseOnly(shared.string(), false).ok());
  EXPECT_EQ(Mode(shared), 0777u);
}

// Item 6: the whole child setup works here (root in this container), and
// a host without hard-link protection is said not to isolate.
TEST_F(StartupRootTest, TheProbeRunsTheChildSetup) {
  EXPECT_TRUE(ProbeChildSetup(kFirstUid + 50, true, {dir_.string()}).ok());
  EXPECT_TRUE(ProbeChildSetup(kFirstUid + 50, false, {}).ok());
}

TEST(HardlinkProtectionTest, OffMeansNotIsolated) {
  const fs::path file =
      fs::temp_directory_path() / ("dial-hl-" + std::to_string(getpid()));
  std::ofstream(file) << "0\n";
  auto problem = HardlinkProtectionProblem(file.string());
  ASSERT_TRUE(problem.has_value());
  EXPECT_THAT(*problem, HasSubstr("protected_hardlinks"));
  std::ofstream(file) << "1\n";
  EXPECT_FALSE(HardlinkProtectionProblem(file.string()).has_value());
  fs::remove(file);
  EXPECT_TRUE(HardlinkProtectionProblem(file.string()).has_value());

  IsolationInputs in;
  in.root = true;
  in.uid_range = true;
  in.max_pids = 64;
  in.degraded = "no private /proc (EPERM)";
  auto got = DescribeIsolation(in);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->isolated());
  EXPECT_EQ(got->method(), "per-attempt-user");
  EXPECT_THAT(got->reason(), HasSubstr("no private /proc (EPERM)"));
}

// Item 9: a log or spill file that existed with a wider mode kept it.
TEST(LogModeTest, AnExistingFileEndsOwnerOnly) {
  const fs::path base =
      fs::temp_directory_path() / ("dial-mode-" + std::to_string(getpid()));
  std::ofstream(base.string() + ".log") << "old";
  ASSERT_EQ(chmod((base.string() + ".log").c_str(), 0644), 0);
  auto log = RotatingLog::Open(base.string() + ".log", 0);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(fs::status(base.string() + ".log").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  {
    ReportBuffer buffer(base.string(), 1);
    std::ofstream(base) << "";  // appeared after the buffer cleared it
    ASSERT_EQ(chmod(base.c_str(), 0644), 0);
    ASSERT_TRUE(buffer.Push(v1::ReportProgressRequest()).ok());  // memory
    ASSERT_TRUE(buffer.Push(v1::ReportProgressRequest()).ok());  // spilled
    EXPECT_EQ(fs::status(base).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
  }
  fs::remove(base.string() + ".log");
  fs::remove(base);
}

// Item 10: the scheduler refuses such host names; the worker says so first.
TEST(CheckHostFlagTest, PrintableAsciiWithoutSpaces) {
  EXPECT_TRUE(CheckHostFlag("gpu-01.example.org").ok());
  for (const std::string& bad :
       {std::string(""), std::string("a b"), std::string("a\tb"),
        std::string("h\x1b[2J"), std::string("h\xc3\xa9"),
        std::string(256, 'a')}) {
    absl::Status s = CheckHostFlag(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("--host"));
  }
}

}  // namespace
}  // namespace dial::worker
