#include "scheduler/rpc_metrics.h"

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/core.h"

namespace dial::scheduler {
namespace {

using grpc::experimental::InterceptionHookPoints;

// absl and gRPC share the canonical code numbering (common/grpc_status.h).
std::string CodeName(grpc::StatusCode code) {
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

struct Families {
  metrics::Family<metrics::Counter>* handled;
  metrics::Family<metrics::Histogram>* seconds;
};

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(const Families& f, absl::string_view full_method)
      : families_(f), start_(std::chrono::steady_clock::now()) {
    // "/dial.v1.StudyService/GetStudy": only Dial's own and gRPC's health
    // and reflection services get their names as labels.
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(
        absl::StripPrefix(full_method, "/"), absl::MaxSplits('/', 1));
    if (absl::StartsWith(parts.first, "dial.v1.") ||
        absl::StartsWith(parts.first, "grpc.")) {
      service_ = std::string(parts.first);
      method_ = std::string(parts.second);
    } else {
      service_ = method_ = "unknown";
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start_)
                                 .count();
      families_.handled
          ->With({service_, method_,
                  CodeName(methods->GetSendStatus().error_code())})
          ->Add();
      families_.seconds->With({service_, method_})->Observe(seconds);
    }
    methods->Proceed();
  }

 private:
  const Families families_;
  const std::chrono::steady_clock::time_point start_;
  std::string service_, method_;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(const Families& f) : families_(f) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(families_,
                                     info->method() ? info->method() : "");
  }

 private:
  const Families families_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRpcMetricsInterceptorFactory(metrics::Registry* registry) {
  Families f;
  f.handled = registry->AddCounter(
      "dial_grpc_server_handled_total",
      "gRPC calls completed by the scheduler, by service, method and status "
      "code.",
      {"grpc_service", "grpc_method", "grpc_code"});
  f.seconds = registry->AddHistogram(
      "dial_grpc_server_handling_seconds",
      "Time from a call's arrival to its status, by service and method.",
      {"grpc_service", "grpc_method"}, metrics::LatencyBuckets());
  return std::make_unique<Factory>(f);
}

std::function<void(const v1::UsageRecord&)> NewUsageCounters(
    metrics::Registry* registry, size_t max_owners) {
  auto* slots = registry->AddCounter(
      "dial_usage_slot_seconds_total",
      "Slot-seconds used by worker trials' ended attempts, by owner.",
      {"owner"});
  auto* gpus = registry->AddCounter(
      "dial_usage_gpu_seconds_total",
      "GPU-seconds used by worker trials' ended attempts, by owner.",
      {"owner"});
  auto owners = std::make_shared<std::set<std::string>>();
  auto mu = std::make_shared<absl::Mutex>();
  return [slots, gpus, owners, mu, max_owners](const v1::UsageRecord& r) {
    std::string label = r.owner();
    {
      absl::MutexLock lock(mu.get());
      if (!owners->count(label)) {
        if (owners->size() < max_owners) {
          owners->insert(label);
        } else {
          label = "other";
        }
      }
    }
    slots->With({label})->Add(r.slot_seconds());
    gpus->With({label})->Add(r.gpu_seconds());
  };
}

void RegisterCoreGauges(SchedulerCore* core, metrics::Registry* registry) {
  auto* studies =
      registry->AddGauge("dial_studies", "Studies by state.", {"state"});
  auto* trials = registry->AddGauge("dial_trials", "Trials by study and state.",
                                    {"study", "state"});
  auto* workers =
      registry->AddGauge("dial_workers", "Workers registered and not lost.");
  auto* pending = registry->AddGauge("dial_queue_pending_trials",
                                     "PENDING trials waiting for a worker.");
  auto* suggestions =
      registry->AddGauge("dial_queue_suggestions",
                         "Suggestion tasks waiting for a suggestion "
                         "thread, all studies together.");
  auto* events = registry->AddGauge("dial_queue_watch_events",
                                    "Events queued for watchers.");
  auto* watchers =
      registry->AddGauge("dial_watchers", "Open WatchStudy streams.");
  registry->OnCollect(
      [core, studies, trials, workers, pending, suggestions, events, watchers] {
        const SchedulerCore::Gauges g = core->ReadGauges();
        studies->Clear();
        for (const auto& [state, n] : g.studies) {
          studies->With({v1::StudyState_Name(state)})->Add(n);
        }
        trials->Clear();
        for (const auto& [study, by_state] : g.trials) {
          for (const auto& [state, n] : by_state) {
            trials->With({study, v1::TrialState_Name(state)})->Add(n);
          }
        }
        workers->With({})->Set(g.workers);
        pending->With({})->Set(static_cast<double>(g.pending));
        suggestions->With({})->Set(static_cast<double>(g.suggestions_queued));
        events->With({})->Set(static_cast<double>(g.events_queued));
        watchers->With({})->Set(static_cast<double>(g.watchers));
      });
}

}  // namespace dial::scheduler
