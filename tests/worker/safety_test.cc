// What a trial process cannot do to its worker: leave processes behind
// (double-forked, setsid), hold a slot through its report pipe after it
// exits, hang the reader with an endless line, or fill the disk with logs;
// and, where cgroup v2 scopes can be made, that every process it starts
// is in its scope. Real child processes (/bin/sh); every wait is on a
// condition with a bounded timeout.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "storage/testing/temp_dir.h"
#include "worker/cgroups.h"
#include "worker/trial_process.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as dial-worker's main
  }
  TrialProcessOptions Shell(const std::string& script) {
    TrialProcessOptions o;
    o.argv = {"/bin/sh", "-c", script};
    o.env = {{"PATH", "/usr/bin:/bin"}};
    o.stdout_path = (dir_ / "out").string();
    o.stderr_path = (dir_ / "err").string();
    return o;
  }
  pid_t ReadPid(const std::string& name) {
    pid_t pid = 0;
    std::ifstream(dir_ / name) >> pid;
    return pid;
  }
  // A script fragment that starts `sleep 600` detached from the trial the
  // way daemons do (a double fork, optionally with setsid), holding the
  // report pipe (fd 3), and waits until it has written its pid to `name`.
  std::string Daemon(const std::string& name, bool setsid) {
    const std::string file = (dir_ / name).string();
    const std::string tmp = file + ".tmp";
    return absl::StrCat("( ", setsid ? "setsid " : "", "sh -c 'echo $$ > ", tmp,
                        "; mv ", tmp, " ", file,
                        "; exec sleep 600' & ) ; while [ ! -s ", file,
                        " ]; do :; done; ");
  }
  storage::testing::ScopedTempDir temp_{"safety"};
  const fs::path dir_ = temp_.path();
};

// Finding 6c: a double-forked grandchild outlived its trial, and one that
// held fd 3 kept the slot busy indefinitely. Now the slot's reader returns
// as soon as the main process exits, and every descendant (also one that
// called setsid) is killed.
TEST_F(SafetyTest, DaemonsHoldingTheReportPipeDieWithTheTrial) {
  // The main process waits for the test's go-ahead before it exits, so the
  // daemons' sessions can be checked while all of them live.
  const std::string go = (dir_ / "go").string();
  auto p = TrialProcess::Start(Shell(absl::StrCat(
      Daemon("plain", false), Daemon("session", true),
      "echo reported >&3; while [ ! -e ", go, " ]; do :; done; exit 0")));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "reported");
  const pid_t plain = ReadPid("plain");
  const pid_t session = ReadPid("session");
  ASSERT_GT(plain, 0);
  ASSERT_GT(session, 0);
  // The daemon in its own session is outside the trial's process group.
  EXPECT_NE(getsid(session), getsid((*p)->pid()));
  std::ofstream(go) << "go";

  // The reader returns once the main process has exited: either it saw the
  // exit, or the pipe closed because the daemons holding it were killed
  // with the trial. Waiting for them would time out (they sleep 600 s).
  ReadEnd end = ReadEnd::kNone;
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20), &end), std::nullopt);
  EXPECT_TRUE(end == ReadEnd::kExited || end == ReadEnd::kClosed)
      << "the reader waited for the daemons: " << static_cast<int>(end);
  const int status = (*p)->WaitOrKill(absl::Seconds(20));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE((*p)->killed_after_grace());
  EXPECT_FALSE(Alive(plain)) << "the double-forked daemon survived";
  EXPECT_FALSE(Alive(session)) << "the setsid daemon survived";
}

TEST_F(SafetyTest, KillingATrialKillsItsDaemonsToo) {
  auto p = TrialProcess::Start(Shell(absl::StrCat(
      Daemon("session", true), "echo started >&3; exec sleep 600")));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "started");
  const pid_t session = ReadPid("session");
  ASSERT_GT(session, 0);
  const int status = (*p)->WaitOrKill(absl::ZeroDuration());
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE((*p)->killed_after_grace());
  EXPECT_FALSE(Alive(session));
}

TEST_F(SafetyTest, LinesWrittenBeforeExitAreStillRead) {
  auto p = TrialProcess::Start(
      Shell("echo one >&3; echo two >&3; printf 'no newline' >&3"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->WaitOrKill(absl::Seconds(20)), 0);
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "one");
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "two");
  ReadEnd end = ReadEnd::kNone;
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20), &end), std::nullopt);
  EXPECT_EQ(end, ReadEnd::kExited);
}

// Finding 6e: a line over 1 MiB hung the slot for 30 s and ended as
// "killed by signal 9". Now the reader says so at once.
TEST_F(SafetyTest, ALineOver1MiBEndsReadingAtOnce) {
  auto p = TrialProcess::Start(Shell(
      "head -c 1100000 /dev/zero | tr '\\0' x >&3; echo >&3; exec sleep 600"));
  ASSERT_TRUE(p.ok()) << p.status();
  ReadEnd end = ReadEnd::kNone;
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20), &end), std::nullopt);
  EXPECT_EQ(end, ReadEnd::kLineTooLong);
  (*p)->Signal(SIGKILL);
  (*p)->WaitOrKill(absl::Seconds(20));
}

TEST_F(SafetyTest, ALineOfExactly1MiBIsALine) {
  auto p = TrialProcess::Start(
      Shell("head -c 1048576 /dev/zero | tr '\\0' x >&3; echo >&3"));
  ASSERT_TRUE(p.ok()) << p.status();
  auto line = (*p)->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->size(), kMaxReportLineBytes);
  (*p)->WaitOrKill(absl::Seconds(20));
}

// Finding 6d: trial logs had no size cap. Now each file rotates past
// max_log_bytes and one older part is kept.
TEST_F(SafetyTest, LogsRotatePastTheCap) {
  TrialProcessOptions o = Shell(
      "head -c 50000 /dev/zero | tr '\\0' o; "
      "head -c 30000 /dev/zero | tr '\\0' e >&2; echo >&2; "
      "echo last words >&2");
  o.max_log_bytes = 10000;
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->WaitOrKill(absl::Seconds(20)), 0);
  for (const char* name : {"out", "err"}) {
    EXPECT_LE(fs::file_size(dir_ / name), 10000u + 200u) << name;
    EXPECT_LE(fs::file_size(dir_ / (std::string(name) + ".1")), 10000u) << name;
    EXPECT_THAT(ReadFile(dir_ / name), HasSubstr("reached --max-log-bytes"))
        << name;
  }
  EXPECT_EQ((*p)->StderrTail(1), "last words");
}

TEST_F(SafetyTest, LogsUnderTheCapAreWhole) {
  TrialProcessOptions o = Shell("echo hello; echo oops >&2");
  o.max_log_bytes = 10000;
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->WaitOrKill(absl::Seconds(20)), 0);
  EXPECT_EQ(ReadFile(dir_ / "out"), "hello\n");
  EXPECT_EQ(ReadFile(dir_ / "err"), "oops\n");
  EXPECT_FALSE(fs::exists(dir_ / "out.1"));
}

// If the worker dies (or lets go of a trial), the supervisor kills the
// whole tree: closing the lifeline is what the worker's death does.
TEST_F(SafetyTest, ClosingTheLifelineKillsTheTrialAndItsDaemons) {
  auto out = MakePipe();
  ASSERT_TRUE(out.ok());
  SpawnOptions o;
  o.argv = {
      "/bin/sh", "-c",
      absl::StrCat(Daemon("session", true), "echo started; exec sleep 600")};
  o.stdout_fd = ChildFd::Fd(out->write.get());
  auto child = SpawnSupervised(o);
  ASSERT_TRUE(child.ok()) << child.status();
  out->write.reset();
  pollfd ready{out->read.get(), POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 20000), 1);
  char buffer[16] = {0};
  ASSERT_GT(read(out->read.get(), buffer, sizeof(buffer) - 1), 0);
  EXPECT_STREQ(buffer, "started\n");
  const pid_t session = ReadPid("session");
  ASSERT_GT(session, 0);

  child->lifeline.reset();
  int status = 0;
  ASSERT_EQ(read(child->exited.get(), &status, sizeof(status)),
            static_cast<ssize_t>(sizeof(status)));
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  auto supervisor = WaitForExit(child->supervisor);
  ASSERT_TRUE(supervisor.ok());
  EXPECT_EQ(*supervisor, 0);
  EXPECT_FALSE(Alive(child->pid));
  EXPECT_FALSE(Alive(session));
}

// A scope's CPU seconds count what ran in it: a shell loop of about a
// third of a second of CPU.
TEST_F(SafetyTest, AScopeCountsTheCpuSecondsOfWhatRanInIt) {
  auto cgroups = Cgroups::Create({});
  if (!cgroups.ok()) GTEST_SKIP() << cgroups.status();
  auto scope = (*cgroups)->NewScope(0);
  ASSERT_TRUE(scope.ok()) << scope.status();
  TrialProcessOptions o =
      Shell("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done >&3");
  o.cgroup = std::move(*scope);
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  const auto wall_start = std::chrono::steady_clock::now();
  EXPECT_EQ((*p)->WaitOrKill(absl::Seconds(60)), 0);
  const double wall = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - wall_start)
                          .count();
  auto cpu = (*p)->cgroup()->CpuSeconds();
  ASSERT_TRUE(cpu.has_value());
  EXPECT_GT(*cpu, 0.05);
  EXPECT_LE(*cpu, wall + 0.05);  // one thread: no more CPU than wall time
}

// A child that cannot join its cgroup never runs (it would be uncontained).
TEST_F(SafetyTest, AChildThatCannotJoinItsCgroupDoesNotStart) {
  ScopedFd read_only(open("/dev/null", O_RDONLY | O_CLOEXEC));
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c",
            absl::StrCat("echo ran > ", (dir_ / "ran").string())};
  o.cgroup_procs_fd = read_only.get();
  o.exec_failure_exits_127 = true;
  auto child = SpawnSupervised(o);
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(child.status().message(), HasSubstr("cannot set up the child"));
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
}

// Where cgroup v2 scopes can be made (a unified or hybrid hierarchy, as
// root or delegated), every process of the trial is in its scope, and the
// scope is empty once the trial has ended.
TEST_F(SafetyTest, ATrialAndItsDaemonsLiveInItsCgroup) {
  auto cgroups = Cgroups::Create({});
  if (!cgroups.ok()) GTEST_SKIP() << cgroups.status();
  auto scope = (*cgroups)->NewScope(0);
  ASSERT_TRUE(scope.ok()) << scope.status();
  const std::string path = (*scope)->path();
  TrialProcessOptions o = Shell(
      absl::StrCat(Daemon("session", true), "echo started >&3; read -r d <&4"));
  o.cgroup = std::move(*scope);
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "started");
  const pid_t session = ReadPid("session");
  std::vector<pid_t> pids = (*p)->cgroup()->Pids();
  EXPECT_THAT(pids, Contains((*p)->pid()));
  EXPECT_THAT(pids, Contains(session));
  ASSERT_TRUE((*p)->WriteLine("go").ok());
  EXPECT_EQ((*p)->WaitOrKill(absl::Seconds(20)), 0);
  EXPECT_TRUE((*p)->cgroup()->Pids().empty());
  EXPECT_FALSE(Alive(session));
  // What ran in it is measured (the usage record's CPU seconds).
  auto cpu = (*p)->cgroup()->CpuSeconds();
  ASSERT_TRUE(cpu.has_value());
  EXPECT_GT(*cpu, 0);
  p->reset();
  EXPECT_FALSE(fs::exists(path)) << "the scope was not removed";

  if ((*cgroups)->memory_limits()) {
    auto limited = (*cgroups)->NewScope(64);
    ASSERT_TRUE(limited.ok()) << limited.status();
    EXPECT_EQ(ReadFile((*limited)->path() + "/memory.max"), "67108864\n");
  } else {
    EXPECT_EQ((*cgroups)->NewScope(64).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// CI finding: a worker killed with SIGKILL left its empty scopes behind,
// and a later process given the same pid could not make its first scope
// (mkdir: File exists), so its trials failed. Now a taken name is
// skipped, and the empty scopes of dead processes are removed.
TEST_F(SafetyTest, ScopesLeftByAKilledWorkerAreSkippedAndRemoved) {
  auto root = Cgroups::Create({});
  if (!root.ok()) GTEST_SKIP() << root.status();
  const std::string parent =
      absl::StrCat((*root)->parent(), "/dial-test-", getpid());
  ASSERT_EQ(mkdir(parent.c_str(), 0755), 0) << std::strerror(errno);
  std::vector<std::string> left;
  auto remove = absl::MakeCleanup([&] {
    for (const std::string& dir : left) rmdir(dir.c_str());
    rmdir(parent.c_str());
  });
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  left = {absl::StrCat(parent, "/dial-trial-", getpid(), "-0"),
          absl::StrCat(parent, "/dial-trial-", dead, "-3"),
          absl::StrCat(parent, "/dial-worker-", dead)};
  for (const std::string& dir : left) ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);

  auto cgroups = Cgroups::Create({.parent = parent});
  ASSERT_TRUE(cgroups.ok()) << cgroups.status();
  EXPECT_FALSE(fs::exists(left[1])) << "a dead worker's scope was kept";
  EXPECT_FALSE(fs::exists(left[2])) << "a dead worker's leaf was kept";
  EXPECT_TRUE(fs::exists(left[0])) << "a scope named by a live pid was removed";
  {
    auto scope = (*cgroups)->NewScope(0);
    ASSERT_TRUE(scope.ok()) << scope.status();
    EXPECT_NE((*scope)->path(), left[0]);
  }
}

}  // namespace
}  // namespace dial::worker
