// Hosts of a test's own on one machine: network namespaces joined by veth
// pairs on a bridge that lives in a namespace of its own, with no default
// route anywhere, so no packet of the test leaves them; and the small
// process helpers the tests that use them share. Needs root and `ip netns`.
// Not thread-safe.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/subprocess.h"

namespace dial::testing {

namespace fs = std::filesystem;

inline std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs argv (a path first) to its end, at most `timeout`; its exit status
// (-1 if it could not start or was killed at the deadline) and its stdout
// and stderr together.
struct Ran {
  int status = -1;
  std::string output;
  bool ok() const { return status == 0; }
};
inline Ran RunCommand(const std::vector<std::string>& argv,
                      std::chrono::seconds timeout = std::chrono::seconds(30)) {
  auto out = MakePipe();
  if (!out.ok()) return {-1, out.status().ToString()};
  SpawnOptions options;
  options.argv = argv;
  options.search_path = false;
  options.stdout_fd = ChildFd::Fd(out->write.get());
  options.stderr_fd = ChildFd::Fd(out->write.get());
  auto pid = Spawn(options);
  if (!pid.ok()) return {-1, pid.status().ToString()};
  out->write.reset();
  Ran ran;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out->read.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(out->read.get(), chunk, sizeof(chunk));
    if (n <= 0) break;
    ran.output.append(chunk, static_cast<size_t>(n));
  }
  if (timed_out) kill(*pid, SIGKILL);
  const int status = WaitForExit(*pid).value_or(-1);
  ran.status = timed_out ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (timed_out) absl::StrAppend(&ran.output, "\n(killed: ran past deadline)");
  return ran;
}

inline std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The end of a log file, for failure messages.
inline std::string Tail(const fs::path& path, size_t bytes = 3000) {
  const std::string text = ReadFile(path);
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

// Deletes the namespaces it was given (and with them their links) when it
// goes out of scope, test failed or not. Declared before the processes
// that run in them, so those are killed first.
class NetnsGuard {
 public:
  explicit NetnsGuard(std::string ip) : ip_(std::move(ip)) {}
  NetnsGuard(const NetnsGuard&) = delete;
  ~NetnsGuard() { DeleteAll(); }
  void DeleteAll() {
    for (auto it = names_.rbegin(); it != names_.rend(); ++it) {
      RunCommand({ip_, "netns", "delete", *it});
    }
    names_.clear();
  }
  // Creates namespace `name`; false (and why in `error`) if it cannot.
  bool Add(const std::string& name, std::string* error) {
    Ran ran = RunCommand({ip_, "netns", "add", name});
    if (!ran.ok()) {
      *error = ran.output;
      return false;
    }
    names_.push_back(name);
    return true;
  }

 private:
  const std::string ip_;
  std::vector<std::string> names_;
};

// A network of hosts for one test: namespaces "<prefix>-<host>" with
// addresses <net>1, <net>2, ... in the order given, each with one link
// (Link(host)) to a bridge in "<prefix>-br". Namespaces of an earlier run
// of the same prefix family whose process is gone are removed first.
class TestNetwork {
 public:
  // `family`: a short tag (e.g. "dsec"); the prefix adds this process id.
  TestNetwork(std::string ip, const std::string& family, std::string net)
      : ip_(std::move(ip)),
        family_(family),
        prefix_(family + std::to_string(getpid())),
        net_(std::move(net)),
        guard_(ip_) {}

  // Builds the namespaces and links; false (and why in `error`) when
  // namespaces cannot be made here (the caller skips). Fails the test on
  // any later step, and checks that no namespace has a default route and
  // that every host reaches the first over its own link.
  bool Build(const std::vector<std::string>& hosts, std::string* error) {
    RemoveStale();
    if (!guard_.Add(Ns("br"), error)) return false;
    hosts_ = hosts;
    const std::string br = Ns("br");
    Ip({"-n", br, "link", "set", "lo", "up"});
    Ip({"-n", br, "link", "add", "br0", "type", "bridge", "stp_state", "0",
        "forward_delay", "0"});
    Ip({"-n", br, "link", "set", "br0", "up"});
    for (size_t i = 0; i < hosts.size(); ++i) {
      const std::string ns = Ns(hosts[i]);
      if (!guard_.Add(ns, error)) return false;
      const std::string port = absl::StrCat("p", i);
      Ip({"-n", br, "link", "add", port, "type", "veth", "peer", "name",
          Link(hosts[i]), "netns", ns});
      Ip({"-n", br, "link", "set", port, "master", "br0", "up"});
      Ip({"-n", ns, "link", "set", "lo", "up"});
      Ip({"-n", ns, "addr", "add", absl::StrCat(net_, i + 1, "/24"), "dev",
          Link(hosts[i])});
      Ip({"-n", ns, "link", "set", Link(hosts[i]), "up"});
    }
    // Before any connection: no way out, and the first host's address is
    // reached over this test's own link.
    const std::string first = Address(hosts[0]);
    for (const std::string& host : hosts) {
      Ran routes = RunCommand({ip_, "-n", Ns(host), "route", "show"});
      EXPECT_TRUE(routes.ok()) << routes.output;
      EXPECT_THAT(routes.output,
                  ::testing::Not(::testing::HasSubstr("default")))
          << Ns(host) << " has a default route";
      if (host == hosts[0]) continue;
      Ran route = RunCommand(
          {ip_, "netns", "exec", Ns(host), ip_, "route", "get", first});
      EXPECT_TRUE(route.ok()) << route.output;
      EXPECT_THAT(route.output, ::testing::HasSubstr("dev " + Link(host) + " "))
          << "in " << Ns(host) << ", " << first
          << " is not reached over the test's link " << Link(host);
    }
    return true;
  }

  std::string Ns(const std::string& host) const { return prefix_ + "-" + host; }
  std::string Link(const std::string& host) const {
    return absl::StrCat("dl", getpid(), host.substr(0, 2));
  }
  std::string Address(const std::string& host) const {
    for (size_t i = 0; i < hosts_.size(); ++i) {
      if (hosts_[i] == host) return absl::StrCat(net_, i + 1);
    }
    return "";
  }
  // argv run inside host's namespace.
  std::vector<std::string> In(const std::string& host,
                              std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip_, "netns", "exec", Ns(host)});
    return argv;
  }
  // Runs `ip args...`, failing the test if it fails.
  void Ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {ip_};
    argv.insert(argv.end(), args.begin(), args.end());
    Ran ran = RunCommand(argv);
    EXPECT_TRUE(ran.ok()) << absl::StrJoin(argv, " ") << ": " << ran.output;
  }
  // Takes host's link down (a partition) or up again.
  void SetLink(const std::string& host, bool up) {
    Ip({"-n", Ns(host), "link", "set", Link(host), up ? "up" : "down"});
  }
  // Deletes the namespaces now (after the processes in them are gone).
  void Reset() { guard_.DeleteAll(); }
  const std::string& ip() const { return ip_; }

 private:
  void RemoveStale() {
    Ran list = RunCommand({ip_, "netns", "list"});
    for (absl::string_view line : absl::StrSplit(list.output, '\n')) {
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      const std::string& name = words[0];
      if (name.rfind(family_, 0) != 0) continue;
      const std::string pid =
          name.substr(family_.size(), name.find('-') - family_.size());
      if (pid.empty() || fs::exists("/proc/" + pid)) continue;
      RunCommand({ip_, "netns", "delete", name});
    }
  }

  const std::string ip_;
  const std::string family_;
  const std::string prefix_;
  const std::string net_;
  NetnsGuard guard_;
  std::vector<std::string> hosts_;
};

}  // namespace dial::testing
