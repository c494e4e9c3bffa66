// Prometheus metrics: counters, gauges and histograms in families with
// fixed label names, rendered in the text exposition format (0.0.4) for a
// /metrics endpoint. Children are created on first use and live as long
// as the registry, so a hot path keeps the pointer and only does an atomic
// add. Label cardinality is bounded: a family holds at most `max_children`
// label sets; later ones share one child whose labels are all "other"
// (never a trial number or another unbounded value as a label). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace dial::metrics {

// A double that many threads add to.
class Counter {
 public:
  void Add(double v = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets, increasing (+Inf is added).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Latency buckets in seconds: 0.5 ms to 10 s.
std::vector<double> LatencyBuckets();

template <typename T>
class Family;

class Registry {
 public:
  static constexpr size_t kDefaultMaxChildren = 1000;
  // `name` with the dial_ prefix and the unit suffix (_total, _seconds,
  // _bytes) already in it.
  Family<Counter>* AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>* AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>* AddHistogram(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> labels,
                                  std::vector<double> bounds);
  // Called at each Render, before writing: sets gauges whose value lives
  // elsewhere (trials by state, queue depths).
  void OnCollect(std::function<void()> collect);
  // The text exposition format, families in the order they were added.
  std::string Render();

 private:
  template <typename T>
  Family<T>* AddSingle(const std::string& name, const std::string& help,
                       const char* type, std::vector<std::string> labels);
  struct Entry {
    std::string name, help, type;
    std::function<void(std::string&)> render;
  };
  absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<void>> owned_ ABSL_GUARDED_BY(mu_);
};

// Label values escaped for the exposition format ({a="x",b="y"}).
std::string FormatLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values);

template <typename T>
class Family {
 public:
  Family(std::vector<std::string> labels, size_t max_children,
         std::function<std::unique_ptr<T>()> make)
      : labels_(std::move(labels)),
        max_children_(max_children),
        make_(std::move(make)) {}
  // The child for these label values (as many as the family's labels).
  T* With(const std::vector<std::string>& values) {
    absl::MutexLock lock(&mu_);
    auto it = children_.find(values);
    if (it != children_.end()) return it->second.get();
    std::vector<std::string> key = values;
    if (children_.size() >= max_children_) {
      key.assign(values.size(), "other");
      it = children_.find(key);
      if (it != children_.end()) return it->second.get();
    }
    return children_.emplace(key, make_()).first->second.get();
  }
  // Removes every child (gauges recomputed at each collection).
  void Clear() {
    absl::MutexLock lock(&mu_);
    children_.clear();
  }
  const std::vector<std::string>& labels() const { return labels_; }
  // Calls f(label values, child) for each child, in label order.
  template <typename F>
  void ForEach(F&& f) {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) f(values, *child);
  }

 private:
  const std::vector<std::string> labels_;
  const size_t max_children_;
  const std::function<std::unique_ptr<T>()> make_;
  absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::metrics
