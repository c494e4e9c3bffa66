// How Dial's clients (dialctl, dial-worker, the C++ client library, the
// benchmarks) reach the scheduler: a channel with Dial's message limits,
// TLS when a CA is given (mTLS with a client certificate), and the bearer
// token each call carries. Thread-safe: plain functions.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Channel;
class ChannelArguments;
class ClientContext;
}  // namespace grpc

namespace dial {

struct ConnectOptions {
  std::string target = "";  // host:port
  // PEM files. With tls_ca the channel uses TLS and checks the scheduler's
  // certificate against it; tls_cert + tls_key add a client certificate
  // (mTLS). Without tls_ca the channel is plaintext.
  std::string tls_ca = "";
  std::string tls_cert = "";
  std::string tls_key = "";
  // Overrides the name checked in the scheduler's certificate (e.g. when
  // connecting by IP to a certificate issued for a DNS name).
  std::string tls_server_name = "";
  // Sent as "authorization: Bearer <token>"; empty sends none.
  std::string token = "";
  // Send the token without TLS to an address that is not loopback (a
  // network you trust). Without it MakeChannel refuses.
  bool insecure = false;
};

// Whether a gRPC target is on this host: localhost, 127.x, [::1], or a
// unix socket.
bool IsLoopbackTarget(const std::string& target);

// The token to use: `flag_value` if set, else $DIAL_TOKEN, else empty.
std::string TokenFromFlagOrEnv(const std::string& flag_value);

// A daemon's token, kept out of what its children can read: from
// `token_file` (surrounding whitespace stripped) when set, else `flag_value`,
// else $DIAL_TOKEN. $DIAL_TOKEN is then wiped from this process's
// environment, in place (the bytes /proc/<pid>/environ shows are zeroed)
// as well as from environ. NOT_FOUND naming the file when it cannot be
// read; INVALID_ARGUMENT when it is empty.
absl::StatusOr<std::string> TakeToken(const std::string& flag_value,
                                      const std::string& token_file);

// A channel to options.target with Dial's message limits set on `args`.
// INVALID_ARGUMENT for an empty target, a certificate without its key (or
// the reverse), a client certificate without a CA, or a token that would
// travel in plaintext beyond this host (no tls_ca, not insecure); NOT_FOUND
// naming the file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const ConnectOptions& options, grpc::ChannelArguments args);

// Adds the bearer token (if any) to one call's metadata.
void Authorize(grpc::ClientContext& ctx, const std::string& token);

// Reads a whole file (PEM, token). NOT_FOUND naming it if unreadable.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

}  // namespace dial
