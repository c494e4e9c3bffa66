// Dispatcher: parked AcquireTrial calls get trials oldest first, and every
// answer (a trial, nothing, an error) goes through the outbox, to be sent
// after the core's lock is released.
#include "scheduler/dispatcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

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
            absl::Duration wait = absl::Seconds(30), bool* alive = nullptr) {
    Dispatcher::Waiter w;
    w.worker_id = worker;
    w.free_gpus = 1;
    w.deadline = clock_.Now() + wait;
    w.alive = [alive] { return alive == nullptr || *alive; };
    w.done = answers_.For(name);
    w.principal = "p-" + worker;
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
  // A caller that went away is never given a trial.
  EXPECT_THAT(asked, ::testing::ElementsAre("w2", "w3", "w3", "w4"));
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
}

}  // namespace
}  // namespace dial::scheduler
