#include "common/grpc_channel.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/message_limits.h"
#include "common/status.h"

extern char** environ;

namespace dial {

std::string TokenFromFlagOrEnv(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* env = std::getenv("DIAL_TOKEN");
  return env ? env : "";
}

absl::StatusOr<std::string> TakeToken(const std::string& flag_value,
                                      const std::string& token_file) {
  std::string token = TokenFromFlagOrEnv(flag_value);
  // The value's bytes are overwritten where they are, so that the copy of
  // the environment the kernel shows in /proc/<pid>/environ goes too.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "DIAL_TOKEN=", 11) == 0) {
      std::memset(*e + 11, 0, std::strlen(*e + 11));
    }
  }
  unsetenv("DIAL_TOKEN");
  if (token_file.empty()) return token;
  absl::StatusOr<std::string> text = ReadSmallFile(token_file);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("--token-file: cannot read ", token_file));
  }
  std::string from_file(absl::StripAsciiWhitespace(*text));
  if (from_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-file: ", token_file, " is empty"));
  }
  return from_file;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool IsLoopbackTarget(const std::string& target) {
  std::string rest = target;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(rest, scheme)) rest = rest.substr(strlen(scheme));
  }
  if (absl::StartsWith(rest, "unix:") ||
      absl::StartsWith(rest, "unix-abstract:")) {
    return true;
  }
  std::string host = rest;
  if (absl::StartsWith(host, "[")) {
    host = host.substr(1, host.find(']') == std::string::npos
                              ? std::string::npos
                              : host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':');
             colon != std::string::npos && host.find(':') == colon) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const ConnectOptions& options, grpc::ChannelArguments args) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("scheduler address is empty");
  }
  // Security round two, finding 12: without a CA the token went in
  // plaintext to any host, with no warning.
  if (!options.token.empty() && options.tls_ca.empty() && !options.insecure &&
      !IsLoopbackTarget(options.target)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to send a token in plaintext to '", options.target,
        "': give --tls-ca (TLS), or --insecure on a network you trust"));
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key: give both (a client certificate and its "
        "key) or neither");
  }
  if (!options.tls_cert.empty() && options.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert: a client certificate needs --tls-ca (TLS) as well");
  }
  // The scheduler's limits: accept every response it may send, and refuse
  // locally a request it would refuse.
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  args.SetMaxSendMessageSize(kMaxRequestBytes);
  // Reconnect within a second once the scheduler is back (gRPC's default
  // backoff grows to two minutes, longer than a worker's lease), and
  // notice a dead connection (a partition, a host gone) by keepalive pings
  // instead of TCP's retransmission timeout. (A reconnect also needs a
  // thread waiting in a call to advance: see worker/scheduler_client.cc.)
  // (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the
  // connect timeout, and a TLS handshake over a slow link needs seconds.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls_ca.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    DIAL_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadSmallFile(options.tls_ca));
    if (!options.tls_cert.empty()) {
      DIAL_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                            ReadSmallFile(options.tls_cert));
      DIAL_ASSIGN_OR_RETURN(ssl.pem_private_key,
                            ReadSmallFile(options.tls_key));
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(options.target, credentials, args);
}

void Authorize(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace dial
