// gRPC server metrics for /metrics: a server interceptor that counts every
// call by service, method and status code (dial_grpc_server_handled_total)
// and times it from the arrival of its metadata to its status
// (dial_grpc_server_handling_seconds). Labels are bounded: Dial's own
// services and methods (an unknown method counts as "unknown") and the 17
// status codes.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "common/metrics.h"

namespace dial::scheduler {

// Registers the two families in `registry` (which must outlive the
// factory and every call).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRpcMetricsInterceptorFactory(metrics::Registry* registry);

class SchedulerCore;
// Gauges read from the core at each scrape: dial_studies{state},
// dial_trials{study,state} and dial_workers.
void RegisterCoreGauges(SchedulerCore* core, metrics::Registry* registry);

}  // namespace dial::scheduler
