// Dispatcher: parked AcquireTrial calls get trials oldest first, and every
// answer (a trial, nothing, an error) goes through the outbox, to be sent
// after the core's lock is released. A pass asks each shape of worker
// until it gets nothing, not every call.
#include "scheduler/dispatcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace dial::scheduler {
namespace {

// What each parked call was answered, by a name the test gives it.
struct Answers {
  std::map<std::string, absl::StatusOr<std::optional<Assignment>>> got;
  AcquireCallback For(const std::string& name) {
    return [this, name](Reply<std::optional<Assignment>> r) {
      got.emplace(name, std::move(r));
    };
  }
};

class DispatcherTest : public ::testing::Test {
 protected:
  void Park(const std::string& name, const std::string& worker,
            absl::Duration wait = absl::Seconds(30), bool* alive = nullptr,
            const std::string& shape = "") {
    Dispatcher::Waiter w;
    w.worker_id = worker;
    w.free_gpus = 1;
    w.deadline = clock_.Now() + wait;
    w.alive = [alive] { return alive == nullptr || *alive; };
    w.done = answers_.For(name);
    w.principal = "p-" + worker;
    w.shape = shape.empty() ? "shape-of-" + worker : shape;
    dispatcher_.Park(std::move(w));
  }
  // Sends what the outbox holds, as the core does after its lock.
  void Send() {
    for (auto& reply : out_.replies) reply(WriteTicket{});
    out_.replies.clear();
  }
  static Assignment Trial(int64_t number) {
    Assignment a;
    a.trial.set_number(number);
    return a;
  }

  FakeClock clock_;
  Dispatcher dispatcher_;
  Outbox out_;
  Answers answers_;
};

TEST_F(DispatcherTest, TrialsGoToTheOldestCallsFirstThroughTheOutbox) {
  Park("first", "w1");
  Park("second", "w2");
  Park("third", "w3");
  EXPECT_EQ(dispatcher_.ParkedBy("p-w2"), 1);
  int64_t next = 0;
  std::vector<std::string> asked;
  dispatcher_.Dispatch(
      [&](const std::string& worker,
          int32_t gpus) -> absl::StatusOr<std::optional<Assignment>> {
        asked.push_back(worker);
        EXPECT_EQ(gpus, 1);
        if (next == 2) return std::optional<Assignment>();  // none left
        return std::optional<Assignment>(Trial(next++));
      },
      out_);
  EXPECT_THAT(asked, ::testing::ElementsAre("w1", "w2", "w3"));
  EXPECT_TRUE(answers_.got.empty()) << "answered before the outbox ran";
  Send();
  ASSERT_EQ(answers_.got.size(), 2u);
  EXPECT_EQ((*answers_.got.at("first"))->trial.number(), 0);
  EXPECT_EQ((*answers_.got.at("second"))->trial.number(), 1);
  EXPECT_EQ(dispatcher_.ParkedBy("p-w3"), 1);  // still waiting

  // Its wait runs out: it is answered with nothing.
  clock_.Advance(absl::Seconds(31));
  dispatcher_.Expire(clock_.Now(), out_);
  Send();
  ASSERT_TRUE(answers_.got.at("third").ok());
  EXPECT_FALSE(answers_.got.at("third")->has_value());
  EXPECT_EQ(dispatcher_.ParkedBy("p-w3"), 0);
}

TEST_F(DispatcherTest, GoneCallersErrorsAndLostWorkersAreAnswered) {
  bool alive = false;
  Park("gone", "w1", absl::Seconds(30), &alive);
  Park("fails", "w2");
  Park("lost", "w3");
  Park("lost too", "w3");
  Park("kept", "w4");
  std::vector<std::string> asked;
  dispatcher_.Dispatch(
      [&](const std::string& worker,
          int32_t) -> absl::StatusOr<std::optional<Assignment>> {
        asked.push_back(worker);
        if (worker == "w2") return absl::UnavailableError("disk full");
        return std::optional<Assignment>();
      },
      out_);
  // A caller that went away is never given a trial; w3's second call, of
  // the shape that just got nothing, is not asked.
  EXPECT_THAT(asked, ::testing::ElementsAre("w2", "w3", "w4"));
  dispatcher_.DropWorker("w3", out_);
  Send();
  EXPECT_FALSE(answers_.got.at("gone")->has_value());
  EXPECT_EQ(answers_.got.at("fails").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(answers_.got.at("lost").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(answers_.got.at("lost too").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(answers_.got.count("kept"), 0u);
  // At shutdown every call still parked ends empty.
  dispatcher_.EndAll(out_);
  Send();
  ASSERT_TRUE(answers_.got.at("kept").ok());
  EXPECT_FALSE(answers_.got.at("kept")->has_value());
  EXPECT_EQ(dispatcher_.ParkedBy("p-w4"), 0);
  EXPECT_EQ(dispatcher_.size(), 0);
}

// 10,000 parked calls of two shapes: a pass with two trials for one shape
// asks three calls (two served, one empty) and one of the other shape,
// not every call.
TEST_F(DispatcherTest, APassAsksEachShapeUntilItGetsNothing) {
  for (int i = 0; i < 10000; ++i) {
    const std::string id = absl::StrCat("w", i);
    Park(id, id, absl::Seconds(30), nullptr, i % 2 ? "a100" : "cpu");
  }
  std::vector<std::string> asked;
  int64_t left = 2;  // trials only a100 workers take
  auto assign = [&](const std::string& worker,
                    int32_t) -> absl::StatusOr<std::optional<Assignment>> {
    asked.push_back(worker);
    const bool a100 = std::stoi(worker.substr(1)) % 2 == 1;
    if (!a100 || left == 0) return std::optional<Assignment>();
    return std::optional<Assignment>(Trial(left--));
  };
  dispatcher_.Dispatch(assign, out_);
  // Oldest first across shapes: w0 (cpu, nothing), w1 and w3 (a100,
  // served), w5 (a100, nothing left).
  EXPECT_THAT(asked, ::testing::ElementsAre("w0", "w1", "w3", "w5"));
  Send();
  EXPECT_EQ(answers_.got.size(), 2u);
  EXPECT_EQ(dispatcher_.size(), 9998);

  // A pass that must ask every call (a study selects by host) does.
  asked.clear();
  dispatcher_.Dispatch(assign, out_, /*by_shape=*/false);
  EXPECT_EQ(asked.size(), 9998u);

  // Calls whose client left are ended at the next expiry, and the
  // lost worker's calls at once, without walking the others.
  bool alive = false;
  Park("gone", "g", absl::Seconds(30), &alive, "cpu");
  dispatcher_.DropWorker("w4", out_);
  dispatcher_.Expire(clock_.Now(), out_);
  Send();
  EXPECT_EQ(answers_.got.at("w4").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(answers_.got.at("gone")->has_value());
  EXPECT_EQ(dispatcher_.size(), 9997);
  EXPECT_EQ(dispatcher_.ParkedBy("p-w6"), 1);

  // The calls' waits run out in the order they were parked with.
  clock_.Advance(absl::Seconds(31));
  dispatcher_.Expire(clock_.Now(), out_);
  Send();
  EXPECT_EQ(dispatcher_.size(), 0);
  EXPECT_FALSE(answers_.got.at("w9999")->has_value());
}

}  // namespace
}  // namespace dial::scheduler
