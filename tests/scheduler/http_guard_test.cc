// HttpGuard (scheduler/http_guard.h): the HTTP edge's checks before any
// handler, on their own; and auth::FailureThrottle with a given time.
#include "scheduler/http_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "auth/failure_throttle.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

HttpRequestHead Head(std::string method, std::string host,
                     std::optional<std::string> origin = std::nullopt) {
  return HttpRequestHead{std::move(method), "/api/v1/CreateStudy",
                         std::move(host), std::move(origin), std::nullopt};
}

// Security round two, M5: in no-token mode a request with Host:
// attacker.example created a study (DNS rebinding), and any origin could
// POST to the API.
TEST(HttpGuardTest, HostsAndOriginsOfOtherSitesAreRefused) {
  HttpGuard guard({});
  for (const char* host : {"127.0.0.1:8080", "[::1]:8080", "localhost:8080",
                           "10.1.2.3", "LOCALHOST"}) {
    EXPECT_EQ(guard.Check(Head("POST", host)), std::nullopt) << host;
  }
  auto rebound = guard.Check(Head("POST", "attacker.example:8080"));
  ASSERT_TRUE(rebound.has_value());
  EXPECT_EQ(rebound->status, 421);
  EXPECT_THAT(rebound->message, HasSubstr("--http-allowed-hosts"));
  EXPECT_EQ(guard.Check(Head("GET", "attacker.example"))->status, 421);
  EXPECT_EQ(guard.Check({"GET", "/", std::nullopt, std::nullopt, std::nullopt})
                ->status,
            400);

  HttpGuardOptions options;
  options.allowed_hosts = {"dial.internal"};
  HttpGuard named(options);
  EXPECT_EQ(named.Check(Head("POST", "dial.internal:443")), std::nullopt);

  // Same origin, or none (curl, SDKs), may change things; others may not.
  EXPECT_EQ(
      guard.Check(Head("POST", "127.0.0.1:8080", "http://127.0.0.1:8080")),
      std::nullopt);
  for (const char* origin : {"http://evil.example", "http://127.0.0.1:9999",
                             "null", "https://127.0.0.1:8080/x"}) {
    auto refused = guard.Check(Head("POST", "127.0.0.1:8080", origin));
    ASSERT_TRUE(refused.has_value()) << origin;
    EXPECT_EQ(refused->status, 403) << origin;
    EXPECT_THAT(refused->message, HasSubstr("Origin"));
  }
  // Reading is not refused for its origin (the page's own GETs).
  EXPECT_EQ(guard.Check(Head("GET", "127.0.0.1:8080", "http://evil.example")),
            std::nullopt);
  HttpRequestHead cross = Head("POST", "127.0.0.1:8080");
  cross.sec_fetch_site = "cross-site";
  EXPECT_EQ(guard.Check(cross)->status, 403);
  HttpRequestHead nul = Head("GET", "127.0.0.1");
  nul.path = std::string("/index.html\0.js", 15);
  EXPECT_EQ(guard.Check(nul)->status, 400);
}

// Security round two, finding 11: 1,000 wrong tokens were each answered.
// Attack review, finding 10: any attempt while locked restarted the wait.
TEST(FailureThrottleTest, FailuresWaitLongerAndLongerButRefusalsDoNotCount) {
  auth::FailureThrottleOptions options;
  options.free_failures = 3;
  options.first_wait = absl::Seconds(1);
  options.max_wait = absl::Seconds(8);
  auth::FailureThrottle throttle(options);
  absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 3; ++i) throttle.Failed("10.0.0.1", now);
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::ZeroDuration());
  throttle.Failed("10.0.0.1", now);
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::Seconds(1));
  EXPECT_EQ(throttle.Wait("10.0.0.2", now), absl::ZeroDuration());
  // Hammering while refused does not restart or lengthen the wait.
  for (int i = 0; i < 10; ++i) throttle.Failed("10.0.0.1", now);
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::Seconds(1));
  now += absl::Seconds(1);
  throttle.Failed("10.0.0.1", now);
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::Seconds(2));
  for (int i = 0; i < 10; ++i) {
    now += throttle.Wait("10.0.0.1", now);
    throttle.Failed("10.0.0.1", now);
  }
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::Seconds(8));  // capped
  now += absl::Seconds(8);
  EXPECT_EQ(throttle.Wait("10.0.0.1", now), absl::ZeroDuration());
}

// Review of the attack-review fixes: failures were never forgotten, so a
// client's few wrong tokens over months made its every later mistake wait
// minutes, and a full table was swept on every failure.
TEST(FailureThrottleTest, OldFailuresAreForgottenAndTheTableIsBounded) {
  auth::FailureThrottleOptions options;
  options.free_failures = 2;
  options.first_wait = absl::Seconds(1);
  options.max_wait = absl::Seconds(8);
  options.forget_after = absl::Minutes(15);
  options.max_clients = 3;
  auth::FailureThrottle throttle(options);
  absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 2; ++i) throttle.Failed("a", now);
  now += absl::Minutes(16);
  // Two more failures, long after: free again, not a wait.
  for (int i = 0; i < 2; ++i) throttle.Failed("a", now);
  EXPECT_EQ(throttle.Wait("a", now), absl::ZeroDuration());
  throttle.Failed("a", now);
  EXPECT_EQ(throttle.Wait("a", now), absl::Seconds(1));
  // The table holds three clients; more share one account, so they are
  // still throttled, and never unbounded.
  throttle.Failed("b", now);
  throttle.Failed("c", now);
  for (int i = 0; i < 3; ++i) {
    throttle.Failed("new-" + std::to_string(i), now);
  }
  EXPECT_EQ(throttle.Wait("new-0", now), absl::Seconds(1));
  EXPECT_EQ(throttle.Wait("new-99", now), absl::Seconds(1));
  EXPECT_EQ(throttle.Wait("b", now), absl::ZeroDuration());
  // Once the old ones are forgotten, a new client has an account again.
  now += absl::Minutes(20);
  throttle.Failed("fresh", now);
  EXPECT_EQ(throttle.Wait("fresh", now), absl::ZeroDuration());
  EXPECT_EQ(throttle.Wait("new-0", now), absl::ZeroDuration());
}

// Security round two, finding 11: the event streams were one pool for
// everyone.
TEST(HttpGuardTest, EventStreamsAreLimitedPerPrincipal) {
  HttpGuardOptions options;
  options.max_streams_per_principal = 2;
  HttpGuard guard(options);
  EXPECT_TRUE(guard.BeginStream("alice"));
  EXPECT_TRUE(guard.BeginStream("alice"));
  EXPECT_FALSE(guard.BeginStream("alice"));
  EXPECT_TRUE(guard.BeginStream("bob"));
  guard.EndStream("alice");
  EXPECT_TRUE(guard.BeginStream("alice"));
}

}  // namespace
}  // namespace dial::scheduler
