#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dial::metrics {
namespace {

// A sample value: integers without a fraction, others exactly.
std::string Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    return absl::StrFormat("%.0f", v);
  }
  // The shortest of 15 to 17 digits that reads back as the same double.
  std::string text;
  for (int digits = 15; digits <= 17; ++digits) {
    text = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) break;
  }
  return text;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void AddAtomic(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Add(double v) { AddAtomic(value_, v); }
void Gauge::Add(double v) { AddAtomic(value_, v); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot s;
  uint64_t total = 0;
  for (uint64_t c : counts_) {
    total += c;
    s.cumulative.push_back(total);
  }
  s.sum = sum_;
  s.count = total;
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,  0.5,    1,     2.5,  5,     10};
}

std::string FormatLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values) {
  if (names.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i] + "=\"";
    for (char c : i < values.size() ? values[i] : std::string()) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  return out + "}";
}

// A family of one-value children (counters, gauges), rendered as
// `name{labels} value` lines.
template <typename T>
Family<T>* Registry::AddSingle(const std::string& name, const std::string& help,
                               const char* type,
                               std::vector<std::string> labels) {
  auto family =
      std::make_shared<Family<T>>(std::move(labels), kDefaultMaxChildren,
                                  [] { return std::make_unique<T>(); });
  Family<T>* f = family.get();
  absl::MutexLock lock(&mu_);
  owned_.push_back(family);
  entries_.push_back({name, help, type, [f, name](std::string& out) {
                        f->ForEach([&](const auto& values, T& child) {
                          absl::StrAppend(&out, name,
                                          FormatLabels(f->labels(), values),
                                          " ", Value(child.value()), "\n");
                        });
                      }});
  return f;
}

Family<Counter>* Registry::AddCounter(const std::string& name,
                                      const std::string& help,
                                      std::vector<std::string> labels) {
  return AddSingle<Counter>(name, help, "counter", std::move(labels));
}

Family<Gauge>* Registry::AddGauge(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> labels) {
  return AddSingle<Gauge>(name, help, "gauge", std::move(labels));
}

Family<Histogram>* Registry::AddHistogram(const std::string& name,
                                          const std::string& help,
                                          std::vector<std::string> labels,
                                          std::vector<double> bounds) {
  auto family = std::make_shared<Family<Histogram>>(
      std::move(labels), kDefaultMaxChildren,
      [bounds] { return std::make_unique<Histogram>(bounds); });
  Family<Histogram>* f = family.get();
  absl::MutexLock lock(&mu_);
  owned_.push_back(family);
  entries_.push_back(
      {name, help, "histogram", [f, name](std::string& out) {
         f->ForEach([&](const auto& values, Histogram& h) {
           const Histogram::Snapshot s = h.snapshot();
           std::vector<std::string> names = f->labels();
           names.push_back("le");
           std::vector<std::string> with_le = values;
           with_le.push_back("");
           for (size_t b = 0; b < s.cumulative.size(); ++b) {
             with_le.back() =
                 b < h.bounds().size() ? Value(h.bounds()[b]) : "+Inf";
             absl::StrAppend(&out, name, "_bucket",
                             FormatLabels(names, with_le), " ", s.cumulative[b],
                             "\n");
           }
           const std::string labels = FormatLabels(f->labels(), values);
           absl::StrAppend(&out, name, "_sum", labels, " ", Value(s.sum), "\n",
                           name, "_count", labels, " ", s.count, "\n");
         });
       }});
  return f;
}

void Registry::OnCollect(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Render() {
  std::vector<std::function<void()>> collectors;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c();
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const Entry& e : entries_) {
    absl::StrAppend(&out, "# HELP ", e.name, " ", EscapeHelp(e.help), "\n",
                    "# TYPE ", e.name, " ", e.type, "\n");
    e.render(out);
  }
  return out;
}

}  // namespace dial::metrics
