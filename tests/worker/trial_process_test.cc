// TrialProcess and the spawning helper under it (common/process.h): the
// protocol pipes on fds 3 and 4, the environment, the process group, the
// exit-127 contract for a program that cannot run, and Spawn's errors.
#include "worker/trial_process.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/process.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TrialProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as dial-worker's main
    std::string tmpl = (fs::temp_directory_path() / "dial-process-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  TrialProcessOptions Shell(const std::string& script) {
    TrialProcessOptions o;
    o.argv = {"sh", "-c", script};  // looked up in PATH
    o.stdout_path = (dir_ / "out").string();
    o.stderr_path = (dir_ / "err").string();
    return o;
  }
  fs::path dir_;
};

TEST_F(TrialProcessTest, SpeaksOnFds3And4InItsOwnProcessGroup) {
  TrialProcessOptions o = Shell(
      // Field 5 of /proc/self/stat is the process group.
      "read -r _ _ _ _ pgrp _ < /proc/$$/stat; "
      "echo \"$DIAL_TRIAL $DIAL_REPORT_FD $DIAL_DECISION_FD $pgrp $$\" >&3; "
      "read -r d <&4; echo \"got $d\" >&3; echo to-stdout; echo to-stderr >&2");
  o.env["DIAL_TRIAL"] = "12";
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  auto line = (*p)->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(line.has_value());
  const std::string pid = std::to_string((*p)->pid());
  EXPECT_EQ(*line, "12 3 4 " + pid + " " + pid);
  ASSERT_TRUE((*p)->WriteLine("CONTINUE").ok());
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "got CONTINUE");
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), std::nullopt);  // closed
  const int status = (*p)->WaitOrKill(absl::Seconds(20));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ((*p)->StderrTail(5), "to-stderr");
}

TEST_F(TrialProcessTest, AProgramThatCannotRunExits127AndSaysSo) {
  TrialProcessOptions o = Shell("");
  o.argv = {"/nonexistent/dial-trial"};
  auto p = TrialProcess::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  const int status = (*p)->WaitOrKill(absl::Seconds(20));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127) << status;
  EXPECT_EQ((*p)->StderrTail(5),
            "dial-worker: cannot run /nonexistent/dial-trial");
  EXPECT_EQ(DescribeExit(status), "exit code 127");
}

TEST_F(TrialProcessTest, SignalReachesTheWholeGroup) {
  // The shell's child sleeps too: SIGKILL to the group ends both, so the
  // report pipe (held by both) closes.
  auto p = TrialProcess::Start(Shell("sleep 600 & echo started >&3; wait"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), "started");
  (*p)->Signal(SIGKILL);
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(20)), std::nullopt);
  const int status = (*p)->WaitOrKill(absl::Seconds(20));
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(TrialProcessTest, LogFilesThatCannotBeCreatedAreUnavailable) {
  TrialProcessOptions o = Shell("true");
  o.stdout_path = "/nonexistent-dir/out";
  auto p = TrialProcess::Start(std::move(o));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent-dir/out"));
}

TEST(SpawnTest, RejectsBadInputWithoutStartingAnything) {
  SpawnOptions empty;
  EXPECT_EQ(Spawn(empty).status().code(), absl::StatusCode::kInvalidArgument);

  SpawnOptions bad_env;
  bad_env.argv = {"true"};
  bad_env.env = std::map<std::string, std::string>{{"A=B", "c"}};
  EXPECT_EQ(Spawn(bad_env).status().code(), absl::StatusCode::kInvalidArgument);

  SpawnOptions nul;
  nul.argv = {"true", std::string("a\0b", 3)};
  EXPECT_EQ(Spawn(nul).status().code(), absl::StatusCode::kInvalidArgument);

  SpawnOptions stdio_as_extra;
  stdio_as_extra.argv = {"true"};
  stdio_as_extra.extra_fds = {{1, 2}};
  EXPECT_EQ(Spawn(stdio_as_extra).status().code(),
            absl::StatusCode::kInvalidArgument);

  SpawnOptions closed_fd;
  closed_fd.argv = {"true"};
  closed_fd.stdout_fd = ChildFd::Fd(1000000);
  EXPECT_EQ(Spawn(closed_fd).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SpawnTest, AMissingProgramIsNotFound) {
  SpawnOptions o;
  o.argv = {"dial-no-such-program-anywhere"};
  auto pid = Spawn(o);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pid.status().message(),
              HasSubstr("cannot run dial-no-such-program-anywhere"));

  o.argv = {"/dev/null"};  // not executable
  EXPECT_EQ(Spawn(o).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(SpawnTest, CrossedDescriptorsDoNotClobberEachOther) {
  auto a = MakePipe();
  auto b = MakePipe();
  ASSERT_TRUE(a.ok() && b.ok());
  // The parent's fds 8 and 9 become the child's 9 and 8 (a shell
  // redirects single-digit fds only).
  for (int fd : {8, 9}) {
    if (fcntl(fd, F_GETFD) >= 0) GTEST_SKIP() << "fd " << fd << " is in use";
  }
  ASSERT_EQ(dup2(a->write.get(), 8), 8);
  ASSERT_EQ(dup2(b->write.get(), 9), 9);
  ScopedFd fd8(8), fd9(9);
  a->write.reset();
  b->write.reset();
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo to8 >&8; echo to9 >&9"};
  o.search_path = false;
  o.env = std::map<std::string, std::string>{{"PATH", "/bin:/usr/bin"}};
  o.extra_fds = {{8, 9}, {9, 8}};
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status();
  fd8.reset();
  fd9.reset();
  auto read_all = [](int fd) {
    std::string text;
    char buf[256];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, n);
    return text;
  };
  EXPECT_EQ(read_all(b->read.get()), "to8\n");  // child 8 = parent's 9
  EXPECT_EQ(read_all(a->read.get()), "to9\n");
  auto status = WaitForExit(*pid);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

TEST(SpawnTest, TheEnvironmentIsReplacedWhenGiven) {
  auto out = MakePipe();
  ASSERT_TRUE(out.ok());
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"${ONLY-unset} ${HOME-unset}\""};
  o.env = std::map<std::string, std::string>{{"ONLY", "this"}};
  o.stdout_fd = ChildFd::Fd(out->write.get());
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status();
  out->write.reset();
  char buf[64] = {0};
  ASSERT_GT(read(out->read.get(), buf, sizeof(buf) - 1), 0);
  EXPECT_STREQ(buf, "this unset\n");
  ASSERT_TRUE(WaitForExit(*pid).ok());
}

TEST(SpawnTest, WaitOrKillKillsAfterTheGrace) {
  SpawnOptions o;
  o.argv = {"sleep", "600"};
  o.new_process_group = true;
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto status = WaitOrKill(*pid, absl::Milliseconds(50), /*group=*/true);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  EXPECT_EQ(WaitForExit(*pid).status().code(),
            absl::StatusCode::kFailedPrecondition);  // already reaped
}

}  // namespace
}  // namespace dial::worker
