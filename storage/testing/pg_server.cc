#include "storage/testing/pg_server.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "storage/pg_connection.h"

namespace dial::storage::testing {
namespace {

// The newest /usr/lib/postgresql/N/bin with initdb in it.
std::string FindBin() {
  std::string best;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string bin = (entry.path() / "bin").string();
    if (std::filesystem::exists(bin + "/initdb") && bin > best) best = bin;
  }
  return best;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgServer>> PgServer::Start(
    const Options& options) {
  const std::string bin = FindBin();
  if (bin.empty()) {
    return absl::FailedPreconditionError(
        "no PostgreSQL server under /usr/lib/postgresql "
        "(deploy/install-deps.sh "
        "installs the postgresql package)");
  }
  char tmpl[] = "/tmp/dial-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return absl::InternalError("cannot make a temporary directory");
  }
  std::unique_ptr<PgServer> server(new PgServer(tmpl, bin, options));
  if (geteuid() == 0) {
    // initdb refuses root: the server runs as `postgres`, which must own
    // the directory (and reach it: /tmp is world-searchable).
    const passwd* pg = getpwnam("postgres");
    if (pg == nullptr || chown(tmpl, pg->pw_uid, pg->pw_gid) != 0) {
      return absl::FailedPreconditionError(
          "running as root, the test server needs the postgres user");
    }
  }
  std::string auth = "-A trust";
  if (!options.password.empty()) {
    const std::string pwfile = server->dir_ + "/pwfile";
    { std::ofstream(pwfile) << options.password << "\n"; }
    if (geteuid() == 0) {
      const passwd* pg = getpwnam("postgres");
      if (pg == nullptr || chown(pwfile.c_str(), pg->pw_uid, pg->pw_gid) != 0) {
        return absl::InternalError("cannot hand the password file over");
      }
    }
    auth = "-A scram-sha-256 --pwfile=" + pwfile;
  }
  if (absl::Status s = server->Run(
          "initdb", absl::StrCat("-D ", server->dir_, "/data ", auth,
                                 " -U postgres -E UTF8 --no-sync > ",
                                 server->dir_, "/initdb.log 2>&1"));
      !s.ok()) {
    return s;
  }
  if (!options.trust_network.empty()) {
    std::ofstream(server->dir_ + "/data/pg_hba.conf", std::ios::app)
        << "host all all " << options.trust_network << " trust\n";
  }
  if (absl::Status s = server->Restart(); !s.ok()) return s;
  return server;
}

PgServer::~PgServer() {
  Kill().IgnoreError();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status PgServer::Run(const std::string& program,
                           const std::string& args) const {
  const std::string in =
      options_.netns.empty() ? "" : "ip netns exec " + options_.netns + " ";
  const std::string as = geteuid() == 0 ? "runuser -u postgres -- " : "";
  const std::string cmd = absl::StrCat(in, as, bin_, "/", program, " ", args);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat(program, " failed (", rc, "); see ", dir_, "/*.log"));
  }
  return absl::OkStatus();
}

absl::Status PgServer::Restart() {
  if (running_) return absl::OkStatus();
  // No TCP: the socket in dir_ is the only way in.
  absl::Status s = Run(
      "pg_ctl", absl::StrCat("-D ", dir_, "/data -w -t 60 -l ", dir_,
                             "/server.log -o \"-k ", dir_,
                             " -c listen_addresses='", options_.listen_address,
                             "' -c fsync=", options_.fsync ? "on" : "off",
                             " -c max_connections=50 ", options_.settings,
                             "\" start > /dev/null"));
  running_ = s.ok();
  return s;
}

absl::Status PgServer::Kill() {
  if (!running_) return absl::OkStatus();
  running_ = false;
  return Run("pg_ctl", absl::StrCat("-D ", dir_,
                                    "/data -w -m immediate stop > /dev/null"));
}

std::string PgServer::Url(const std::string& name) const {
  return absl::StrCat("postgresql:///", name, "?host=", dir_, "&user=postgres");
}

absl::StatusOr<std::string> PgServer::NewDatabase(const std::string& name) {
  auto conn = PgConnection::Open({Url("postgres"), options_.password});
  if (!conn.ok()) return conn.status();
  if (absl::Status s = (*conn)->ExecScript("CREATE DATABASE " + name);
      !s.ok()) {
    return s;
  }
  return Url(name);
}

}  // namespace dial::storage::testing
