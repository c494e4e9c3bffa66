// WorkerRegistry on a fake clock: leases, owners, adoption after a restart,
// and trials whose hand-over no worker acknowledged.
#include "scheduler/worker_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"

namespace dial::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class WorkerRegistryTest : public ::testing::Test {
 protected:
  v1::Worker Register(const std::string& host, const std::string& principal) {
    v1::Worker w = registry_.Make(host, v1::WorkerResources());
    w.set_principal(principal);
    registry_.Add(w);
    return w;
  }

  FakeClock clock_;
  WorkerRegistry registry_{&clock_, absl::Seconds(10)};
};

TEST_F(WorkerRegistryTest, ALeaseRunsOutUnlessRenewed) {
  const v1::Worker a = Register("gpu1", "alice");
  const v1::Worker b = Register("gpu2", "alice");
  EXPECT_NE(a.id(), b.id());
  EXPECT_THAT(a.id(), ::testing::StartsWith("gpu1"));
  EXPECT_EQ(registry_.size(), 2);
  clock_.Advance(absl::Seconds(8));
  ASSERT_TRUE(registry_.Touch(a.id()).ok());
  clock_.Advance(absl::Seconds(8));  // b: 16 s silent; a: 8 s
  EXPECT_THAT(registry_.Expired(), ElementsAre(b.id()));
  registry_.Forget(b.id());
  EXPECT_EQ(registry_.Touch(b.id()).code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(3));
  EXPECT_THAT(registry_.Expired(), ElementsAre(a.id()));
  EXPECT_EQ(registry_.CountOf("alice"), 1);
  registry_.Forget(a.id());
  EXPECT_EQ(registry_.CountOf("alice"), 0);
}

TEST_F(WorkerRegistryTest, OnlyItsPrincipalOrAnAdminSpeaksForAWorker) {
  const v1::Worker a = Register("gpu1", "alice");
  EXPECT_TRUE(registry_.CheckOwner(a.id(), "alice", false).ok());
  EXPECT_TRUE(registry_.CheckOwner(a.id(), "root", true).ok());
  const absl::Status mallory = registry_.CheckOwner(a.id(), "mallory", false);
  EXPECT_EQ(mallory.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(mallory.message(), ::testing::HasSubstr("'alice'"));
  EXPECT_EQ(registry_.CheckOwner("nobody", "alice", false).code(),
            absl::StatusCode::kNotFound);
}

// After a restart a worker's trials are adopted: it has at least 30 s (or
// two leases) to come back, and the first principal to speak for it owns it.
TEST_F(WorkerRegistryTest, AnAdoptedWorkerGetsTimeToComeBack) {
  registry_.Adopt("w1", {"s", 3});
  EXPECT_EQ(registry_.size(), 1);
  clock_.Advance(absl::Seconds(29));
  EXPECT_THAT(registry_.Expired(), IsEmpty());
  clock_.Advance(absl::Seconds(2));
  EXPECT_THAT(registry_.Expired(), ElementsAre("w1"));

  WorkerRegistry long_lease(&clock_, absl::Seconds(40));
  long_lease.Adopt("w2", {"s", 4});
  clock_.Advance(absl::Seconds(79));
  EXPECT_THAT(long_lease.Expired(), IsEmpty());
  clock_.Advance(absl::Seconds(2));
  EXPECT_THAT(long_lease.Expired(), ElementsAre("w2"));

  registry_.Adopt("w3", {"s", 5});
  EXPECT_EQ(registry_.CountOf("bob"), 0);
  EXPECT_TRUE(registry_.CheckOwner("w3", "bob", false).ok());
  EXPECT_EQ(registry_.CountOf("bob"), 1);
  EXPECT_EQ(registry_.CheckOwner("w3", "carol", false).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(WorkerRegistryTest, HandOversNotAcknowledgedWithinALeaseComeBack) {
  registry_.Dispatched("w1", {"s", 1});
  registry_.Dispatched("w1", {"s", 2});
  registry_.Dispatched("w2", {"s", 4});
  clock_.Advance(absl::Seconds(5));
  registry_.Dispatched("w1", {"s", 3});
  EXPECT_THAT(registry_.Unacknowledged("w1", {}), IsEmpty());
  clock_.Advance(absl::Seconds(6));  // 1, 2 and 4: 11 s; 3: 6 s
  // 2 is running on its worker; 1 was never seen by one; 4 is another
  // worker's.
  using Key = WorkerRegistry::TrialKey;
  EXPECT_THAT(registry_.Unacknowledged("w1", {Key{"s", 2}}),
              ElementsAre(Key{"s", 1}));
  EXPECT_THAT(registry_.Unacknowledged("w2", {}), ElementsAre(Key{"s", 4}));
  registry_.Undispatched({"s", 1});
  EXPECT_THAT(registry_.Unacknowledged("w1", {Key{"s", 2}}), IsEmpty());
  // Handed again, to another worker: the first no longer answers for it.
  registry_.Dispatched("w3", {"s", 4});
  EXPECT_THAT(registry_.Unacknowledged("w2", {}), IsEmpty());
  clock_.Advance(absl::Seconds(11));
  EXPECT_THAT(registry_.Unacknowledged("w3", {}), ElementsAre(Key{"s", 4}));
  registry_.ClearDispatched();
  clock_.Advance(absl::Seconds(60));
  EXPECT_THAT(registry_.Unacknowledged("w1", {}), IsEmpty());
  EXPECT_THAT(registry_.Unacknowledged("w3", {}), IsEmpty());
}

}  // namespace
}  // namespace dial::scheduler
