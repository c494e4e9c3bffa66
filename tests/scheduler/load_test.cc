// The core under concurrent load, on a group-commit SQLite store: no report
// is lost or recorded twice, decisions equal a sequential replay of the
// same reports, pages cover every trial once while trials are added, and a
// commit that fails makes the core reload instead of running ahead of the
// file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "searchers/early_stopping.h"
#include "storage/sqlite_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;

v1::StudySpec Spec(const std::string& extra) {
  auto spec = ParseStudySpec(
      "name: s\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space:\n  - {name: x, float: {min: 0, max: 1}}\n" +
      extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

searchers::Metrics Loss(double v) { return Metric("loss", v); }

// Every report the trial scheduler decided, in the order it decided them
// (OnReport runs under the core's lock, so this is the core's order).
struct Decided {
  int64_t trial;
  int64_t step;
  double loss;
  v1::Decision::Action action;
};

class RecordingScheduler : public searchers::TrialScheduler {
 public:
  RecordingScheduler(std::unique_ptr<searchers::TrialScheduler> inner,
                     std::vector<Decided>* log)
      : inner_(std::move(inner)), log_(log) {}
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const searchers::Metrics& metrics) override {
    v1::Decision d = inner_->OnReport(trial, step, metrics);
    log_->push_back({trial.number(), step, metrics.at("loss"), d.action()});
    return d;
  }
  void OnTrialFinished(const v1::Trial& trial) override {
    inner_->OnTrialFinished(trial);
  }

 private:
  std::unique_ptr<searchers::TrialScheduler> inner_;
  std::vector<Decided>* log_;
};

class LoadTest : public DbDirTest {};

TEST_F(LoadTest, ConcurrentReportsAreKeptOnceAndDecidedAsInASequentialReplay) {
  constexpr int kClients = 8, kTrialsEach = 6, kSteps = 27;
  auto store = storage::SqliteStudyStore::Create({path_, true, true});
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<Decided> log;
  SchedulerCoreOptions options;
  options.store = store->get();
  options.tick = absl::ZeroDuration();
  options.trial_scheduler_factory = [&log](const v1::StudySpec& spec)
      -> absl::StatusOr<std::unique_ptr<searchers::TrialScheduler>> {
    auto inner = searchers::CreateTrialScheduler(spec);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<searchers::TrialScheduler>(
        new RecordingScheduler(std::move(*inner), &log));
  };
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok()) << core.status();
  const std::string asha =
      "scheduler: {asha: {min_steps: 1, max_steps: 27, reduction_factor: 3}}\n"
      "budget: {max_trials: 1000, max_parallel_trials: 8}\n";
  ASSERT_TRUE((*core)->CreateStudy(Spec(asha)).ok());

  // What each client was told: (trial, step) -> action.
  std::mutex mu;
  std::map<std::pair<int64_t, int64_t>, v1::Decision::Action> told;
  std::vector<std::thread> clients;
  std::atomic<int> errors{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int t = 0; t < kTrialsEach; ++t) {
        auto s = (*core)->SuggestTrials("s", 1, absl::StrCat("client-", c));
        if (!s.ok() || s->trials.size() != 1) {
          ++errors;
          return;
        }
        const int64_t n = s->trials[0].number();
        // Loss falls with the step; trials differ by a fixed offset.
        const double base = ((n * 7919) % 101) / 101.0;
        for (int step = 1; step <= kSteps; ++step) {
          auto d = (*core)->ReportIntermediate("s", n, step,
                                               Loss(base + 1.0 / step), "");
          if (!d.ok() || !Durable(**core, d.ticket()).ok()) {
            ++errors;
            return;
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            told[{n, step}] = d->action();
          }
          if (d->action() == v1::Decision::STOP) break;
        }
        if (!(*core)->CompleteTrial("s", n, Loss(base), "").ok()) ++errors;
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_EQ(errors, 0);
  ASSERT_EQ(told.size(), log.size());

  // 1. Each report was decided once, and the client got that decision.
  std::map<std::pair<int64_t, int64_t>, v1::Decision::Action> decided;
  for (const Decided& d : log) {
    EXPECT_TRUE(
        decided.emplace(std::make_pair(d.trial, d.step), d.action).second)
        << "decided twice: trial " << d.trial << " step " << d.step;
  }
  EXPECT_EQ(decided, told);
  int stops = 0;
  for (const auto& [key, action] : told) stops += action == v1::Decision::STOP;
  EXPECT_GT(stops, 0) << "ASHA never stopped a trial: the check is empty";

  // 2. A fresh ASHA fed the same reports one after another decides alike.
  auto replay = searchers::CreateTrialScheduler(Spec(asha));
  ASSERT_TRUE(replay.ok());
  for (const Decided& d : log) {
    v1::Trial trial;
    trial.set_number(d.trial);
    EXPECT_EQ((*replay)->OnReport(trial, d.step, Loss(d.loss)).action(),
              d.action)
        << "trial " << d.trial << " step " << d.step;
  }

  // 3. The file holds every acknowledged report once, and nothing else.
  core->reset();
  store->reset();
  auto reopened = storage::SqliteStudyStore::Create({path_});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::map<int64_t, std::vector<int64_t>> expected;
  for (const auto& [key, action] : told)
    expected[key.first].push_back(key.second);
  for (const auto& [trial, steps] : expected) {
    auto history = (*reopened)->GetMetricHistory("s", trial);
    ASSERT_TRUE(history.ok());
    std::vector<int64_t> got;
    for (const auto& p : *history) got.push_back(p.step());
    EXPECT_EQ(got, steps) << "trial " << trial;
  }
}

TEST_F(LoadTest, PagesCoverEveryTrialOnceWhileTrialsAreAdded) {
  auto store = storage::SqliteStudyStore::Create({path_, true, true});
  ASSERT_TRUE(store.ok()) << store.status();
  SchedulerCoreOptions options;
  options.store = store->get();
  options.tick = absl::ZeroDuration();
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok()) << core.status();
  ASSERT_TRUE((*core)
                  ->CreateStudy(Spec("budget: {max_trials: 100000, "
                                     "max_parallel_trials: 1000}\n"))
                  .ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*core)->SuggestTrials("s", 5, "").ok());
  }
  // Between every two pages, three more trials are created and some are
  // finished (so states change under the pager too).
  int64_t added = 0;
  std::vector<int64_t> seen;
  std::string token;
  do {
    auto page = (*core)->ListTrials("s", {}, 7, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& t : page->trials) seen.push_back(t.number());
    token = page->next_page_token;
    auto s = (*core)->SuggestTrials("s", 3, "");
    ASSERT_TRUE(s.ok()) << s.status();
    for (const auto& t : s->trials) {
      if (t.number() % 2 == 0) {
        ASSERT_TRUE((*core)->CompleteTrial("s", t.number(), Loss(1), "").ok());
      }
    }
    added += s->trials.size();
  } while (!token.empty());
  EXPECT_GT(added, 3);
  // The last page ended before the last batch: it is not expected.
  const int64_t total = 100 + added - 3;
  // Strictly increasing: no trial twice; starting at 0 without a gap: none
  // missed, also among those added while paging.
  ASSERT_EQ(int64_t(seen.size()), total);
  for (size_t i = 0; i < seen.size(); ++i) {
    ASSERT_EQ(seen[i], int64_t(i)) << "at position " << i;
  }
}

// In a child, where a file size limit fails the commit as a full disk
// would: the core answers UNAVAILABLE, reloads from the file (so its state
// is the file's again), and takes the same report once space is back.
TEST_F(LoadTest, ACoreReloadsWhenACommitIsLost) {
  const std::string path = path_;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    auto fail = [](int code, const std::string& why) {
      std::fprintf(stderr, "child: %s\n", why.c_str());
      ::_exit(code);
    };
    auto store = storage::SqliteStudyStore::Create({path, true, true});
    if (!store.ok()) fail(2, store.status().ToString());
    SchedulerCoreOptions options;
    options.store = store->get();
    options.tick = absl::ZeroDuration();
    auto core = SchedulerCore::Create(options);
    if (!core.ok()) fail(3, core.status().ToString());
    SchedulerCore& c = **core;
    if (!c.CreateStudy(Spec("budget: {max_trials: 4}\n")).ok())
      fail(4, "study");
    auto s = c.SuggestTrials("s", 1, "me");
    if (!s.ok() || s->trials.empty()) fail(5, "suggest");
    auto first = c.ReportIntermediate("s", 0, 1, Loss(1), "");
    if (!first.ok() || !Durable(c, first.ticket()).ok()) {
      fail(6, "step 1");
    }
    rlimit old;
    ::getrlimit(RLIMIT_FSIZE, &old);
    rlimit limited = old;
    limited.rlim_cur = 16 << 10;
    ::setrlimit(RLIMIT_FSIZE, &limited);
    searchers::Metrics big = Loss(0.5);
    // Under the metrics-per-report cap (docs/limits.md), over 16 KiB.
    for (int i = 0; i < 900; ++i) {
      big[absl::StrCat("extra_metric_with_a_longer_name_", i)] = i;
    }
    auto d = c.ReportIntermediate("s", 0, 2, big, "");
    const absl::Status failure = d.ok() ? Durable(c, d.ticket()) : d.status();
    if (failure.code() != absl::StatusCode::kUnavailable) {
      fail(7, "expected UNAVAILABLE, got " + failure.ToString());
    }
    // Reloaded (the lost handler runs before the answer): the core's trial
    // is the file's. SQLite may have written a commit it then reported as
    // failed (an I/O error after its last frame), so the file decides
    // whether step 2 is there; core and file must agree either way.
    auto trial = c.GetTrial("s", 0);
    if (!trial.ok()) fail(8, trial.status().ToString());
    if (trial->last_step() != trial->metric_history_size() ||
        (trial->last_step() != 1 && trial->last_step() != 2)) {
      fail(8, "core and file disagree after " + failure.ToString() + ": " +
                  trial->DebugString());
    }
    const int64_t next = trial->last_step() + 1;
    ::setrlimit(RLIMIT_FSIZE, &old);
    d = c.ReportIntermediate("s", 0, next, big, "");
    if (!d.ok() || !Durable(c, d.ticket()).ok())
      fail(9, "a report after the space came back");
    trial = c.GetTrial("s", 0);
    if (!trial.ok() || trial->last_step() != next) fail(10, "not recorded");
    if (next == 2) ::_exit(0);
    ::_exit(20);  // step 2 survived the failed commit: checked below
  }
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
  const int code = WEXITSTATUS(wstatus);
  auto store = storage::SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(code == 0 || code == 20)
      << code << "; the file has last_step "
      << (*store)->GetTrial("s", 0)->last_step() << " and "
      << (*store)->GetMetricHistory("s", 0)->size() << " reports";
  auto history = (*store)->GetMetricHistory("s", 0);
  ASSERT_TRUE(history.ok());
  // Every step once, in order, whichever way the failed commit went.
  ASSERT_EQ(history->size(), code == 0 ? 2u : 3u);
  for (size_t i = 0; i < history->size(); ++i) {
    EXPECT_EQ((*history)[i].step(), int64_t(i) + 1);
  }
  EXPECT_EQ(history->back().metrics_size(), 901);
}

}  // namespace
}  // namespace dial::scheduler
