// What http::Server admits per client (http/admission.h): a head that
// announces a body holds no budget until the body arrives, and no longer
// than a head's deadline; one client (an IPv4 address, an IPv6 /64) takes
// only its part of the body budget and of the connections; a refused
// connection is told which cap it met. Each of these failed before
// (attack review, findings 2 and 5).
#include "http/admission.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "http/server.h"

namespace dial::http {
namespace {

using ::testing::HasSubstr;

// A connection to 127.0.0.1:port from loopback address `source`; -1 if
// refused.
int DialFrom(int port, const char* source = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What the server sends until it closes or `wait_ms` pass with nothing
// new; `closed` says which.
std::string ReadFor(int fd, int wait_ms, bool* closed) {
  std::string got;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  *closed = false;
  while (poll(&p, 1, wait_ms) == 1) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

void SendAll(int fd, const std::string& text) {
  ASSERT_EQ(send(fd, text.data(), text.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(text.size()));
}

// `close`: the server closes after answering (so reading ends there).
std::string PostHead(size_t length, bool close = false) {
  return absl::StrCat(
      "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n",
      close ? "Connection: close\r\n" : "", "Content-Length: ", length,
      "\r\n\r\n");
}

class AdmissionTest : public ::testing::Test {
 protected:
  int Start(Limits limits) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.listen_flag = "--test-listen";
    options.limits = limits;
    server_ = std::make_unique<Server>(options);
    server_->Post("/echo", [](const Request& req, Response& res) {
      res.set_content(absl::StrCat("got ", req.body.size()), "text/plain");
    });
    absl::StatusOr<int> port = server_->Start();
    EXPECT_TRUE(port.ok()) << port.status();
    return port.value_or(0);
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    server_.reset();
  }
  std::vector<int> fds_;
  std::unique_ptr<Server> server_;
};

TEST(AddressKeyTest, IPv6CountsPerSlash64AndIPv4PerAddress) {
  EXPECT_EQ(AddressKey("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(AddressKey("2001:db8:1:2:a:b:c:d"), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressKey("2001:db8:1:2::ffff"), AddressKey("2001:db8:1:2::1"));
  EXPECT_NE(AddressKey("2001:db8:1:3::1"), AddressKey("2001:db8:1:2::1"));
  EXPECT_EQ(AddressKey("::ffff:10.0.0.7"), "10.0.0.7");
  EXPECT_EQ(AddressKey("inproc"), "inproc");
}

TEST(ConnectionCountTest, AClientAndTheServerAreFullSeparately) {
  ConnectionCount count(3, 2);
  const std::string a = AddressKey("2001:db8::1");
  EXPECT_EQ(count.Take(a), ConnectionCount::Admit::kYes);
  // Another address of the same /64 is the same client.
  EXPECT_EQ(count.Take(AddressKey("2001:db8::2")),
            ConnectionCount::Admit::kYes);
  EXPECT_EQ(count.Take(AddressKey("2001:db8::3")),
            ConnectionCount::Admit::kClientFull);
  EXPECT_EQ(count.Take("10.0.0.1"), ConnectionCount::Admit::kYes);
  EXPECT_EQ(count.Take("10.0.0.2"), ConnectionCount::Admit::kServerFull);
  count.Release(a);
  EXPECT_EQ(count.Take("10.0.0.2"), ConnectionCount::Admit::kYes);
  EXPECT_EQ(count.total(), 3);
}

TEST(BodyBudgetTest, SharesGrowAsBytesArriveWithinTheClientsPart) {
  BodyBudget budget(100, 60);
  {
    BodyBudget::Share a(budget, "a");
    BodyBudget::Share b(budget, "b");
    EXPECT_TRUE(a.Resize(50));
    EXPECT_FALSE(a.Resize(61)) << "past a client's part";
    EXPECT_EQ(a.bytes(), 50u);
    EXPECT_TRUE(b.Resize(50));
    BodyBudget::Share c(budget, "c");
    EXPECT_FALSE(c.Resize(1)) << "past the whole budget";
    EXPECT_TRUE(a.Resize(10));
    EXPECT_TRUE(c.Resize(40));
  }
  EXPECT_EQ(budget.used(), 0u);
}

// Finding 2: 8 sockets sent a POST head announcing 8 MiB and nothing
// else; together they reserved the whole body budget for the 60 s body
// timeout, and every POST was answered 503.
TEST_F(AdmissionTest, HeadsThatOnlyAnnounceBodiesHoldNoBudget) {
  Limits limits;
  limits.max_body_bytes_in_flight = 1 << 20;
  limits.max_body_bytes_in_flight_per_address = 1 << 20;
  const int port = Start(limits);
  const std::string head = PostHead(800000);
  for (int i = 0; i < 8; ++i) {
    const int fd = DialFrom(port, "127.0.0.2");
    ASSERT_GE(fd, 0);
    fds_.push_back(fd);
    SendAll(fd, head);
  }
  // Each idle head is read before its connection's first byte of body
  // could arrive; an answer to a later POST shows the heads were seen
  // (the server reads connections in turn on one thread).
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto r = c.Post("/echo", std::string(800000, 'b'), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, "got 800000");
}

// A body that arrives does take its share: a second body from the same
// client that would pass its part is refused while the first is held.
TEST_F(AdmissionTest, ABodyArrivingTakesItsShare) {
  Limits limits;
  limits.max_body_bytes_in_flight = 4 << 20;
  limits.max_body_bytes_in_flight_per_address = 1 << 20;
  const int port = Start(limits);
  const int a = DialFrom(port, "127.0.0.2");
  ASSERT_GE(a, 0);
  fds_.push_back(a);
  SendAll(a, PostHead(1000000) + std::string(900000, 'a'));
  // Until the server has read A's 900,000 bytes, B may pass; each try is
  // answered at once, and within a bounded number one is refused.
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i) {
    const int b = DialFrom(port, "127.0.0.2");
    ASSERT_GE(b, 0);
    SendAll(b, PostHead(200000, true) + std::string(200000, 'b'));
    bool closed = false;
    const std::string answer = ReadFor(b, 10000, &closed);
    close(b);
    if (absl::StrContains(answer, "HTTP/1.1 503")) {
      refused = true;
      EXPECT_THAT(answer, HasSubstr("from one address"));
      EXPECT_THAT(answer, HasSubstr("Retry-After: 1"));
    }
  }
  EXPECT_TRUE(refused);
  // Another client still has its part.
  const int other = DialFrom(port, "127.0.0.3");
  ASSERT_GE(other, 0);
  fds_.push_back(other);
  SendAll(other, PostHead(200000, true) + std::string(200000, 'c'));
  bool closed = false;
  EXPECT_THAT(ReadFor(other, 10000, &closed), HasSubstr("got 200000"));
}

// Finding 5: a POST head with `Content-Length: 1` and no body was held
// for the 60 s body timeout, not the 10 s of a head.
TEST_F(AdmissionTest, ABodyThatNeverStartsIsCutAtTheHeadDeadline) {
  Limits limits;
  limits.head_timeout = absl::Seconds(1);
  limits.body_timeout = absl::Seconds(120);
  const int port = Start(limits);
  const int fd = DialFrom(port);
  ASSERT_GE(fd, 0);
  fds_.push_back(fd);
  SendAll(fd, PostHead(1));
  bool closed = false;
  const std::string answer = ReadFor(fd, 30000, &closed);
  EXPECT_TRUE(closed) << "held past the head deadline";
  EXPECT_EQ(answer, "");
}

// A body that has started has the body's deadline: a slow upload is not
// cut at the head's.
TEST_F(AdmissionTest, ABodyThatHasStartedHasTheBodyDeadline) {
  Limits limits;
  limits.head_timeout = absl::Seconds(1);
  limits.body_timeout = absl::Seconds(60);
  const int port = Start(limits);
  const int fd = DialFrom(port);
  ASSERT_GE(fd, 0);
  fds_.push_back(fd);
  SendAll(fd, PostHead(2) + "x");
  bool closed = false;
  // Quiet for three head deadlines: still open.
  EXPECT_EQ(ReadFor(fd, 3000, &closed), "");
  EXPECT_FALSE(closed);
  SendAll(fd, "y");
  EXPECT_THAT(ReadFor(fd, 10000, &closed), HasSubstr("got 2"));
}

// Finding 5: with the server's cap met, a new client was told "too many
// connections from this address", which was not true.
TEST_F(AdmissionTest, RefusalsNameTheCapThatWasMet) {
  Limits limits;
  limits.max_connections = 2;
  limits.max_connections_per_address = 1;
  const int port = Start(limits);
  auto held = [&](const char* source) {
    const int fd = DialFrom(port, source);
    EXPECT_GE(fd, 0);
    fds_.push_back(fd);
    return fd;
  };
  auto refusal = [&](const char* source) {
    const int fd = held(source);
    bool closed = false;
    return ReadFor(fd, 10000, &closed);
  };
  held("127.0.0.2");
  // The second connection of 127.0.0.2: its own cap.
  const std::string own = refusal("127.0.0.2");
  EXPECT_THAT(own, HasSubstr("503"));
  EXPECT_THAT(own, HasSubstr("from this address"));
  held("127.0.0.3");
  const std::string full = refusal("127.0.0.4");
  EXPECT_THAT(full, HasSubstr("503"));
  EXPECT_THAT(full, HasSubstr("as many connections as it may (2 in all)"));
  EXPECT_THAT(full, ::testing::Not(HasSubstr("from this address")));
}

}  // namespace
}  // namespace dial::http
