#include "common/leader_channels.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace dial {

std::vector<std::string> SplitTargets(const std::string& target) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(target, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

LeaderChannels::LeaderChannels(ConnectOptions options,
                               const grpc::ChannelArguments& args,
                               std::vector<std::string> addresses)
    : options_(std::move(options)),
      args_(std::make_unique<grpc::ChannelArguments>(args)),
      addresses_(std::move(addresses)) {}

absl::StatusOr<std::unique_ptr<LeaderChannels>> LeaderChannels::Create(
    const ConnectOptions& options, const grpc::ChannelArguments& args) {
  std::vector<std::string> addresses = SplitTargets(options.target);
  if (addresses.empty()) {
    return absl::InvalidArgumentError("--scheduler: address is required");
  }
  std::unique_ptr<LeaderChannels> channels(
      new LeaderChannels(options, args, std::move(addresses)));
  // Every address is checked now (TLS files, plaintext tokens), so a bad
  // one fails at start-up rather than at a failover.
  absl::MutexLock lock(&channels->mu_);
  for (int i = 0; i < channels->size(); ++i) {
    auto made = channels->ChannelTo(i);
    if (!made.ok()) return made.status();
  }
  return channels;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> LeaderChannels::ChannelTo(
    int index) {
  auto it = channels_.find(index);
  if (it != channels_.end()) return it->second;
  ConnectOptions one = options_;
  one.target = addresses_[index];
  auto made = MakeChannel(one, *args_);
  if (!made.ok()) return made.status();
  channels_[index] = *made;
  return *made;
}

LeaderChannels::Pick LeaderChannels::Current() {
  absl::MutexLock lock(&mu_);
  // Checked at Create: the same options make a channel again.
  return {current_, *ChannelTo(current_)};
}

bool LeaderChannels::Observe(const Pick& used, const grpc::Status& status,
                             const grpc::ClientContext& ctx) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  // A channel that failed does not reconnect by itself while idle: ask it
  // to, so a scheduler back on that address is found within a backoff.
  used.channel->GetState(/*try_to_connect=*/true);
  if (addresses_.size() < 2) return false;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const bool standby = trailers.count("dial-standby") > 0;
  std::string leader;
  if (auto it = trailers.find("dial-leader"); it != trailers.end()) {
    leader.assign(it->second.data(), it->second.size());
  }
  absl::MutexLock lock(&mu_);
  if (!standby) {
    // The address failed (its scheduler is gone, or restarting): a fresh
    // channel next time, rather than one that waits out a reconnect
    // backoff grown while the scheduler was down (measured: 8 s after a
    // standby there took over).
    auto it = channels_.find(used.index);
    if (it != channels_.end() && it->second == used.channel) {
      channels_.erase(it);
    }
  }
  if (current_ == used.index) {
    auto hinted = std::find(addresses_.begin(), addresses_.end(), leader);
    current_ = standby && hinted != addresses_.end()
                   ? static_cast<int>(hinted - addresses_.begin())
                   : (used.index + 1) % static_cast<int>(addresses_.size());
    (*ChannelTo(current_))->GetState(/*try_to_connect=*/true);
  }
  return standby;
}

}  // namespace dial
