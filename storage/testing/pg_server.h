// PgServer: a real PostgreSQL server for tests, from the Debian packages
// (postgresql-15): initdb in a fresh temporary directory (as the
// `postgres` user when the test runs as root), listening on a unix socket
// in that directory only, never on the network (unless a test gives it a
// network namespace of its own to listen in). Stopped (immediately) and
// removed when the object goes, also when the test failed.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dial::storage::testing {

class PgServer {
 public:
  struct Options {
    // Off for unit tests: a crash of the machine, not of the server, is
    // what fsync guards against. On for benchmarks.
    bool fsync = false;
    // Non-empty: the `postgres` user has this password and every
    // connection must give it (scram-sha-256); empty: no password (trust).
    std::string password;
    // Non-empty: the server runs in this network namespace (`ip netns
    // exec`), listens on `listen_address` there besides the socket, and
    // trusts clients from `trust_network` (a CIDR) over TCP.
    std::string netns;
    std::string listen_address;
    std::string trust_network;
    // More server settings, `-c name=value ...`.
    std::string settings;
  };
  static absl::StatusOr<std::unique_ptr<PgServer>> Start(
      const Options& options);
  static absl::StatusOr<std::unique_ptr<PgServer>> Start() {
    return Start(Options());
  }
  ~PgServer();

  // Creates an empty database; its URL (as the `postgres` superuser, over
  // the socket).
  absl::StatusOr<std::string> NewDatabase(const std::string& name);
  // The URL of database `name` (existing or not).
  std::string Url(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  // Stops the server at once (as a crash would) / starts it again on the
  // same data.
  absl::Status Kill();
  absl::Status Restart();

 private:
  explicit PgServer(std::string dir, std::string bin, Options options)
      : dir_(std::move(dir)), bin_(std::move(bin)), options_(options) {}
  // Runs one of the server's programs (as `postgres` if we are root).
  absl::Status Run(const std::string& program, const std::string& args) const;

  std::string dir_;  // data in dir_/data, the socket in dir_
  std::string bin_;  // the server's bin directory
  Options options_;
  bool running_ = false;
};

}  // namespace dial::storage::testing
