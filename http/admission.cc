#include "http/admission.h"

#include <arpa/inet.h>

#include <cstring>

namespace dial::http {

std::string AddressKey(const std::string& address) {
  in6_addr v6{};
  if (address.find(':') == std::string::npos ||
      inet_pton(AF_INET6, address.c_str(), &v6) != 1) {
    return address;
  }
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0,    0,
                                                0, 0, 0, 0, 0xff, 0xff};
  char text[INET6_ADDRSTRLEN] = {};
  if (std::memcmp(v6.s6_addr, kMapped, sizeof kMapped) == 0) {
    in_addr v4{};
    std::memcpy(&v4, v6.s6_addr + 12, 4);
    if (inet_ntop(AF_INET, &v4, text, sizeof text) == nullptr) return address;
    return text;
  }
  std::memset(v6.s6_addr + 8, 0, 8);
  if (inet_ntop(AF_INET6, &v6, text, sizeof text) == nullptr) return address;
  return std::string(text) + "/64";
}

ConnectionCount::Admit ConnectionCount::Take(const std::string& client) {
  if (total_ >= max_total_) return Admit::kServerFull;
  int& mine = per_client_[client];
  if (mine >= max_per_client_) return Admit::kClientFull;
  ++mine;
  ++total_;
  return Admit::kYes;
}

void ConnectionCount::Release(const std::string& client) {
  auto it = per_client_.find(client);
  if (it == per_client_.end()) return;
  --total_;
  if (--it->second <= 0) per_client_.erase(it);
}

bool BodyBudget::Share::Resize(size_t bytes) {
  if (budget_ == nullptr || bytes == bytes_) return true;
  BodyBudget& b = *budget_;
  if (bytes < bytes_) {
    const size_t freed = bytes_ - bytes;
    b.used_ -= freed;
    auto it = b.per_client_.find(client_);
    if (it != b.per_client_.end() && (it->second -= freed) == 0) {
      b.per_client_.erase(it);
    }
    bytes_ = bytes;
    return true;
  }
  const size_t more = bytes - bytes_;
  size_t& mine = b.per_client_[client_];
  if (b.used_ + more > b.limit_ || mine + more > b.per_client_limit_) {
    if (mine == 0) b.per_client_.erase(client_);
    return false;
  }
  mine += more;
  b.used_ += more;
  bytes_ = bytes;
  return true;
}

}  // namespace dial::http
