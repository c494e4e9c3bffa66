// Benchmark helper: a scheduler in this process on 127.0.0.1:0 with a
// SQLite file in a temporary directory, and a client for it, so the
// benchmarks go through the real gRPC API. Removes the directory when done.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "client/client.h"
#include "scheduler/server.h"
#include "storage/sqlite_study_store.h"

namespace dial::bench {

class LocalScheduler {
 public:
  // nullptr if the store or the server cannot start.
  static std::unique_ptr<LocalScheduler> Start(const std::string& name) {
    std::unique_ptr<LocalScheduler> s(new LocalScheduler());
    s->dir_ = std::filesystem::temp_directory_path() /
              (name + "-" + std::to_string(getpid()));
    std::filesystem::create_directories(s->dir_);
    auto store = storage::SqliteStudyStore::Create(
        {(s->dir_ / "bench.db").string(), /*full_sync=*/false});
    if (!store.ok()) return nullptr;
    s->store_ = std::move(*store);
    scheduler::SchedulerServerOptions options;
    options.store = s->store_.get();
    options.listen = "127.0.0.1:0";
    auto server = scheduler::SchedulerServer::Create(options);
    if (!server.ok()) return nullptr;
    s->server_ = std::move(*server);
    auto client = client::DialClient::Create({s->server_->address()});
    if (!client.ok()) return nullptr;
    s->client_ = std::move(*client);
    return s;
  }
  ~LocalScheduler() {
    client_.reset();
    if (server_) server_->Shutdown();
    server_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  client::DialClient& client() { return *client_; }

 private:
  LocalScheduler() = default;
  std::filesystem::path dir_;
  std::unique_ptr<storage::SqliteStudyStore> store_;
  std::unique_ptr<scheduler::SchedulerServer> server_;
  std::unique_ptr<client::DialClient> client_;
};

}  // namespace dial::bench
