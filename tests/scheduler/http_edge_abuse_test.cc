// The attack review of the HTTP edge (and of bearer tokens on gRPC): each
// test here reproduces a finding that worked before its fix.
//   2: eight idle POST heads announcing 8 MiB locked every POST, without a
//      token (token-less bodies are small now; see also
//      tests/http/admission_test.cc for the budget and the deadlines);
//   6: 10,000 logins with any token ended every dashboard session;
//  10: the login lockout refused valid tokens, and wrong bearer tokens
//      were not throttled at all, on HTTP or on gRPC;
//  11: four principals filled every event stream.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth/token_table.h"
#include "client/client.h"
#include "scheduler/http_server.h"
#include "scheduler/server.h"
#include "scheduler/services.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/temp_dir.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

constexpr char kAdmin[] = "admin-token-1";
constexpr char kAlice[] = "alice-token-2";
constexpr char kMallory[] = "mallory-token-3";
constexpr char kWorker[] = "worker-token-4";
constexpr int kViewers = 15;

std::string ViewerToken(int i) { return absl::StrCat("viewer-token-v", i); }

// A TCP connection to 127.0.0.1:port from loopback address `source`.
int Connect(int port, const std::string& source) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
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

// Reads until `until` appears, the server closes, or 10 s pass quietly.
std::string ReadUntil(int fd, const std::string& until) {
  std::string got;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  while (got.find(until) == std::string::npos && poll(&p, 1, 10000) == 1) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

class HttpEdgeAbuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream file(temp_.File("tokens"));
    file << "admin root " << auth::Sha256Hex(kAdmin) << "\n"
         << "user alice " << auth::Sha256Hex(kAlice) << "\n"
         << "user mallory " << auth::Sha256Hex(kMallory) << "\n"
         << "worker w1 " << auth::Sha256Hex(kWorker) << "\n";
    for (int i = 0; i < kViewers; ++i) {
      file << "viewer v" << i << " " << auth::Sha256Hex(ViewerToken(i)) << "\n";
    }
    file.close();
    auto tokens = auth::TokenTable::Load(temp_.File("tokens"));
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    tokens_ = std::move(*tokens);
    auto store = storage::SqliteStudyStore::Create({temp_.File("dial.db")});
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    SchedulerServerOptions options;
    options.store = store_.get();
    options.listen = "127.0.0.1:0";
    options.tokens = tokens_.get();
    auto server = SchedulerServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    HttpServerOptions h;
    h.listen = "127.0.0.1:0";
    h.tokens = tokens_.get();
    h.metrics = &registry_;
    h.channel = server_->InProcessChannel();
    auto http = HttpServer::Start(h);
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = std::move(*http);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_read_timeout(30, 0);
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
    http_.reset();
    if (server_) server_->Shutdown();
  }

  httplib::Result Login(const std::string& token) {
    return client_->Post("/api/v1/login",
                         absl::StrCat(R"({"token": ")", token, R"("})"),
                         "application/json");
  }

  // A session's cookie and key, from a login's answer.
  static std::pair<std::string, std::string> SessionOf(
      const httplib::Response& login) {
    const std::string set_cookie = login.get_header_value("Set-Cookie");
    const std::string marker = "\"sessionKey\": \"";
    const size_t at = login.body.find(marker);
    return {set_cookie.substr(0, set_cookie.find(';')),
            at == std::string::npos
                ? ""
                : login.body.substr(at + marker.size(), 64)};
  }

  int WhoAmI(const std::pair<std::string, std::string>& session) {
    auto r = client_->Get(
        "/api/v1/whoami",
        {{"Cookie", session.first}, {"X-Dial-Session", session.second}});
    return r ? r->status : -1;
  }

  // Opens an event stream on study "web" as `token` from `source`: the
  // HTTP status it was answered with (the socket stays open).
  int Watch(const std::string& token, const std::string& source) {
    const int fd = Connect(http_->port(), source);
    EXPECT_GE(fd, 0);
    if (fd < 0) return -1;
    fds_.push_back(fd);
    const std::string request = absl::StrCat(
        "GET /api/v1/WatchStudy?study=web HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Authorization: Bearer ",
        token, "\r\n\r\n");
    (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string answer = ReadUntil(fd, "\r\n\r\n");
    int status = -1;
    if (answer.rfind("HTTP/1.1 ", 0) == 0) status = std::stoi(answer.substr(9));
    // The first event may have come with the head.
    if (status == 200 && answer.find("SNAPSHOT") == std::string::npos) {
      answer += ReadUntil(fd, "SNAPSHOT");
    }
    if (status == 200) {
      EXPECT_THAT(answer, HasSubstr("SNAPSHOT"));
    }
    return status;
  }

  storage::testing::ScopedTempDir temp_;
  std::unique_ptr<auth::TokenTable> tokens_;
  std::unique_ptr<storage::StudyStore> store_;
  metrics::Registry registry_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<int> fds_;
};

// Finding 2: 8 sockets with a POST head of `Content-Length: 8388608` and
// no body took the 64 MiB body budget for 60 s; every POST was 503.
TEST_F(HttpEdgeAbuseTest, IdleHeadsWithoutATokenDoNotLockThePosts) {
  for (int i = 0; i < 8; ++i) {
    const int fd = Connect(http_->port(), "127.0.0.2");
    ASSERT_GE(fd, 0);
    fds_.push_back(fd);
    const std::string head =
        "POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 8388608\r\n\r\n";
    ASSERT_GT(send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
  }
  // Each is answered at once: a token-less body is small.
  for (int fd : fds_) {
    const std::string answer = ReadUntil(fd, "bytes\n");
    EXPECT_THAT(answer, HasSubstr("HTTP/1.1 413"));
    EXPECT_THAT(answer, HasSubstr("at most 16384 bytes"));
  }
  auto login = Login(kAlice);
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 200) << login->body;
  // With a token, a larger body is read as before.
  auto big =
      client_->Post("/api/v1/ListStudies",
                    {{"Authorization", std::string("Bearer ") + kAdmin}},
                    "{" + std::string(100000, ' ') + "}", "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 200) << big->body;
}

// Finding 6: the session table dropped the oldest session of anyone, so
// 10,000 logins with any token (a worker's too) ended alice's.
TEST_F(HttpEdgeAbuseTest, ManyLoginsEndOnlyTheirOwnPrincipalsSessions) {
  auto alice = Login(kAlice);
  ASSERT_TRUE(alice);
  ASSERT_EQ(alice->status, 200) << alice->body;
  const auto alice_session = SessionOf(*alice);
  ASSERT_EQ(WhoAmI(alice_session), 200);
  std::pair<std::string, std::string> first, last;
  for (int i = 0; i < 10000; ++i) {
    auto r = Login(kMallory);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    if (i == 0) first = SessionOf(*r);
    last = SessionOf(*r);
  }
  EXPECT_EQ(WhoAmI(alice_session), 200) << "alice's session was ended";
  EXPECT_EQ(WhoAmI(last), 200);
  EXPECT_EQ(WhoAmI(first), 401) << "mallory's own oldest goes first";
}

// Finding 6, decided (docs/decisions.md): a worker's token opens no
// dashboard session.
TEST_F(HttpEdgeAbuseTest, AWorkersTokenCannotLogIn) {
  auto r = Login(kWorker);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_THAT(r->body, HasSubstr("worker"));
  EXPECT_FALSE(r->has_header("Set-Cookie"));
}

// Finding 10: while an address was locked out, a valid token was refused
// too (and the attempt restarted the 300 s wait), so one client behind a
// proxy locked out everyone behind it.
TEST_F(HttpEdgeAbuseTest, AValidTokenIsNeverRefusedForItsAddressesFailures) {
  int throttled = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = Login("wrong");
    ASSERT_TRUE(r);
    if (r->status == 429) {
      ++throttled;
      EXPECT_FALSE(r->get_header_value("Retry-After").empty());
    } else {
      EXPECT_EQ(r->status, 401);
    }
  }
  EXPECT_GE(throttled, 10);
  auto good = Login(kAlice);
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  auto bearer = client_->Get(
      "/api/v1/whoami", {{"Authorization", std::string("Bearer ") + kAdmin}});
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200) << bearer->body;
}

// Finding 10: 300 wrong `Authorization: Bearer` tokens were each answered
// 401 in 0.04 s.
TEST_F(HttpEdgeAbuseTest, WrongBearerTokensAreThrottledOnHttp) {
  int throttled = 0;
  for (int i = 0; i < 20; ++i) {
    auto r =
        client_->Get("/api/v1/whoami",
                     {{"Authorization", absl::StrCat("Bearer wrong-", i)}});
    ASSERT_TRUE(r);
    if (r->status == 429) {
      ++throttled;
      EXPECT_FALSE(r->get_header_value("Retry-After").empty());
      EXPECT_THAT(r->body, HasSubstr("too many wrong tokens"));
    } else {
      EXPECT_EQ(r->status, 401);
    }
  }
  EXPECT_GE(throttled, 10);
  auto good =
      client_->Post("/api/v1/ListStudies",
                    {{"Authorization", std::string("Bearer ") + kAdmin}}, "{}",
                    "application/json");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
}

// Finding 10, on gRPC.
TEST_F(HttpEdgeAbuseTest, WrongBearerTokensAreThrottledOnGrpc) {
  auto as = [&](const std::string& token) {
    client::DialClientOptions o;
    o.target = server_->address();
    o.token = token;
    auto c = client::DialClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  auto wrong = as("wrong");
  int throttled = 0;
  for (int i = 0; i < 20; ++i) {
    absl::Status s = wrong->ListStudies().status();
    if (absl::IsResourceExhausted(s)) {
      ++throttled;
      EXPECT_THAT(s.message(), HasSubstr("too many wrong tokens"));
    } else {
      EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
    }
  }
  EXPECT_GE(throttled, 10);
  EXPECT_TRUE(as(kAdmin)->ListStudies().ok()) << "a valid token passes";
}

// Finding 11: 4 streams per principal, 16 in all: 4 principals held every
// one, and an admin could not watch.
TEST_F(HttpEdgeAbuseTest, AnAdminCanAlwaysWatch) {
  auto created =
      client_->Post("/api/v1/CreateStudy",
                    {{"Authorization", std::string("Bearer ") + kAdmin}},
                    R"({"spec": {"name": "web",
          "objective": {"metric": "loss", "goal": "MINIMIZE"},
          "searchSpace": [{"name": "x", "float": {"min": 0, "max": 1}}],
          "budget": {"maxTrials": 5, "maxParallelTrials": 5}}})",
                    "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  // Viewers take every stream that is not kept for admins, 4 each, each
  // viewer from its own address.
  const int open_to_all = HttpApi::kMaxStreams - HttpApi::kAdminStreams;
  int opened = 0, refused = 0;
  for (int i = 0; i < kViewers; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int status =
          Watch(ViewerToken(i), absl::StrCat("127.0.1.", 10 + i));
      if (status == 200) {
        ++opened;
      } else {
        EXPECT_EQ(status, 429);
        ++refused;
      }
    }
  }
  EXPECT_EQ(opened, open_to_all);
  EXPECT_EQ(refused, 4 * kViewers - open_to_all);
  EXPECT_EQ(Watch(kAdmin, "127.0.2.1"), 200) << "an admin could not watch";
}

// gRPC peers count as the HTTP edge counts clients; the in-process channel
// (the HTTP edge's own calls, throttled there) and Unix sockets not at all.
TEST(PeerClientTest, PeersCountPerAddressOrSlash64) {
  EXPECT_EQ(PeerClient("ipv4:10.0.0.1:5000"), "10.0.0.1");
  EXPECT_EQ(PeerClient("ipv6:[2001:db8::1]:5000"), "2001:db8::/64");
  EXPECT_EQ(PeerClient("ipv6:%5B2001:db8::1%5D:5000"), "2001:db8::/64");
  EXPECT_EQ(PeerClient("ipv6:[::ffff:10.0.0.1]:5000"), "10.0.0.1");
  EXPECT_EQ(PeerClient("unix:/run/dial.sock"), "");
  EXPECT_EQ(PeerClient(""), "");
}

}  // namespace
}  // namespace dial::scheduler
