// The Prometheus registry: exact exposition text, escaping, cumulative
// histogram buckets, the cardinality cap, and adds from many threads.
#include "common/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dial::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersTheTextExpositionFormat) {
  Registry r;
  auto* calls = r.AddCounter("dial_calls_total", "Calls.\nBy method.",
                             {"method", "code"});
  calls->With({"GetStudy", "OK"})->Add();
  calls->With({"GetStudy", "OK"})->Add(2);
  calls->With({"Get\"Odd\\", "NOT_FOUND"})->Add();
  auto* up = r.AddGauge("dial_workers", "Workers alive.");
  up->With({})->Set(3);
  auto* lat =
      r.AddHistogram("dial_call_seconds", "Latency.", {"method"}, {0.1, 1});
  auto* h = lat->With({"GetStudy"});
  h->Observe(0.05);
  h->Observe(0.1);  // on a bound: counts in that bucket
  h->Observe(0.5);
  h->Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP dial_calls_total Calls.\\nBy method.\n"
            "# TYPE dial_calls_total counter\n"
            // Children in label order.
            "dial_calls_total{method=\"Get\\\"Odd\\\\\",code=\"NOT_FOUND\"} 1\n"
            "dial_calls_total{method=\"GetStudy\",code=\"OK\"} 3\n"
            "# HELP dial_workers Workers alive.\n"
            "# TYPE dial_workers gauge\n"
            "dial_workers 3\n"
            "# HELP dial_call_seconds Latency.\n"
            "# TYPE dial_call_seconds histogram\n"
            "dial_call_seconds_bucket{method=\"GetStudy\",le=\"0.1\"} 2\n"
            "dial_call_seconds_bucket{method=\"GetStudy\",le=\"1\"} 3\n"
            "dial_call_seconds_bucket{method=\"GetStudy\",le=\"+Inf\"} 4\n"
            "dial_call_seconds_sum{method=\"GetStudy\"} 7.65\n"
            "dial_call_seconds_count{method=\"GetStudy\"} 4\n");
}

TEST(MetricsTest, LabelSetsBeyondTheCapShareOneOtherChild) {
  Registry r;
  auto* f = r.AddCounter("dial_x_total", "X.", {"study"});
  for (size_t i = 0; i < Registry::kDefaultMaxChildren + 50; ++i) {
    f->With({"s" + std::to_string(i)})->Add();
  }
  size_t children = 0;
  double other = 0;
  f->ForEach([&](const std::vector<std::string>& values, Counter& c) {
    ++children;
    if (values[0] == "other") other = c.value();
  });
  EXPECT_EQ(children, Registry::kDefaultMaxChildren + 1);
  EXPECT_EQ(other, 50);
  // A label set that already has a child keeps it.
  f->With({"s0"})->Add();
  EXPECT_THAT(r.Render(), HasSubstr("dial_x_total{study=\"s0\"} 2\n"));
}

TEST(MetricsTest, AddsFromManyThreadsAreAllCounted) {
  Registry r;
  Counter* c = r.AddCounter("dial_n_total", "N.")->With({});
  Histogram* h =
      r.AddHistogram("dial_h_seconds", "H.", {}, LatencyBuckets())->With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Add();
        h->Observe(0.003);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->snapshot().count, 40000u);
}

TEST(MetricsTest, CollectorsRunBeforeEachRender) {
  Registry r;
  auto* g = r.AddGauge("dial_trials", "Trials by state.", {"state"});
  int calls = 0;
  r.OnCollect([&] {
    ++calls;
    g->Clear();
    g->With({"RUNNING"})->Set(calls);
  });
  EXPECT_THAT(r.Render(), HasSubstr("dial_trials{state=\"RUNNING\"} 1\n"));
  EXPECT_THAT(r.Render(), HasSubstr("dial_trials{state=\"RUNNING\"} 2\n"));
}

}  // namespace
}  // namespace dial::metrics
