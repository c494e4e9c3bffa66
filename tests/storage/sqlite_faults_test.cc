// SqliteStudyStore against a real file that cannot be written (a file-size
// limit in a forked child, as on a full disk), its durability settings, and
// its online backup.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "storage/memory_study_store.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/sqlite_read_faults.h"
#include "storage/testing/temp_dir.h"

// Fails this process's next fdatasync calls while positive, as a disk that
// reports an I/O error does (interposes the C library's).
std::atomic<int> g_failing_syncs{0};
extern "C" int fdatasync(int fd) {
  if (g_failing_syncs.load() > 0) {
    --g_failing_syncs;
    errno = EIO;
    return -1;
  }
  return static_cast<int>(::syscall(SYS_fdatasync, fd));
}

namespace dial::storage {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;
using ::testing::HasSubstr;

class SqliteFaultsTest : public ::testing::Test {
 protected:
  static v1::Study MakeStudy(const std::string& name, size_t padding = 0) {
    v1::Study study;
    study.set_name(name);
    study.mutable_spec()->set_name(name);
    study.mutable_spec()->mutable_objective()->set_metric("loss");
    // Bulk that needs many new pages: a long categorical parameter.
    if (padding > 0) {
      auto* values = study.mutable_spec()
                         ->add_search_space()
                         ->mutable_categorical()
                         ->mutable_values();
      for (size_t i = 0; i * 16 < padding; ++i) {
        values->Add(absl::StrCat("value-", i, "-padding"));
      }
    }
    study.set_state(v1::STUDY_ACTIVE);
    *study.mutable_create_time() = TimeUtil::MillisecondsToTimestamp(1000);
    *study.mutable_update_time() = TimeUtil::MillisecondsToTimestamp(1000);
    return study;
  }
  static v1::Trial MakeTrial(const std::string& study, int64_t number,
                             size_t padding = 0) {
    v1::Trial t;
    t.set_study(study);
    t.set_number(number);
    t.set_state(v1::RUNNING);
    (*t.mutable_params())["lr"].set_double_value(0.01 * (number + 1));
    t.set_last_step(-1);
    t.set_attempt(1);
    t.set_error(std::string(padding, 'e'));  // bulk for the write
    *t.mutable_create_time() = TimeUtil::MillisecondsToTimestamp(2000);
    return t;
  }
  static v1::MetricPoint Point(int64_t step, int metrics) {
    v1::MetricPoint p;
    p.set_step(step);
    for (int i = 0; i < metrics; ++i) {
      (*p.mutable_metrics())[absl::StrCat("metric_", i, "_with_a_long_name")] =
          i;
    }
    *p.mutable_time() = TimeUtil::MillisecondsToTimestamp(3000);
    return p;
  }

  // Runs `body` in a forked child and returns its report: empty when every
  // check in it passed. The child ignores SIGXFSZ, so a write past
  // RLIMIT_FSIZE fails with EFBIG the way a full disk fails with ENOSPC.
  // No store may be open in the parent: the child must take the lock.
  static std::string InChild(const std::function<std::string()>& body) {
    int fds[2];
    if (::pipe(fds) != 0) return "pipe failed";
    const pid_t pid = ::fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
      ::close(fds[0]);
      ::signal(SIGXFSZ, SIG_IGN);
      const std::string report = body();
      if (::write(fds[1], report.data(), report.size()) < 0) ::_exit(3);
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string report;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) report.append(buf, n);
    ::close(fds[0]);
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      absl::StrAppend(&report, "child died: status ", wstatus);
    }
    return report;
  }

  // Lets this process's files grow to `bytes` at most (the soft limit);
  // returns the limit it replaced.
  static rlimit LimitFileSize(rlim_t bytes) {
    rlimit old;
    ::getrlimit(RLIMIT_FSIZE, &old);
    rlimit limited = old;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
    return old;
  }

  testing::ScopedTempDir temp_{"faults"};
  const fs::path dir_ = temp_.path();
  const std::string path_ = temp_.File("dial.db");
};

// Collects failed checks in a child process, where gtest cannot report.
struct Checks {
  std::string failures;
  void Expect(bool ok, const std::string& what) {
    if (!ok) absl::StrAppend(&failures, what, "\n");
  }
  void ExpectCode(const absl::Status& status, absl::StatusCode code,
                  const std::string& what) {
    Expect(status.code() == code,
           absl::StrCat(what, ": expected ", absl::StatusCodeToString(code),
                        ", got ", status.ToString()));
  }
};

TEST_F(SqliteFaultsTest, AFullDiskIsUnavailableLosesNothingAndHeals) {
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("kept")).ok());
    ASSERT_TRUE((*store)->PutTrial(MakeTrial("kept", 0)).ok());
    ASSERT_TRUE((*store)->RecordReport(MakeTrial("kept", 0), Point(1, 2)).ok());
  }
  const std::string path = path_;
  std::string report = InChild([&] {
    Checks c;
    auto store = SqliteStudyStore::Create({path});
    if (!store.ok()) return "open: " + store.status().ToString();
    StudyStore& s = **store;
    // Maps the shared-memory index before files stop growing.
    c.Expect(s.ListStudies().ok(), "list before the limit");
    const rlimit old = LimitFileSize(16 << 10);

    const v1::Trial big = MakeTrial("kept", 1, 256 << 10);
    absl::Status put = s.PutTrial(big);  // a transaction: fails at COMMIT
    c.ExpectCode(put, absl::StatusCode::kUnavailable, "PutTrial");
    c.Expect(absl::StrContains(put.message(), path),
             "the message names the database: " + put.ToString());
    absl::Status create = s.CreateStudy(MakeStudy("big", 256 << 10));
    c.ExpectCode(create, absl::StatusCode::kUnavailable, "CreateStudy");
    v1::Trial reported = MakeTrial("kept", 0);
    reported.set_last_step(10);
    c.ExpectCode(s.RecordReport(reported, Point(10, 4000)),
                 absl::StatusCode::kUnavailable, "RecordReport");

    // Nothing of the failed calls is visible; what was there still reads.
    c.ExpectCode(s.GetTrial("kept", 1).status(), absl::StatusCode::kNotFound,
                 "GetTrial of the failed trial");
    c.ExpectCode(s.GetStudy("big").status(), absl::StatusCode::kNotFound,
                 "GetStudy of the failed study");
    auto kept = s.GetTrial("kept", 0);
    c.Expect(kept.ok() && kept->last_step() == -1,
             "trial 0 unchanged after the failed report");
    auto history = s.GetMetricHistory("kept", 0);
    c.Expect(history.ok() && history->size() == 1, "history unchanged");

    // Space returns: the same calls succeed, on the same connection.
    ::setrlimit(RLIMIT_FSIZE, &old);
    c.ExpectCode(s.PutTrial(big), absl::StatusCode::kOk, "PutTrial again");
    c.ExpectCode(s.CreateStudy(MakeStudy("big", 256 << 10)),
                 absl::StatusCode::kOk, "CreateStudy again");
    c.ExpectCode(s.RecordReport(reported, Point(10, 4000)),
                 absl::StatusCode::kOk, "RecordReport again");
    return c.failures;
  });
  EXPECT_EQ(report, "");

  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  auto kept = (*store)->GetTrial("kept", 0);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->last_step(), 10);
  auto history = (*store)->GetMetricHistory("kept", 0);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 2u);  // step 10 once, from the retry
  EXPECT_EQ((*history)[1].metrics_size(), 4000);
  auto big = (*store)->GetTrial("kept", 1);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->error().size(), 256u << 10);
  EXPECT_TRUE((*store)->GetStudy("big").ok());
  store->reset();

  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt;
  ASSERT_EQ(
      sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr),
      SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
               "ok");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(SqliteFaultsTest, DefaultsSurvivePowerLoss) {
  EXPECT_TRUE(SqliteStudyStoreOptions{}.full_sync);
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->synchronous(), 2);  // FULL: fsync at every commit
  }
  auto store = SqliteStudyStore::Create({path_, /*full_sync=*/false});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->synchronous(), 1);  // NORMAL
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
               "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(SqliteFaultsTest, BackupIsACompleteCopyTakenWhileInUse) {
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok());
  StudyStore& s = **store;
  for (const std::string name : {"a", "b"}) {
    ASSERT_TRUE(s.CreateStudy(MakeStudy(name)).ok());
    for (int n = 0; n < 3; ++n) {
      v1::Trial t = MakeTrial(name, n);
      ASSERT_TRUE(s.PutTrial(t).ok());
      t.set_last_step(5);
      ASSERT_TRUE(s.RecordReport(t, Point(5, 3)).ok());
    }
  }
  const std::string backup = (dir_ / "backup.db").string();
  auto bytes = s.Backup(backup);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, static_cast<int64_t>(fs::file_size(backup)));
  // Nothing else was left in the directory (no temporary file).
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names.count("backup.db"), 1u);
  for (const auto& name : names) {
    EXPECT_THAT(name, ::testing::Not(HasSubstr(".tmp-")));
  }
  // The live store goes on after the backup; the copy does not see that.
  ASSERT_TRUE(s.CreateStudy(MakeStudy("after")).ok());

  auto copy = SqliteStudyStore::Create({backup});
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto studies = (*copy)->ListStudies();
  ASSERT_TRUE(studies.ok());
  ASSERT_EQ(studies->size(), 2u);
  for (const std::string name : {"a", "b"}) {
    auto original = s.ListTrials(name, {});
    auto copied = (*copy)->ListTrials(name, {});
    ASSERT_TRUE(original.ok() && copied.ok());
    ASSERT_EQ(copied->size(), 3u);
    for (size_t i = 0; i < copied->size(); ++i) {
      EXPECT_TRUE(MessageDifferencer::Equals((*original)[i], (*copied)[i]));
    }
    auto history = (*copy)->GetMetricHistory(name, 2);
    ASSERT_TRUE(history.ok());
    ASSERT_EQ(history->size(), 1u);
    EXPECT_EQ((*history)[0].metrics_size(), 3);
  }
  EXPECT_EQ((*copy)->GetStudy("after").status().code(),
            absl::StatusCode::kNotFound);

  // A backup never replaces a file, not even an earlier backup (issue 16:
  // BackupDatabase used to overwrite any SQLite file); a new name holds
  // the later state.
  copy->reset();
  EXPECT_EQ(s.Backup(backup).status().code(), absl::StatusCode::kAlreadyExists);
  copy = SqliteStudyStore::Create({backup});
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ((*copy)->GetStudy("after").status().code(),
            absl::StatusCode::kNotFound);
  const std::string second = (dir_ / "backup-2.db").string();
  ASSERT_TRUE(s.Backup(second).ok());
  auto later = SqliteStudyStore::Create({second});
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE((*later)->GetStudy("after").ok());
}

TEST_F(SqliteFaultsTest, BackupRefusesBadPathsAndTheLiveDatabase) {
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok());
  StudyStore& s = **store;
  ASSERT_TRUE(s.CreateStudy(MakeStudy("a")).ok());
  auto code = [&](const std::string& path) { return s.Backup(path).status(); };

  absl::Status relative = code("backup.db");
  EXPECT_EQ(relative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(relative.message(), HasSubstr("absolute"));
  EXPECT_EQ(code("").code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& live :
       {path_, path_ + "-wal", path_ + "-shm", path_ + "-lock",
        (dir_ / "." / "dial.db").string(),
        (dir_ / "sub" / ".." / "dial.db").string()}) {
    absl::Status status = code(live);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << live;
    EXPECT_THAT(status.message(), HasSubstr("live database")) << live;
  }
  // Under other names too.
  fs::create_directories(dir_ / "links");
  fs::create_symlink(path_, dir_ / "links" / "symlink.db");
  fs::create_hard_link(path_, dir_ / "links" / "hardlink.db");
  EXPECT_EQ(code((dir_ / "links" / "symlink.db").string()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code((dir_ / "links" / "hardlink.db").string()).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(code((dir_ / "missing" / "b.db").string()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(dir_.string()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dir_.string() + "/").code(),
            absl::StatusCode::kInvalidArgument);
  // No file is ever replaced: neither some other file nor an unrelated
  // SQLite database (issue 16 finding 2: a table `secrets` was replaced
  // with Dial's tables).
  const fs::path notes = dir_ / "notes.txt";
  std::ofstream(notes) << "keep me";
  absl::Status other = code(notes.string());
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.message(), HasSubstr("never replaces"));
  EXPECT_EQ(fs::file_size(notes), 7u);
  const fs::path secrets = dir_ / "secrets.db";
  {
    auto other_db = SqliteStudyStore::Create({secrets.string()});
    ASSERT_TRUE(other_db.ok());
    ASSERT_TRUE((*other_db)->CreateStudy(MakeStudy("secret")).ok());
  }
  EXPECT_EQ(code(secrets.string()).code(), absl::StatusCode::kAlreadyExists);
  auto still = SqliteStudyStore::Create({secrets.string()});
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE((*still)->GetStudy("secret").ok());
  EXPECT_EQ((*still)->GetStudy("a").status().code(),
            absl::StatusCode::kNotFound);

  EXPECT_EQ(MemoryStudyStore::Create()->Backup("/tmp/x.db").status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(s.GetStudy("a").ok());  // the live database is untouched
}

TEST_F(SqliteFaultsTest, ABackupThatCannotBeWrittenLeavesNothingBehind) {
  const std::string backup = (dir_ / "backup.db").string();
  const std::string second = (dir_ / "backup-2.db").string();
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("old")).ok());
    ASSERT_TRUE((*store)->Backup(backup).ok());
    // Enough data that the next copy is larger than the limit below.
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("bulk", 512 << 10)).ok());
  }
  const uintmax_t old_size = fs::file_size(backup);
  const std::string path = path_;
  std::string report = InChild([&] {
    Checks c;
    auto store = SqliteStudyStore::Create({path});
    if (!store.ok()) return "open: " + store.status().ToString();
    c.Expect((*store)->ListStudies().ok(), "list before the limit");
    LimitFileSize(old_size + (64 << 10));
    auto bytes = (*store)->Backup(second);
    c.ExpectCode(bytes.status(), absl::StatusCode::kUnavailable, "Backup");
    c.Expect(absl::StrContains(bytes.status().message(), second),
             "the message names the backup: " + bytes.status().ToString());
    return c.failures;
  });
  EXPECT_EQ(report, "");
  EXPECT_EQ(fs::file_size(backup), old_size);
  EXPECT_FALSE(fs::exists(second));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_THAT(e.path().filename().string(),
                ::testing::Not(HasSubstr(".tmp-")));
  }
  auto copy = SqliteStudyStore::Create({backup});
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE((*copy)->GetStudy("old").ok());
  EXPECT_EQ((*copy)->GetStudy("bulk").status().code(),
            absl::StatusCode::kNotFound);
}

// Waits for WhenDurable's answer.
absl::Status Durable(SqliteStudyStore& store, uint64_t seq) {
  absl::Notification done;
  absl::Status result;
  store.WhenDurable(seq, [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

// Group commit: many threads' writes share commits, every write is
// acknowledged only once its commit is done, and a reopened file holds
// every acknowledged write once.
TEST_F(SqliteFaultsTest, GroupCommitSharesCommitsAndKeepsEveryAckedWrite) {
  constexpr int kThreads = 8, kSteps = 100;
  {
    auto store = SqliteStudyStore::Create({path_, true, /*group_commit=*/true});
    ASSERT_TRUE(store.ok()) << store.status();
    SqliteStudyStore& s = **store;
    ASSERT_TRUE(s.CreateStudy(MakeStudy("g")).ok());
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(s.PutTrial(MakeTrial("g", t)).ok());
    }
    ASSERT_TRUE(s.Flush().ok());
    const uint64_t commits_before = s.commits();
    std::vector<std::thread> threads;
    std::atomic<int> acked{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        v1::Trial trial = MakeTrial("g", t);
        for (int step = 1; step <= kSteps; ++step) {
          trial.set_last_step(step);
          ASSERT_TRUE(s.RecordReport(trial, Point(step, 1)).ok());
          ASSERT_TRUE(Durable(s, s.WrittenSeq()).ok());
          ++acked;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(acked, kThreads * kSteps);
    const uint64_t commits = s.commits() - commits_before;
    EXPECT_GT(commits, 0u);
    // Eight writers waiting on each commit share most of them.
    EXPECT_LT(commits, uint64_t{kThreads * kSteps / 2}) << commits;
  }
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  for (int t = 0; t < kThreads; ++t) {
    auto history = (*store)->GetMetricHistory("g", t);
    ASSERT_TRUE(history.ok());
    ASSERT_EQ(history->size(), size_t{kSteps}) << "trial " << t;
    for (int i = 0; i < kSteps; ++i) EXPECT_EQ((*history)[i].step(), i + 1);
    EXPECT_EQ((*store)->GetTrial("g", t)->last_step(), kSteps);
  }
}

// A process killed while it writes (SIGKILL, no clean shutdown) loses no
// write it was told is durable, and the file stays whole.
TEST_F(SqliteFaultsTest, GroupCommitAckedWritesSurviveAKilledProcess) {
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("k")).ok());
    ASSERT_TRUE((*store)->PutTrial(MakeTrial("k", 0)).ok());
  }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto store = SqliteStudyStore::Create({path_, true, true});
    if (!store.ok()) ::_exit(2);
    v1::Trial trial = MakeTrial("k", 0);
    for (int64_t step = 1;; ++step) {
      trial.set_last_step(step);
      if (!(*store)->RecordReport(trial, Point(step, 3)).ok()) ::_exit(3);
      if (!Durable(**store, (*store)->WrittenSeq()).ok()) ::_exit(4);
      // Tell the parent only once the step is durable.
      if (::write(fds[1], &step, sizeof(step)) != sizeof(step)) ::_exit(5);
    }
  }
  ::close(fds[1]);
  int64_t acked = 0, step = 0;
  while (acked < 300 && ::read(fds[0], &step, sizeof(step)) == sizeof(step)) {
    acked = step;
  }
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ::close(fds[0]);
  ASSERT_EQ(acked, 300);
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  auto history = (*store)->GetMetricHistory("k", 0);
  ASSERT_TRUE(history.ok());
  ASSERT_GE(history->size(), size_t(acked));  // later ones may be there too
  for (size_t i = 0; i < history->size(); ++i) {
    EXPECT_EQ((*history)[i].step(), int64_t(i) + 1);
  }
  EXPECT_EQ((*store)->GetTrial("k", 0)->last_step(), int64_t(history->size()));
}

// A commit that fails (a full disk) loses its whole group: each of its
// writes is answered UNAVAILABLE, the owner's lost handler runs before
// those answers, writes are refused until Recover(), and afterwards the
// file holds every acknowledged write once.
TEST_F(SqliteFaultsTest, AFailedGroupCommitLosesOnlyUnacknowledgedWrites) {
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(store.value()->CreateStudy(MakeStudy("f")).ok());
    ASSERT_TRUE(store.value()->PutTrial(MakeTrial("f", 0)).ok());
  }
  const std::string path = path_;
  std::string report = InChild([&] {
    Checks c;
    auto store = SqliteStudyStore::Create({path, true, true});
    if (!store.ok()) return "open: " + store.status().ToString();
    SqliteStudyStore& s = **store;
    std::atomic<int> lost_calls{0};
    s.SetLostHandler([&] { ++lost_calls; });
    c.Expect(s.ListStudies().ok(), "list before the limit");
    v1::Trial trial = MakeTrial("f", 0);
    trial.set_last_step(1);
    c.ExpectCode(s.RecordReport(trial, Point(1, 2)), absl::StatusCode::kOk,
                 "step 1");
    c.ExpectCode(Durable(s, s.WrittenSeq()), absl::StatusCode::kOk,
                 "step 1 durable");

    const rlimit old = LimitFileSize(16 << 10);
    // Big enough that its commit cannot be written.
    trial.set_last_step(2);
    absl::Status put = s.RecordReport(trial, Point(2, 4000));
    absl::Status durable =
        put.ok() ? Durable(s, s.WrittenSeq()) : absl::OkStatus();
    c.Expect(!put.ok() || !durable.ok(),
             "the big report is refused or not acknowledged");
    const absl::Status failure = put.ok() ? durable : put;
    c.ExpectCode(failure, absl::StatusCode::kUnavailable, "the failure");
    if (put.ok()) {
      c.Expect(lost_calls == 1, "the lost handler ran before the answer");
      trial.set_last_step(3);
      c.ExpectCode(s.RecordReport(trial, Point(3, 1)),
                   absl::StatusCode::kUnavailable, "writes refused when lost");
      s.Recover();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    trial.set_last_step(2);
    // SQLite may have written a commit it reported as failed (an I/O error
    // after its last frame): then step 2 is on file and the retry is a
    // repeat. Either way it is there once.
    absl::Status again = s.RecordReport(trial, Point(2, 4000));
    c.Expect(again.ok() || absl::IsAlreadyExists(again),
             "step 2 again: " + again.ToString());
    c.ExpectCode(Durable(s, s.WrittenSeq()), absl::StatusCode::kOk,
                 "step 2 durable");
    return c.failures;
  });
  EXPECT_EQ(report, "");
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  auto history = (*store)->GetMetricHistory("f", 0);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 2u);  // step 1, and step 2 once (the retry)
  EXPECT_EQ((*history)[1].metrics_size(), 4000);
  EXPECT_EQ((*store)->GetTrial("f", 0)->last_step(), 2);
}

// After a failed sync of the log nothing later can be promised durable
// (the system may have dropped the log's pages and will report later syncs
// as done): the store refuses every further write, also after Recover().
TEST_F(SqliteFaultsTest, AFailedSyncRefusesEveryLaterWrite) {
  auto store = SqliteStudyStore::Create({path_, true, /*group_commit=*/true});
  ASSERT_TRUE(store.ok()) << store.status();
  SqliteStudyStore& s = **store;
  ASSERT_TRUE(s.CreateStudy(MakeStudy("y")).ok());
  ASSERT_TRUE(s.PutTrial(MakeTrial("y", 0)).ok());
  ASSERT_TRUE(s.Flush().ok());
  v1::Trial trial = MakeTrial("y", 0);
  trial.set_last_step(1);
  g_failing_syncs = 1;
  ASSERT_TRUE(s.RecordReport(trial, Point(1, 1)).ok());
  EXPECT_EQ(Durable(s, s.WrittenSeq()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(g_failing_syncs, 0) << "the sync never ran";
  g_failing_syncs = 0;
  s.Recover();
  trial.set_last_step(2);
  const absl::Status later = s.RecordReport(trial, Point(2, 1));
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable) << later;
  EXPECT_THAT(later.message(), HasSubstr("restarts"));
}

// A read error that makes SQLite roll back the open transaction loses the
// group: the next write is refused instead of committing on its own. The
// committer is held meanwhile, or it could commit the group before the
// read fails.
TEST_F(SqliteFaultsTest, AReadErrorThatEndsTheGroupLosesIt) {
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("r")).ok());
    // More than SQLite's page cache holds, so reads below go to the file.
    for (int t = 0; t < 300; ++t) {
      ASSERT_TRUE((*store)->PutTrial(MakeTrial("r", t, 16 << 10)).ok());
    }
  }
  {
    auto store = SqliteStudyStore::Create({path_, true, /*group_commit=*/true});
    ASSERT_TRUE(store.ok()) << store.status();
    SqliteStudyStore& s = **store;
    s.HoldCommitsForTesting(true);
    v1::Trial first = MakeTrial("r", 0);
    first.set_last_step(1);
    ASSERT_TRUE(s.PutTrial(first).ok());  // opens the group's transaction
    const uint64_t seq = s.WrittenSeq();
    absl::Status read;
    {
      testing::SqliteReadFaults faults;
      faults.Fail(true);
      read = s.GetTrial("r", 299).status();
    }
    ASSERT_FALSE(read.ok()) << "the read did not reach the file";
    v1::Trial second = MakeTrial("r", 1);
    second.set_last_step(7);
    EXPECT_EQ(s.PutTrial(second).code(), absl::StatusCode::kUnavailable);
    s.HoldCommitsForTesting(false);
    EXPECT_EQ(Durable(s, seq).code(), absl::StatusCode::kUnavailable);
    // The group was never committed: first's write is gone too.
    EXPECT_EQ(s.commits(), 0u);
  }
  auto store = SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->GetTrial("r", 0)->last_step(), -1);
  EXPECT_EQ((*store)->GetTrial("r", 1)->last_step(), -1);
}

// SetLostHandler returns only once a running handler has returned (its
// owner may be destroyed next), and from inside the handler it does not
// wait for itself.
TEST_F(SqliteFaultsTest, SetLostHandlerWaitsForARunningHandler) {
  {
    auto store = SqliteStudyStore::Create({path_});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateStudy(MakeStudy("h")).ok());
    ASSERT_TRUE((*store)->PutTrial(MakeTrial("h", 0)).ok());
  }
  const std::string path = path_;
  std::string report = InChild([&] {
    Checks c;
    auto store = SqliteStudyStore::Create({path, true, true});
    if (!store.ok()) return "open: " + store.status().ToString();
    SqliteStudyStore& s = **store;
    absl::Notification entered, replaced;
    bool replaced_while_running = true;
    s.SetLostHandler([&] {
      s.SetLostHandler([] {});  // from inside: must not wait for itself
      entered.Notify();
      // Times out unless SetLostHandler below returned while this runs.
      replaced_while_running =
          replaced.WaitForNotificationWithTimeout(absl::Milliseconds(300));
    });
    std::thread other([&] {
      entered.WaitForNotification();
      s.SetLostHandler(nullptr);
      replaced.Notify();
    });
    c.Expect(s.ListStudies().ok(), "list before the limit");
    const rlimit old = LimitFileSize(16 << 10);
    v1::Trial trial = MakeTrial("h", 0);
    trial.set_last_step(1);
    // Applied (it fits in memory), but its commit cannot be written.
    c.ExpectCode(s.RecordReport(trial, Point(1, 4000)), absl::StatusCode::kOk,
                 "the big report is applied");
    c.ExpectCode(Durable(s, s.WrittenSeq()), absl::StatusCode::kUnavailable,
                 "its commit");
    other.join();
    ::setrlimit(RLIMIT_FSIZE, &old);
    c.Expect(!replaced_while_running,
             "SetLostHandler returned while the handler ran");
    return c.failures;
  });
  EXPECT_EQ(report, "");
}

}  // namespace
}  // namespace dial::storage
