// TokenTable: the scheduler's principals, read from its --auth-tokens file,
// one line per principal:
//   <role> <name> <sha256-hex of the token>
// with roles admin, user, worker and viewer; blank lines and lines starting
// with '#' are ignored. The file holds only hashes, so reading it does not
// reveal a token. Reload() reads the file again (SIGHUP); a bad file keeps
// the table as it was. Thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "auth/failure_throttle.h"
#include "auth/principal.h"

namespace dial::auth {

// Lowercase hex SHA-256 of `text`.
std::string Sha256Hex(absl::string_view text);

class TokenTable {
 public:
  // Reads `path`. INVALID_ARGUMENT naming the line and the reason (unknown
  // role, bad name, not 64 hex digits, a hash or name given twice);
  // NOT_FOUND if the file cannot be read.
  static absl::StatusOr<std::unique_ptr<TokenTable>> Load(
      const std::string& path);
  // Parses the text of a tokens file (as Load).
  static absl::StatusOr<absl::flat_hash_map<std::string, Principal>> Parse(
      absl::string_view text);

  // The principal whose token this is; nullopt for an unknown token.
  std::optional<Principal> Find(absl::string_view token) const;
  // Reads the file again; on error the old table stays and the error is
  // returned.
  absl::Status Reload();
  int size() const;
  // The failed tokens of each client, on every edge (HTTP and gRPC)
  // together, so that guessing is not faster through two ports.
  FailureThrottle& failures() const { return failures_; }

 private:
  explicit TokenTable(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  mutable absl::Mutex mu_;
  // By token hash.
  absl::flat_hash_map<std::string, Principal> by_hash_ ABSL_GUARDED_BY(mu_);
  mutable FailureThrottle failures_;
};

// The principal of an authorization header value ("Bearer <token>");
// nullopt: no header was sent. Without a table (no --auth-tokens) every
// caller is an anonymous admin. UNAUTHENTICATED saying what is wrong
// otherwise. The gRPC services and the HTTP edge share it.
absl::StatusOr<Principal> AuthenticateBearer(
    const TokenTable* tokens, std::optional<absl::string_view> header);

}  // namespace dial::auth
