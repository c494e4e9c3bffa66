// gRPC server metrics for /metrics: a server interceptor that counts every
// call by service, method and status code (dial_grpc_server_handled_total)
// and times it from the arrival of its metadata to its status
// (dial_grpc_server_handling_seconds). Labels are bounded: Dial's own
// services and methods (an unknown method counts as "unknown") and the 17
// status codes.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <memory>

#include "common/metrics.h"
#include "dial/v1/study.pb.h"

namespace dial::scheduler {

// Registers the two families in `registry` (which must outlive the
// factory and every call).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRpcMetricsInterceptorFactory(metrics::Registry* registry);

// Counts usage records by owner: dial_usage_slot_seconds_total{owner} and
// dial_usage_gpu_seconds_total{owner}. The first `max_owners` owners get
// series of their own and later ones share owner="other" (a counter
// cannot move to another series), so the label count stays bounded.
std::function<void(const v1::UsageRecord&)> NewUsageCounters(
    metrics::Registry* registry, size_t max_owners = 20);

class SchedulerCore;
// Gauges read from the core at each scrape: dial_studies{state},
// dial_trials{study,state} and dial_workers.
void RegisterCoreGauges(SchedulerCore* core, metrics::Registry* registry);

}  // namespace dial::scheduler
