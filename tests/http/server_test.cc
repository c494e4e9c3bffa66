// http::Server (http/server.h) over real sockets: streamed answers (and a
// failed stream cut, not completed), HEAD, gzip, keep-alive, files from a
// mounted directory never through a link, TLS with client certificates,
// and Stop while a handler runs.
#include "http/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "http/message.h"
#include "storage/testing/temp_dir.h"

namespace dial::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class HttpServerTest : public ::testing::Test {
 protected:
  int Start(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.listen_flag = "--test-listen";
    server_ = std::make_unique<Server>(options);
    server_->Get("/hello", [](const Request& req, Response& res) {
      res.set_content("hello " + req.param("name"), "text/plain");
    });
    server_->Get("/big", [](const Request&, Response& res) {
      res.set_content(std::string(100000, 'z'), "application/json");
    });
    server_->Post("/echo/*", [](const Request& req, Response& res) {
      res.set_content(req.path + ":" + req.body, "text/plain");
    });
    server_->Get("/count", [](const Request& req, Response& res) {
      auto left = std::make_shared<int>(std::stoi(req.param("n")));
      const bool fail = req.param("fail") == "1";
      res.set_stream("text/plain", [left, fail](Sink& sink) {
        if (*left == 0) return fail ? StreamStep::kFail : StreamStep::kDone;
        sink.Write(std::to_string((*left)--) + "\n");
        return StreamStep::kMore;
      });
    });
    EXPECT_TRUE(server_->Mount(temp_.File("www")).ok());
    absl::StatusOr<int> port = server_->Start();
    EXPECT_TRUE(port.ok()) << port.status();
    return port.value_or(0);
  }

  void SetUp() override {
    std::filesystem::create_directories(temp_.File("www/assets"));
    std::ofstream(temp_.File("www/index.html")) << "<title>t</title>";
    std::ofstream(temp_.File("www/assets/app.js")) << "let a = 1;";
    std::ofstream(temp_.File("secret")) << "the secret";
    std::filesystem::create_symlink(temp_.File("secret"),
                                    temp_.File("www/link.txt"));
  }

  storage::testing::ScopedTempDir temp_;
  std::unique_ptr<Server> server_;
};

TEST_F(HttpServerTest, RoutesQueriesBodiesAndKeepAlive) {
  httplib::Client c("127.0.0.1", Start());
  auto hello = c.Get("/hello?name=a%20b%2Bc");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hello a b+c");
  // The same connection serves the next request (keep-alive).
  c.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    auto echo =
        c.Post("/echo/x%2Fy", "body " + std::to_string(i), "text/plain");
    ASSERT_TRUE(echo);
    EXPECT_EQ(echo->body, "/echo/x/y:body " + std::to_string(i));
  }
  EXPECT_EQ(c.Get("/nothing/here")->status, 404);
  EXPECT_EQ(c.Post("/hello", "", "text/plain")->status, 404);
  auto head = c.Head("/hello?name=q");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Length"), "7");
  EXPECT_EQ(head->body, "");
}

// A connection's last request is answered with "Connection: close" (a
// client that sent another on it would get a reset: the dashboard bench's
// fetch did), and the others say how long an idle connection stays.
TEST_F(HttpServerTest, TheLastRequestOfAConnectionIsToldSo) {
  ServerOptions options;
  options.limits.max_requests_per_connection = 3;
  const int port = Start(options);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  std::string requests;
  for (int i = 0; i < 3; ++i) {
    requests += "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }
  ASSERT_EQ(send(fd, requests.data(), requests.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(requests.size()));
  std::string answers;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 10000) == 1) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;  // the server closed it, after the third
    answers.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  std::vector<std::string> parts = absl::StrSplit(answers, "HTTP/1.1 200");
  ASSERT_EQ(parts.size(), 4u) << answers;
  EXPECT_THAT(parts[1], HasSubstr("Keep-Alive: timeout=10"));
  EXPECT_THAT(parts[1], Not(HasSubstr("Connection: close")));
  EXPECT_THAT(parts[3], HasSubstr("Connection: close"));
}

TEST_F(HttpServerTest, LargeAnswersAreGzippedWhenTheClientTakesGzip) {
  httplib::Client c("127.0.0.1", Start());
  c.set_decompress(false);
  auto zipped = c.Get("/big", {{"Accept-Encoding", "br, gzip"}});
  ASSERT_TRUE(zipped);
  EXPECT_EQ(zipped->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(zipped->body.size(), 1000u);
  auto refused = c.Get("/big", {{"Accept-Encoding", "gzip;q=0"}});
  EXPECT_EQ(refused->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(refused->body.size(), 100000u);
  auto small = c.Get("/hello", {{"Accept-Encoding", "gzip"}});  // < 256 B
  EXPECT_EQ(small->get_header_value("Content-Encoding"), "");
}

TEST_F(HttpServerTest, StreamsEndCompleteOrCut) {
  httplib::Client c("127.0.0.1", Start());
  auto done = c.Get("/count?n=3");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->body, "3\n2\n1\n");
  EXPECT_EQ(done->get_header_value("Transfer-Encoding"), "chunked");
  // A stream that fails is cut: the client sees an error, not a short
  // answer that looks whole.
  auto failed = c.Get("/count?n=3&fail=1");
  EXPECT_FALSE(failed);
}

TEST_F(HttpServerTest, FilesAreTypedByNameAndNeverReachedThroughALink) {
  httplib::Client c("127.0.0.1", Start());
  auto index = c.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->body, "<title>t</title>");
  EXPECT_THAT(index->get_header_value("Content-Type"), HasSubstr("text/html"));
  auto js = c.Get("/assets/app.js");
  ASSERT_TRUE(js);
  EXPECT_THAT(js->get_header_value("Content-Type"),
              HasSubstr("text/javascript"));
  EXPECT_EQ(c.Get("/link.txt")->status, 404);
  EXPECT_EQ(c.Get("/assets/%2e%2e/%2e%2e/secret")->status, 404);
  EXPECT_EQ(c.Get("//etc/passwd")->status, 404);
  EXPECT_EQ(c.Get("/assets/app.js%00.html")->status, 404);
}

TEST_F(HttpServerTest, BodiesAreJudgedFromTheirHeaders) {
  Request head;
  head.headers = {{"content-encoding", "gzip"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 415);
  head.headers = {{"Transfer-Encoding", "chunked"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 411);
  head.headers = {{"Content-Length", "101"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 413);
  // A second header of the kind counts too (the parser would have read
  // the body as chunked while the check saw only the first).
  head.headers = {{"Transfer-Encoding", "identity"},
                  {"Transfer-Encoding", "chunked"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 411);
  head.headers = {{"Content-Encoding", "identity"},
                  {"Content-Encoding", "gzip"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 415);
  head.headers = {{"Content-Length", "ten"}};
  EXPECT_EQ(CheckBodyHeaders(head, 100)->status, 400);
  head.headers = {{"Content-Length", "100"}};
  EXPECT_FALSE(CheckBodyHeaders(head, 100));
  std::string path;
  std::multimap<std::string, std::string> params;
  EXPECT_FALSE(ParseTarget("/a%2", path, params));
  EXPECT_FALSE(ParseTarget("http://x/", path, params));
  ASSERT_TRUE(ParseTarget("/a%20b+?x=1&y=%26+&x=2", path, params));
  EXPECT_EQ(path, "/a b+");
  EXPECT_EQ(params.find("y")->second, "& ");
  EXPECT_EQ(params.count("x"), 2u);
}

TEST_F(HttpServerTest, TlsWithClientCertificates) {
  const std::string ca = temp_.File("ca");
  ASSERT_EQ(std::system(("/bin/bash " DIAL_SOURCE_DIR "/deploy/dev-ca.sh " +
                         ca + " > /dev/null 2>&1")
                            .c_str()),
            0);
  ServerOptions options;
  options.tls_cert = ca + "/server.crt";
  options.tls_key = ca + "/server.key";
  options.tls_client_ca = ca + "/ca.crt";
  const int port = Start(options);
  httplib::SSLClient with("127.0.0.1", port, ca + "/worker.crt",
                          ca + "/worker.key");
  with.set_ca_cert_path((ca + "/ca.crt").c_str());
  auto ok = with.Get("/hello?name=tls");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->body, "hello tls");
  httplib::SSLClient without("127.0.0.1", port);
  without.set_ca_cert_path((ca + "/ca.crt").c_str());
  EXPECT_FALSE(without.Get("/hello")) << "no client certificate, no answer";

  ServerOptions broken;
  broken.listen = "127.0.0.1:0";
  broken.tls_cert = ca + "/server.crt";
  broken.tls_key = ca + "/ca.crt";  // not a key
  Server bad(broken);
  absl::StatusOr<int> refused = bad.Start();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

// Connects to 127.0.0.1:port; -1 on failure.
int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads from `fd` until `until` appears, the server closes, or 10 s pass.
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

// A client that asks first (Expect: 100-continue) is told to go on, and
// its body is read. (The body budget: admission_test.cc.)
TEST_F(HttpServerTest, AClientThatAsksFirstIsToldToGoOn) {
  const int port = Start();
  const std::string body(800000, 'b');
  const int a = Dial(port);
  ASSERT_GE(a, 0);
  const std::string a_head =
      absl::StrCat("POST /echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                   "Content-Type: text/plain\r\nContent-Length: ", body.size(),
                   "\r\n", "Expect: 100-continue\r\n\r\n");
  ASSERT_GT(send(a, a_head.data(), a_head.size(), MSG_NOSIGNAL), 0);
  EXPECT_THAT(ReadUntil(a, "\r\n\r\n"), HasSubstr("100 Continue"));
  ASSERT_EQ(send(a, body.data(), body.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(body.size()));
  EXPECT_THAT(ReadUntil(a, "/echo/x:b"), HasSubstr("HTTP/1.1 200"));
  close(a);
}

// A client that leaves a quiet stream: its producer is woken (cancel) and
// cleaned up (closed) at once, not at its next write minutes later, which
// held an event stream's slots after every dashboard reload.
TEST_F(HttpServerTest, AStreamWhoseClientLeavesIsCancelled) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  Server server(options);
  auto woken = std::make_shared<absl::Notification>();
  absl::Notification closed, first_sent;
  server.Get("/quiet", [&, woken](const Request&, Response& res) {
    auto sent = std::make_shared<bool>(false);
    res.set_stream(
        "text/event-stream",
        [woken, sent, &first_sent](Sink& sink) {
          if (!*sent) {
            *sent = true;
            sink.Write("data: hello\n\n");
            first_sent.Notify();
            return StreamStep::kMore;
          }
          woken->WaitForNotification();  // nothing new: wait to be woken
          return StreamStep::kDone;
        },
        [&closed] { closed.Notify(); });
    res.cancel = [woken] {
      if (!woken->HasBeenNotified()) woken->Notify();
    };
  });
  absl::StatusOr<int> port = server.Start();
  ASSERT_TRUE(port.ok());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(*port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  const std::string get = "GET /quiet HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_GT(send(fd, get.data(), get.size(), MSG_NOSIGNAL), 0);
  // Until the first event has arrived: the producer is then waiting.
  std::string got;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  while (got.find("hello") == std::string::npos && poll(&p, 1, 10000) == 1) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  ASSERT_THAT(got, HasSubstr("hello"));
  first_sent.WaitForNotification();
  close(fd);  // the client goes while the producer waits
  EXPECT_TRUE(woken->WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the producer was never woken";
  EXPECT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  if (!woken->HasBeenNotified()) woken->Notify();  // let Stop finish
}

// Any exception from a handler is a 500, not the end of the process
// (asio's pool terminates on one; only std::exception was caught).
TEST_F(HttpServerTest, AThrowingHandlerIsA500) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  Server server(options);
  server.Get("/throws", [](const Request&, Response&) { throw 42; });
  absl::StatusOr<int> port = server.Start();
  ASSERT_TRUE(port.ok());
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/throws");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(c.Get("/throws")->status, 500);
}

TEST_F(HttpServerTest, StopWaitsForARunningHandler) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  Server server(options);
  absl::Notification entered, release;
  std::atomic<bool> finished{false};
  server.Get("/slow", [&](const Request&, Response& res) {
    entered.Notify();
    release.WaitForNotification();
    finished = true;
    res.set_content("late", "text/plain");
  });
  absl::StatusOr<int> port = server.Start();
  ASSERT_TRUE(port.ok());
  std::thread client([&] {
    httplib::Client c("127.0.0.1", *port);
    (void)c.Get("/slow");
  });
  entered.WaitForNotification();
  std::thread stopper([&] { server.Stop(); });
  release.Notify();
  stopper.join();
  EXPECT_TRUE(finished) << "Stop returned before the handler did";
  client.join();
  EXPECT_FALSE(Server(options).Mount(temp_.File("nothing")).ok());
}

}  // namespace
}  // namespace dial::http
