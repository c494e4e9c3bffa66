// What the HTTP server admits, counted per client: connections (in all and
// per client), and the bytes of request bodies held at once (in all and per
// client). A "client" is an AddressKey: an IPv4 address, or the /64 prefix
// of an IPv6 address (one host or site gets a whole /64, so counting
// addresses would let one client take every slot). Not thread-safe: the
// server uses these on its I/O thread only.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace dial::http {

// "10.0.0.1" -> "10.0.0.1"; "2001:db8:1:2:a:b:c:d" -> "2001:db8:1:2::/64";
// an IPv4-mapped IPv6 address counts as its IPv4 address; anything that is
// not an address ("inproc", "") stays as it is.
std::string AddressKey(const std::string& address);

// Open connections, all together and per client.
class ConnectionCount {
 public:
  ConnectionCount(int max_total, int max_per_client)
      : max_total_(max_total), max_per_client_(max_per_client) {}
  enum class Admit { kYes, kServerFull, kClientFull };
  // kYes takes a slot (give it back with Release).
  Admit Take(const std::string& client);
  void Release(const std::string& client);
  int total() const { return total_; }

 private:
  const int max_total_, max_per_client_;
  int total_ = 0;
  std::map<std::string, int> per_client_;
};

// Bytes of request bodies held at once, all together and per client. A
// share grows as a body's bytes arrive, so a head that announces 8 MiB and
// sends nothing holds nothing.
class BodyBudget {
 public:
  BodyBudget(size_t limit, size_t per_client_limit)
      : limit_(limit), per_client_limit_(per_client_limit) {}
  // A client's share of the budget, given back when it goes.
  class Share {
   public:
    Share() = default;
    Share(BodyBudget& budget, std::string client)
        : budget_(&budget), client_(std::move(client)) {}
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;
    ~Share() { Resize(0); }
    // Holds `bytes` in all (more or fewer than before); false, holding
    // what it held, when that would pass the budget or the client's part.
    bool Resize(size_t bytes);
    size_t bytes() const { return bytes_; }

   private:
    BodyBudget* budget_ = nullptr;
    std::string client_;
    size_t bytes_ = 0;
  };
  size_t used() const { return used_; }

 private:
  const size_t limit_, per_client_limit_;
  size_t used_ = 0;
  std::map<std::string, size_t> per_client_;
};

}  // namespace dial::http
