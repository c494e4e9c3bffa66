#include "scheduler/leadership.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {
namespace {

// Every call a standby gets but health: UNAVAILABLE, with where to go.
class RefuseService : public grpc::CallbackGenericService {
 public:
  explicit RefuseService(std::function<std::string()> leader)
      : leader_(std::move(leader)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    class Refuse : public grpc::ServerGenericBidiReactor {
     public:
      Refuse(grpc::GenericCallbackServerContext* ctx,
             const std::string& leader) {
        // Clients retry a standby's refusal at once (common/leader_channels.h).
        ctx->AddTrailingMetadata("dial-standby", "1");
        if (!leader.empty()) ctx->AddTrailingMetadata("dial-leader", leader);
        Finish(grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            leader.empty()
                ? "this scheduler is a standby and no leader is known yet; "
                  "retry"
                : absl::StrCat("this scheduler is a standby; the leader is ",
                               leader)));
      }
      void OnDone() override { delete this; }
    };
    return new Refuse(ctx, leader_());
  }

 private:
  std::function<std::string()> leader_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StandbyServer>> StandbyServer::Start(
    const std::string& listen,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    std::function<std::string()> leader) {
  std::unique_ptr<StandbyServer> standby(new StandbyServer());
  standby->refuse_ = std::make_unique<RefuseService>(std::move(leader));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, &standby->port_);
  builder.RegisterCallbackGenericService(standby->refuse_.get());
  // As the leader's server: never share the port with another process.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  standby->server_ = builder.BuildAndStart();
  if (!standby->server_ || standby->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (in use?)"));
  }
  if (auto* health = standby->server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
    health->SetServingStatus(kLivenessService, true);
  }
  return standby;
}

StandbyServer::~StandbyServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

std::string Leadership::HolderName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return absl::StrFormat("%s:%d:%08x", host, getpid(), rd());
}

absl::StatusOr<std::unique_ptr<Leadership>> Leadership::Create(
    const Options& options) {
  auto lease = storage::PgLeaderLease::Create(
      {options.target, options.holder, options.advertise, options.lease});
  if (!lease.ok()) return lease.status();
  return std::unique_ptr<Leadership>(new Leadership(std::move(*lease)));
}

Leadership::~Leadership() { Release(false); }

absl::StatusOr<int64_t> Leadership::WaitToLead(
    const std::function<bool()>& stop,
    const std::function<void(const std::string&)>& leader) {
  const absl::Duration every = lease_->options().lease / 3;
  std::string seen = "-";
  while (!stop()) {
    auto epoch = lease_->TryAcquire();
    if (epoch.ok()) {
      leader(lease_->options().address);
      return *epoch;
    }
    auto state = lease_->Read();
    const std::string now = state.ok() && !state->expired ? state->address : "";
    leader(now);
    if (now != seen) {
      if (!epoch.ok() && !absl::IsFailedPrecondition(epoch.status())) {
        spdlog::warn("standby: {}", epoch.status().ToString());
      } else {
        spdlog::info("standby: the leader is {}", now.empty() ? "(none)" : now);
      }
      seen = now;
    }
    absl::SleepFor(every);
  }
  return absl::CancelledError("stopped while standing by");
}

void Leadership::KeepLeading(int64_t epoch, std::function<void()> lost) {
  Release(false);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
    epoch_ = epoch;
  }
  renewer_ = std::thread(
      [this, epoch, lost = std::move(lost)] { Renewals(epoch, lost); });
}

void Leadership::Renewals(int64_t epoch, std::function<void()> lost) {
  const absl::Duration lease = lease_->options().lease;
  // The lease runs (in the database's clock) from a renewal's arrival, at
  // the latest; counting from its sending errs on the safe side.
  absl::Time valid_until = absl::Now() + lease;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), lease / 3)) return;
    }
    const absl::Time sent = absl::Now();
    absl::Status renewed = lease_->Renew(epoch);
    if (renewed.ok()) {
      valid_until = sent + lease;
      continue;
    }
    if (absl::IsFailedPrecondition(renewed) || absl::Now() >= valid_until) {
      spdlog::error("leader: lost the lease of epoch {}: {}", epoch,
                    renewed.ToString());
      lost();
      return;
    }
    spdlog::warn("leader: renewal failed, retrying: {}", renewed.ToString());
  }
}

void Leadership::Release(bool give_up) {
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    epoch = epoch_;
    epoch_ = 0;
  }
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) {
    renewer_.join();
  } else if (renewer_.joinable()) {
    renewer_.detach();
  }
  if (give_up && epoch != 0) {
    absl::Status s = lease_->Release(epoch);
    if (!s.ok())
      spdlog::warn("leader: could not free the lease: {}", s.ToString());
  }
}

namespace {

// A pending signal, without waiting longer than `wait`; 0 if none.
int NextSignal(const sigset_t& signals, absl::Duration wait) {
  timespec ts = absl::ToTimespec(wait);
  const int signal = sigtimedwait(&signals, nullptr, &ts);
  return signal > 0 ? signal : 0;
}

}  // namespace

int RunWithLeadership(LeadOptions options, const TermStarter& start) {
  absl::Mutex mu;
  std::string leader;  // guarded by mu
  std::unique_ptr<Leadership> leadership;
  bool stopping = false;
  while (!stopping) {
    auto standby =
        StandbyServer::Start(options.listen, options.credentials, [&] {
          absl::MutexLock lock(&mu);
          return leader;
        });
    if (!standby.ok()) {
      spdlog::error("{}", standby.status().ToString());
      return 1;
    }
    // Port 0 is picked once: clients keep the address across terms.
    options.listen =
        absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":",
                     (*standby)->port());
    if (!leadership) {
      if (options.lease.advertise.empty()) {
        options.lease.advertise = options.listen;
      }
      auto made = Leadership::Create(options.lease);
      if (!made.ok()) {
        spdlog::error("{}", made.status().ToString());
        return 1;
      }
      leadership = std::move(*made);
    }
    std::printf("dial-scheduler standby on %s\n", options.listen.c_str());
    std::fflush(stdout);
    auto epoch = leadership->WaitToLead(
        [&] {
          for (int s;
               (s = NextSignal(options.signals, absl::ZeroDuration()));) {
            if (options.handle(s)) stopping = true;
          }
          return stopping;
        },
        [&](const std::string& address) {
          absl::MutexLock lock(&mu);
          leader = address;
        });
    if (!epoch.ok()) break;
    absl::Status fenced = options.store->SetFence(options.lease.holder, *epoch,
                                                  options.lease.lease);
    if (!fenced.ok()) {
      spdlog::error("leader: cannot fence the store: {}", fenced.ToString());
      leadership->Release(true);
      continue;
    }
    standby->reset();
    spdlog::info("leader: took the lease, epoch {}", *epoch);
    auto stop_term = start(options.listen);
    if (!stop_term.ok()) {
      spdlog::error("{}", stop_term.status().ToString());
      leadership->Release(true);
      return 1;
    }
    std::atomic<bool> lost{false};
    leadership->KeepLeading(*epoch, [&lost] { lost = true; });
    while (!lost) {
      const int s = NextSignal(options.signals, absl::Milliseconds(100));
      if (s != 0 && options.handle(s)) {
        stopping = true;
        break;
      }
    }
    // At once: with the lease gone, the database refuses its writes anyway.
    (*stop_term)();
    leadership->Release(/*give_up=*/stopping);
    if (!stopping) spdlog::warn("leader: lease lost; standing by again");
    {
      // Not this scheduler any more: unknown until the lease is read.
      absl::MutexLock lock(&mu);
      leader.clear();
    }
  }
  return 0;
}

}  // namespace dial::scheduler
