// LeaderChannels: a client's way to schedulers that share one database, one
// leading and the others standing by (docs/ha.md). The target may list
// several addresses ("a:7070,b:7070"); one channel each, made when first
// used. Calls go to the current one. A standby answers UNAVAILABLE with
// `dial-standby` (and, when it knows, `dial-leader`: the leader's address)
// in its trailing metadata: the client then moves to the leader if it is
// one of the listed addresses, else to the next one, and may retry at once
// since the standby did nothing. Any other UNAVAILABLE moves the next call
// to the next address but is the caller's to retry (the call may have been
// applied). A hint outside the list is never followed: the token would go
// to an address the user did not name. With one address nothing changes.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_channel.h"

namespace grpc {
class Channel;
class ChannelArguments;
class ClientContext;
class Status;
}  // namespace grpc

namespace dial {

// The addresses of a comma-separated target, spaces trimmed, empty ones
// dropped.
std::vector<std::string> SplitTargets(const std::string& target);

class LeaderChannels {
 public:
  // `options.target` may be a list. INVALID_ARGUMENT for an empty list and
  // whatever MakeChannel refuses for any address.
  static absl::StatusOr<std::unique_ptr<LeaderChannels>> Create(
      const ConnectOptions& options, const grpc::ChannelArguments& args);

  // The channel calls should use now, and which address it is.
  struct Pick {
    int index = 0;
    std::shared_ptr<grpc::Channel> channel;
  };
  Pick Current();
  // After a call on `used` ended with `status` (its trailing metadata in
  // `ctx`): whether a standby refused it, so it may go again, at once, to
  // the new Current(). Calls on other threads may have moved on already:
  // only a move from `used` is made here.
  bool Observe(const Pick& used, const grpc::Status& status,
               const grpc::ClientContext& ctx);
  // How many addresses: a caller retries a standby's refusal at most that
  // many times.
  int size() const { return static_cast<int>(addresses_.size()); }

 private:
  LeaderChannels(ConnectOptions options, const grpc::ChannelArguments& args,
                 std::vector<std::string> addresses);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelTo(int index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ConnectOptions options_;
  std::unique_ptr<grpc::ChannelArguments> args_;
  const std::vector<std::string> addresses_;
  absl::Mutex mu_;
  int current_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial
