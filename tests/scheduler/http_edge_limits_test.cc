// Security round two, H3: what the scheduler's HTTP edge let unauthenticated
// clients take. Measured on cpp-httplib 0.11 (the edge before http/): a
// 64 MB request line without a newline grew the scheduler by 61 MB, 48 MB
// of header lines by 49 MB (kept after the connection closed), and 40
// sockets sending one header line every 3 s made `/`, the API and
// /metrics time out while they were held. Each test here failed there.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "auth/token_table.h"
#include "client/client.h"
#include "scheduler/http_server.h"
#include "scheduler/server.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/temp_dir.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

constexpr char kAdmin[] = "admin-token-1";

// The resident memory of this process (the server runs in it), in bytes.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A TCP connection to 127.0.0.1:port from `source` (another loopback
// address, so that the server sees another client); -1 if refused.
int Connect(int port, const char* source = "127.0.0.1") {
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

// What the server sends on `fd` until it closes or `wait_ms` pass with
// nothing new; `closed` says which.
std::string ReadAnswer(int fd, int wait_ms, bool* closed = nullptr) {
  std::string answer;
  pollfd p{fd, POLLIN, 0};
  char buffer[4096];
  if (closed) *closed = false;
  while (poll(&p, 1, wait_ms) == 1) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    answer.append(buffer, static_cast<size_t>(n));
  }
  return answer;
}

// Sends `start`, then `filler` until `total` bytes are sent or the server
// stops taking them, while another thread reads the answer.
std::string Flood(int port, const std::string& start, const std::string& filler,
                  size_t total) {
  const int fd = Connect(port);
  EXPECT_GE(fd, 0);
  std::string answer;
  std::thread reader([&] { answer = ReadAnswer(fd, 20000); });
  size_t sent = 0;
  if (send(fd, start.data(), start.size(), MSG_NOSIGNAL) > 0) {
    sent = start.size();
    while (sent < total) {
      const ssize_t n = send(fd, filler.data(), filler.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  }
  reader.join();
  close(fd);
  return answer;
}

class HttpEdgeLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(temp_.File("tokens"))
        << "admin root " << auth::Sha256Hex(kAdmin) << "\n";
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
    std::filesystem::create_directories(temp_.File("dash"));
    std::ofstream(temp_.File("dash") + "/index.html") << "<title>dial</title>";
  }

  void StartHttp(http::Limits limits = {}) {
    HttpServerOptions h;
    h.listen = "127.0.0.1:0";
    h.tokens = tokens_.get();
    h.metrics = &registry_;
    h.channel = server_->InProcessChannel();
    h.dashboard_dir = temp_.File("dash");
    h.limits = limits;
    auto http = HttpServer::Start(h);
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = std::move(*http);
  }

  void TearDown() override {
    http_.reset();
    if (server_) server_->Shutdown();
  }

  // `/`, the API and /metrics each answer 200 within 5 s, from 127.0.0.1.
  void ExpectTheEdgeAnswers() {
    httplib::Client c("127.0.0.1", http_->port());
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(5, 0);
    const httplib::Headers auth = {
        {"Authorization", std::string("Bearer ") + kAdmin}};
    auto page = c.Get("/");
    ASSERT_TRUE(page) << "/ did not answer";
    EXPECT_EQ(page->status, 200);
    auto api = c.Post("/api/v1/ListStudies", auth, "{}", "application/json");
    ASSERT_TRUE(api) << "the API did not answer";
    EXPECT_EQ(api->status, 200);
    auto metrics = c.Get("/metrics", auth);
    ASSERT_TRUE(metrics) << "/metrics did not answer";
    EXPECT_EQ(metrics->status, 200);
  }

  storage::testing::ScopedTempDir temp_;
  std::unique_ptr<auth::TokenTable> tokens_;
  std::unique_ptr<storage::StudyStore> store_;
  metrics::Registry registry_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(HttpEdgeLimitsTest, A64MegabyteRequestLineIsCutOffAt16KiB) {
  StartHttp();
  const size_t before = ResidentBytes();
  const std::string answer = Flood(http_->port(), "GET /",
                                   std::string(1 << 20, 'a'), size_t{64} << 20);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 431")) << answer.substr(0, 200);
  EXPECT_THAT(answer, HasSubstr("16384 bytes"));
  const size_t after = ResidentBytes();
  const size_t grown = after > before ? after - before : 0;
  EXPECT_LT(grown, size_t{16} << 20) << "the server kept the request line";
  ExpectTheEdgeAnswers();
}

TEST_F(HttpEdgeLimitsTest, FortyEightMegabytesOfHeadersAreCutOffAt16KiB) {
  StartHttp();
  const size_t before = ResidentBytes();
  std::string lines;
  for (int i = 0; i < 1024; ++i) {
    lines += "X-Filler: " + std::string(1012, 'b') + "\r\n";  // 1 KiB
  }
  const std::string answer =
      Flood(http_->port(), "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", lines,
            size_t{48} << 20);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 431")) << answer.substr(0, 200);
  const size_t after = ResidentBytes();
  const size_t grown = after > before ? after - before : 0;
  EXPECT_LT(grown, size_t{16} << 20) << "the server kept the headers";
  ExpectTheEdgeAnswers();
}

// 40 sockets from one address, each sending a header line a second: 32 are
// held (the per-address cap), the other 8 are refused at once; `/`, the API,
// /metrics and the gRPC port answer others meanwhile; and the held ones are
// cut when the head's deadline passes, however steadily they trickle.
TEST_F(HttpEdgeLimitsTest, SlowClientsHoldNoThreadAndAreCutAtTheDeadline) {
  http::Limits limits;
  limits.head_timeout = absl::Seconds(3);
  StartHttp(limits);
  constexpr int kSockets = 40;
  std::vector<int> fds;
  int refused = 0;
  for (int i = 0; i < kSockets; ++i) {
    const int fd = Connect(http_->port(), "127.0.0.3");
    ASSERT_GE(fd, 0);
    const std::string start = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    (void)send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  // The refused ones are closed at once (with a 503 when the socket takes
  // it before the client's bytes reset it); the held ones say nothing. All
  // are watched together: up to 10 s for the 8 refusals (a loaded machine
  // is slow to send them), then until none has anything new for half a
  // second (a ninth would show there).
  std::vector<pollfd> watch;
  for (int fd : fds) watch.push_back({fd, POLLIN, 0});
  std::vector<bool> closed(fds.size(), false);
  for (int round = 0; round < 100; ++round) {
    for (pollfd& p : watch) p.revents = 0;
    const int wait_ms = refused < kSockets - 32 ? 10000 : 500;
    if (poll(watch.data(), watch.size(), wait_ms) <= 0) break;
    for (size_t i = 0; i < watch.size(); ++i) {
      if (watch[i].revents == 0 || closed[i]) continue;
      const std::string answer = ReadAnswer(fds[i], 0, nullptr);
      if (!answer.empty()) {
        EXPECT_THAT(answer, HasSubstr("HTTP/1.1 503"));
      }
      closed[i] = true;
      // Not `events = 0`: poll reports a closed socket's POLLHUP anyway,
      // so every later round returned at once and the 100 rounds ran out
      // before a slow eighth refusal came (CI saw 7). A negative fd is
      // not watched at all.
      watch[i].fd = -1;
      ++refused;
    }
  }
  std::vector<int> held;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (closed[i]) {
      close(fds[i]);
    } else {
      held.push_back(fds[i]);
    }
  }
  EXPECT_EQ(refused, kSockets - 32);
  ExpectTheEdgeAnswers();
  client::DialClientOptions o;
  o.target = server_->address();
  o.token = kAdmin;
  auto grpc_client = client::DialClient::Create(o);
  ASSERT_TRUE(grpc_client.ok());
  EXPECT_TRUE((*grpc_client)->ListStudies().ok()) << "the gRPC port answers";

  // Trickle a header line a second into each until the server cuts it; it
  // must within the 3 s deadline (and a margin), not after the last line.
  const auto start = std::chrono::steady_clock::now();
  std::vector<bool> cut(held.size(), false);
  size_t cut_count = 0;
  for (int second = 0; second < 15 && cut_count < held.size(); ++second) {
    for (size_t i = 0; i < held.size(); ++i) {
      if (cut[i]) continue;
      const std::string line = "X-Slow: " + std::to_string(second) + "\r\n";
      bool closed = send(held[i], line.data(), line.size(), MSG_NOSIGNAL) < 0;
      if (!closed) (void)ReadAnswer(held[i], 0, &closed);
      if (closed) {
        cut[i] = true;
        ++cut_count;
      }
    }
    if (cut_count < held.size()) {
      // Pacing the attack itself (a line a second), not synchronisation.
      pollfd none{-1, 0, 0};
      poll(&none, 0, 1000);
    }
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(cut_count, held.size()) << "slow sockets were kept";
  EXPECT_LT(took, 8.0);
  for (int fd : held) close(fd);
  ExpectTheEdgeAnswers();
}

}  // namespace
}  // namespace dial::scheduler
