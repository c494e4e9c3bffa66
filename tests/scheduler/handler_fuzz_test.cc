// Handler fuzz smoke test: every StudyService and WorkerService RPC (found
// through the service descriptors, so a new RPC is covered without editing
// this file) gets a few hundred seeded malformed requests against a real
// in-process server on 127.0.0.1:0: missing fields, empty and oversized
// strings, extreme and negative numbers, unknown enum values, valid requests
// with one field broken, and random or mutated bytes that happen to parse as
// the request message. Every answer must be OK or a code that tells the
// caller what it did wrong (never UNKNOWN, INTERNAL, UNAVAILABLE or a missed
// deadline), and the server must still work afterwards.
//
// DIAL_FUZZ_SEED and DIAL_FUZZ_ITERATIONS override the seed and the number of
// requests per RPC, for longer runs by hand.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/spec.h"
#include "dial/v1/service.grpc.pb.h"
#include "scheduler/server.h"
#include "storage/sqlite_study_store.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// Codes that tell a caller what was wrong with its request.
bool Acceptable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
      return true;
    default:
      return false;
  }
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// Valid study specs the mutations start from; $NAME is replaced.
constexpr const char* kBaseSpecs[] = {
    R"(name: $NAME
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: x, float: {min: -3, max: 3}}
  - {name: kind, categorical: {values: [a, b]}}
  - {name: z, int: {min: 1, max: 4}, when: {kind: [b]}}
budget: {max_trials: 50, max_parallel_trials: 5})",
    R"(name: $NAME
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: x, float: {min: 0.001, max: 1, scale: LOG, grid_points: 3}}
  - {name: n, int: {min: 1, max: 100}}
searcher: {grid: {default_points: 3, shuffle: true}}
scheduler: {asha: {min_steps: 1, max_steps: 27, reduction_factor: 3}}
budget: {max_trials: 9, max_parallel_trials: 3}
trial: {command: {argv: ["true"]}})",
    R"(name: $NAME
objective: {metric: acc, goal: MAXIMIZE}
search_space:
  - {name: a, float: {min: -1, max: 1}}
  - {name: b, discrete: {values: [1, 2, 4]}}
searcher: {bayesian: {initial_trials: 2}}
scheduler: {hyperband: {min_steps: 1, max_steps: 9, reduction_factor: 3}}
budget: {max_trials: 20, max_parallel_trials: 2, max_failures_per_trial: 1}
trial: {command: {argv: [python3, train.py], env: {A: b}}, resources: {gpus: 0}})",
    R"(name: $NAME
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: lr, float: {min: 0.0001, max: 0.1, scale: LOG}}
  - {name: momentum, float: {min: 0.5, max: 0.99}}
searcher: {tpe: {initial_trials: 3}}
scheduler: {pbt: {perturbation_interval: 10, quantile: 0.25, resample_probability: 0.2}}
budget: {max_trials: 8, max_parallel_trials: 4}
trial: {trainer: {model: mlp, dataset: synthetic}, resources: {gpus: 0}})",
};

// A valid request per RPC (text format) that mutations start from.
// $STUDY/$WSTUDY: the ask/tell and the worker-run study; $TRIAL/$WTRIAL:
// a trial of each; $WORKER, $ATTEMPT: the registered worker and its
// attempt; $STEP: some step; $DIR: the test's scratch directory.
const std::map<std::string, std::string>& BaseRequests() {
  static const auto* requests = new std::map<std::string, std::string>{
      {"GetStudy", R"(study: "$STUDY")"},
      {"ListStudies", ""},
      {"BackupDatabase", R"(path: "backup.db")"},
      {"ListAuditEvents", R"(study: "$STUDY" page_size: 10)"},
      {"UpdateStudy",
       R"(study: "$STUDY" max_trials: 500 max_parallel_trials: 5)"},
      {"StopStudy", R"(study: "$STUDY")"},
      {"DeleteStudy", R"(study: "$STUDY")"},
      {"ListTrials", R"(study: "$STUDY" states: RUNNING page_size: 10)"},
      {"GetTrial", R"(study: "$STUDY" trial: $TRIAL)"},
      {"GetBestTrials", R"(study: "$STUDY" count: 3)"},
      {"EnqueueTrials",
       R"(study: "$STUDY" trials { params { key: "x" value { double_value: 0.5 } } })"},
      {"ReevaluateTrials", R"(study: "$STUDY" top: 2 seeds: 2)"},
      {"GetParameterImportance", R"(study: "$STUDY" top_quantile: 0.2)"},
      {"ListWorkers", ""},
      {"GetUsage", R"(by: "study" since { seconds: 1 })"},
      {"SetNote",
       R"(study: "$STUDY" trial: $TRIAL note: "a note\nof two lines")"},
      {"WatchStudy", R"(study: "$STUDY")"},
      {"SuggestTrials", R"(study: "$STUDY" count: 2 client_id: "fz")"},
      {"ReportIntermediate",
       R"(study: "$STUDY" trial: $TRIAL step: $STEP
          metrics { key: "loss" value: 1.5 } checkpoint: "$STUDY/$TRIAL/$STEP")"},
      {"CompleteTrial",
       R"(study: "$STUDY" trial: $TRIAL final_metrics { key: "loss" value: 0.5 })"},
      {"RegisterWorker",
       R"(host: "fuzz-host" resources { slots: 2 cpus: 4 memory_bytes: 1000000
          gpus { id: "0" model: "H100" memory_bytes: 80000000000 }
          labels { key: "zone" value: "a" } })"},
      {"Heartbeat",
       R"(worker_id: "$WORKER" running { study: "$WSTUDY" trial: $WTRIAL attempt: $ATTEMPT })"},
      {"AcquireTrial",
       R"(worker_id: "$WORKER" free_slots: 1 free_gpus: 1 wait_ms: 0)"},
      {"ReportProgress",
       R"(worker_id: "$WORKER" study: "$WSTUDY" trial: $WTRIAL attempt: $ATTEMPT
          step: $STEP metrics { key: "loss" value: 2 })"},
      {"FinishTrial",
       R"(worker_id: "$WORKER" study: "$WSTUDY" trial: $WTRIAL attempt: $ATTEMPT
          final_metrics { key: "loss" value: 0.25 })"},
  };
  return *requests;
}

// What exists on the server now, so that some requests get past NOT_FOUND.
struct Targets {
  std::string ask_study = "fz-ask";
  std::string worker_study = "fz-work";
  std::string worker_id;
  int64_t ask_trial = 0;
  int64_t worker_trial = 0;
  int32_t attempt = 1;
};

// Seeded generator of awkward requests, through protobuf reflection.
class RequestMaker {
 public:
  RequestMaker(uint64_t seed, const Targets* targets)
      : rng_(seed), targets_(targets) {}

  bool Coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  size_t Below(size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[Below(v.size())];
  }

  // Sets a random subset of the fields, recursively.
  void Fill(pb::Message* m, int depth) {
    const pb::Descriptor* d = m->GetDescriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      if (Coin(0.4)) continue;  // missing
      Set(m, d->field(i), depth);
    }
  }

  // Breaks one to three fields of a valid message, anywhere in it.
  void Perturb(pb::Message* m) {
    const int n = 1 + static_cast<int>(Below(3));
    for (int i = 0; i < n; ++i) PerturbOne(m);
  }

  // Random bytes, or a valid message's bytes mutated; false when they do
  // not parse as the message (gRPC itself would refuse them).
  bool FromBytes(const pb::Message& valid, pb::Message* m) {
    std::string bytes;
    if (Coin(0.3)) {
      bytes.resize(Below(64));
      for (char& c : bytes) c = static_cast<char>(rng_());
    } else {
      bytes = valid.SerializeAsString();
      const int n = 1 + static_cast<int>(Below(4));
      for (int i = 0; i < n; ++i) {
        const size_t at = bytes.empty() ? 0 : Below(bytes.size());
        switch (Below(4)) {
          case 0:
            if (!bytes.empty()) bytes[at] ^= static_cast<char>(1 << Below(8));
            break;
          case 1:
            if (!bytes.empty()) bytes[at] = static_cast<char>(rng_());
            break;
          case 2:
            bytes.insert(bytes.begin() + at, static_cast<char>(rng_()));
            break;
          default:
            if (!bytes.empty()) bytes.erase(at, 1 + Below(4));
        }
      }
    }
    pb::LogSilencer quiet;  // invalid UTF-8 is logged, then refused
    return m->ParseFromString(bytes);
  }

 private:
  // Breaks one field, picked uniformly among all the fields of the message
  // tree, so that deep ones (scheduler.asha.reduction_factor) are hit as
  // often as top-level ones.
  void PerturbOne(pb::Message* m) {
    const auto& paths = Paths(m->GetDescriptor());
    if (paths.empty()) return;
    const std::vector<const pb::FieldDescriptor*>& path = Pick(paths);
    pb::Message* at = m;
    for (size_t k = 0; k + 1 < path.size(); ++k) {
      const pb::Reflection* r = at->GetReflection();
      if (!path[k]->is_repeated()) {
        at = r->MutableMessage(at, path[k]);
        continue;
      }
      const int n = r->FieldSize(*at, path[k]);
      at = n > 0 && Coin(0.8) ? r->MutableRepeatedMessage(
                                    at, path[k], static_cast<int>(Below(n)))
                              : r->AddMessage(at, path[k]);
    }
    const pb::FieldDescriptor* f = path.back();
    const pb::Reflection* r = at->GetReflection();
    if (Coin(0.25)) return r->ClearField(at, f);
    if (f->is_repeated() && Coin(0.5)) r->ClearField(at, f);
    Set(at, f, static_cast<int>(path.size()));
  }

  // Every field path below `d`, to a depth of 5; maps, Struct and friends
  // count as one field.
  const std::vector<std::vector<const pb::FieldDescriptor*>>& Paths(
      const pb::Descriptor* d) {
    auto& paths = paths_[d];
    if (paths.empty()) AddPaths(d, {}, paths);
    return paths;
  }
  static void AddPaths(
      const pb::Descriptor* d,
      const std::vector<const pb::FieldDescriptor*>& prefix,
      std::vector<std::vector<const pb::FieldDescriptor*>>& out) {
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      auto path = prefix;
      path.push_back(f);
      out.push_back(path);
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE &&
          !f->is_map() && f->message_type()->file()->package() == "dial.v1" &&
          path.size() < 5) {
        AddPaths(f->message_type(), path, out);
      }
    }
  }

  // Gives `f` a value (or, when repeated, some values) from the pools.
  void Set(pb::Message* m, const pb::FieldDescriptor* f, int depth) {
    const pb::Reflection* r = m->GetReflection();
    const int count = !f->is_repeated() ? 1
                      : Coin(0.05)      ? 40
                                        : static_cast<int>(Below(4));
    for (int i = 0; i < count; ++i) {
      using F = pb::FieldDescriptor;
      const bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case F::CPPTYPE_INT32: {
          const int32_t v = static_cast<int32_t>(Int(f));
          rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
          break;
        }
        case F::CPPTYPE_INT64:
          rep ? r->AddInt64(m, f, Int(f)) : r->SetInt64(m, f, Int(f));
          break;
        case F::CPPTYPE_UINT32: {
          const uint32_t v = static_cast<uint32_t>(Int(f));
          rep ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
          break;
        }
        case F::CPPTYPE_UINT64: {
          const uint64_t v = static_cast<uint64_t>(Int(f));
          rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
          break;
        }
        case F::CPPTYPE_DOUBLE:
          rep ? r->AddDouble(m, f, Double()) : r->SetDouble(m, f, Double());
          break;
        case F::CPPTYPE_FLOAT: {
          const float v = static_cast<float>(Double());
          rep ? r->AddFloat(m, f, v) : r->SetFloat(m, f, v);
          break;
        }
        case F::CPPTYPE_BOOL:
          rep ? r->AddBool(m, f, Coin(0.5)) : r->SetBool(m, f, Coin(0.5));
          break;
        case F::CPPTYPE_ENUM: {
          // Known values, and numbers the enum does not define.
          static const std::vector<int> unnamed = {
              -1, 99, 1 << 20, std::numeric_limits<int>::min()};
          const pb::EnumDescriptor* e = f->enum_type();
          const int v =
              Coin(0.7) ? e->value(static_cast<int>(Below(e->value_count())))
                              ->number()
                        : Pick(unnamed);
          rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
          break;
        }
        case F::CPPTYPE_STRING: {
          const std::string v = String(f);
          rep ? r->AddString(m, f, v) : r->SetString(m, f, v);
          break;
        }
        case F::CPPTYPE_MESSAGE: {
          if (depth >= 6) return;
          pb::Message* sub =
              rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
          if (f->message_type()->options().map_entry()) {
            // A map entry always has both halves.
            Set(sub, f->message_type()->map_key(), depth + 1);
            Set(sub, f->message_type()->map_value(), depth + 1);
          } else {
            Fill(sub, depth + 1);
          }
          break;
        }
      }
    }
  }

  int64_t Int(const pb::FieldDescriptor* f) {
    const std::string& name = f->name();
    if ((name == "trial" || name == "number") && Coin(0.5)) {
      return Coin(0.5) ? targets_->ask_trial : targets_->worker_trial;
    }
    if (name == "attempt" && Coin(0.5)) return targets_->attempt;
    using L = std::numeric_limits<int64_t>;
    using L32 = std::numeric_limits<int32_t>;
    // clang-format off
    static const std::vector<int64_t> pool = {
        0, 1, -1, 2, 3, 10, 1000, 1000001, L32::max(), L32::min(), L::max(),
        L::min(), L::max() - 1, L::min() + 1, int64_t{1} << 53,
        -(int64_t{1} << 53), int64_t{1} << 31, int64_t{1} << 32};
    // clang-format on
    return Coin(0.85) ? Pick(pool) : static_cast<int64_t>(rng_());
  }

  double Double() {
    using L = std::numeric_limits<double>;
    // clang-format off
    static const std::vector<double> pool = {
        0, -0.0, 1, -1, 0.5, 3, 0.25, 1e9, 1e-300, L::denorm_min(), 1e300,
        -1e300, L::max(), L::lowest(), L::infinity(), -L::infinity(),
        L::quiet_NaN(), 1.0000001, std::nextafter(1.0, 2.0)};
    // clang-format on
    return Pick(pool);
  }

  std::string String(const pb::FieldDescriptor* f) {
    const std::string& name = f->name();
    if ((name == "study" || name == "name") && Coin(0.5)) {
      return Coin(0.5) ? targets_->ask_study : targets_->worker_study;
    }
    if (name == "worker_id" && Coin(0.6)) return targets_->worker_id;
    if (name == "key" && Coin(0.3)) return "loss";
    // clang-format off
    static const std::vector<std::string> pool = {
        "", "a", "missing", "loss", std::string(65, 'a'),
        std::string(300, 'b'), std::string(5000, 'c'), "../../etc/passwd",
        "/abs/path", "fz-ask/0/1", "fz-ask/-1/../..", "has space",
        "\xc3\xbcnic\xc3\xb6" "de" /* UTF-8 */, std::string("nul\0byte", 8),
        "-1", "99999999999999999999", "%%%", "1e400", "NaN", "RUNNING", "\n"};
    // clang-format on
    return Pick(pool);
  }

  std::mt19937_64 rng_;
  const Targets* targets_;
  std::map<const pb::Descriptor*,
           std::vector<std::vector<const pb::FieldDescriptor*>>>
      paths_;
};

class HandlerFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("dial-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    storage::SqliteStudyStoreOptions store_options;
    store_options.path = (dir_ / "dial.db").string();
    store_options.full_sync = false;  // speed; durability is not tested here
    auto store = storage::SqliteStudyStore::Create(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    SchedulerServerOptions options;
    options.store = store_.get();
    options.listen = "127.0.0.1:0";
    options.worker_lease = absl::Minutes(5);  // outlives the test
    auto server = SchedulerServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
    studies_ = v1::StudyService::NewStub(channel_);
    workers_ = v1::WorkerService::NewStub(channel_);
  }
  void TearDown() override {
    if (hung_) {
      // A handler is stuck: shutting the server down would wait for it
      // forever. Leave it to the process exit, so the failure is reported.
      (void)server_.release();
      (void)store_.release();
    }
    studies_.reset();
    workers_.reset();
    generic_.reset();
    channel_.reset();
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  static v1::StudySpec BaseSpec(size_t i, const std::string& name) {
    auto spec =
        ParseStudySpec(absl::StrReplaceAll(kBaseSpecs[i], {{"$NAME", name}}));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  void SetDeadline(grpc::ClientContext& ctx) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  }

  // Makes sure both studies exist and are ACTIVE, that the ask/tell study
  // has a RUNNING trial and the worker holds one, whatever the requests
  // before did to them.
  void Replenish() {
    for (auto [name, base] : {std::pair{targets_.ask_study, size_t{0}},
                              std::pair{targets_.worker_study, size_t{1}}}) {
      grpc::ClientContext get_ctx;
      SetDeadline(get_ctx);
      v1::GetStudyRequest get;
      get.set_study(name);
      v1::GetStudyResponse got;
      grpc::Status status = studies_->GetStudy(&get_ctx, get, &got);
      if (status.ok() && got.study().state() == v1::STUDY_ACTIVE) continue;
      if (status.ok()) {
        grpc::ClientContext ctx;
        SetDeadline(ctx);
        v1::DeleteStudyRequest del;
        del.set_study(name);
        v1::DeleteStudyResponse deleted;
        ASSERT_TRUE(studies_->DeleteStudy(&ctx, del, &deleted).ok());
      }
      grpc::ClientContext ctx;
      SetDeadline(ctx);
      v1::CreateStudyRequest create;
      *create.mutable_spec() = BaseSpec(base, name);
      v1::CreateStudyResponse created;
      status = studies_->CreateStudy(&ctx, create, &created);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    {
      grpc::ClientContext ctx;
      SetDeadline(ctx);
      v1::SuggestTrialsRequest ask;
      ask.set_study(targets_.ask_study);
      ask.set_client_id("fz");
      v1::SuggestTrialsResponse asked;
      if (studies_->SuggestTrials(&ctx, ask, &asked).ok() &&
          asked.trials_size() > 0) {
        targets_.ask_trial = asked.trials(0).number();
      }
    }
    v1::HeartbeatRequest beat;
    beat.set_worker_id(targets_.worker_id);
    v1::HeartbeatResponse beaten;
    grpc::ClientContext beat_ctx;
    SetDeadline(beat_ctx);
    if (targets_.worker_id.empty() ||
        !workers_->Heartbeat(&beat_ctx, beat, &beaten).ok()) {
      grpc::ClientContext ctx;
      SetDeadline(ctx);
      v1::RegisterWorkerRequest reg;
      reg.set_host("fuzz-worker");
      reg.mutable_resources()->set_slots(4);
      v1::RegisterWorkerResponse registered;
      ASSERT_TRUE(workers_->RegisterWorker(&ctx, reg, &registered).ok());
      targets_.worker_id = registered.worker_id();
    }
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::AcquireTrialRequest acquire;
    acquire.set_worker_id(targets_.worker_id);
    acquire.set_free_slots(1);
    acquire.set_wait_ms(100);
    v1::AcquireTrialResponse acquired;
    if (workers_->AcquireTrial(&ctx, acquire, &acquired).ok() &&
        acquired.has_trial()) {
      targets_.worker_trial = acquired.trial().number();
      targets_.attempt = acquired.attempt();
    }
  }

  // A valid request for `method`, filled in with what exists now.
  std::unique_ptr<pb::Message> Base(const pb::MethodDescriptor* method,
                                    RequestMaker& maker, int iteration) {
    std::unique_ptr<pb::Message> m(pb::MessageFactory::generated_factory()
                                       ->GetPrototype(method->input_type())
                                       ->New());
    if (method->name() == "CreateStudy") {
      *static_cast<v1::CreateStudyRequest*>(m.get())->mutable_spec() =
          BaseSpec(maker.Below(std::size(kBaseSpecs)),
                   absl::StrCat("fz-new-", iteration));
      return m;
    }
    auto it = BaseRequests().find(method->name());
    if (it == BaseRequests().end()) return m;  // an RPC added since: empty
    const std::string text = absl::StrReplaceAll(
        it->second, {{"$WSTUDY", targets_.worker_study},
                     {"$STUDY", targets_.ask_study},
                     {"$WTRIAL", absl::StrCat(targets_.worker_trial)},
                     {"$TRIAL", absl::StrCat(targets_.ask_trial)},
                     {"$WORKER", targets_.worker_id},
                     {"$ATTEMPT", absl::StrCat(targets_.attempt)},
                     {"$STEP", absl::StrCat(1 + maker.Below(1000))},
                     {"$DIR", dir_.string()}});
    EXPECT_TRUE(pb::TextFormat::ParseFromString(text, m.get()))
        << method->name() << ": " << text;
    return m;
  }

  // Sends `request` to `method`; the response bytes go to *response.
  grpc::Status Call(const pb::MethodDescriptor* method,
                    const pb::Message& request, std::string* response) {
    const std::string path =
        absl::StrCat("/", method->service()->full_name(), "/", method->name());
    if (method->server_streaming()) {
      // WatchStudy: a stream that would go on while the study lives; take
      // the first event, then hang up.
      EXPECT_EQ(method->name(), "WatchStudy") << "a new streaming RPC";
      v1::WatchStudyRequest watch;
      watch.CopyFrom(request);
      grpc::ClientContext ctx;
      SetDeadline(ctx);
      auto reader = studies_->WatchStudy(&ctx, watch);
      v1::WatchStudyResponse event;
      const bool got_event = reader->Read(&event);
      if (got_event) ctx.TryCancel();
      while (reader->Read(&event)) {
      }
      grpc::Status status = reader->Finish();
      if (got_event && status.error_code() == grpc::StatusCode::CANCELLED) {
        return grpc::Status::OK;  // we hung up
      }
      return status;
    }
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    grpc::Slice slice(request.SerializeAsString());
    grpc::ByteBuffer request_buffer(&slice, 1), response_buffer;
    std::promise<grpc::Status> done;
    generic_->UnaryCall(&ctx, path, grpc::StubOptions(), &request_buffer,
                        &response_buffer,
                        [&](grpc::Status s) { done.set_value(std::move(s)); });
    // The deadline ends the call; the margin only guards against a gRPC bug.
    auto future = done.get_future();
    if (future.wait_for(absl::ToChronoSeconds(
            kCallTimeout + absl::Seconds(5))) != std::future_status::ready) {
      ctx.TryCancel();
    }
    grpc::Status status = future.get();
    std::vector<grpc::Slice> slices;
    response->clear();
    if (status.ok() && response_buffer.Dump(&slices).ok()) {
      for (const auto& s : slices) {
        response->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return status;
  }

  fs::path dir_;
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<SchedulerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::unique_ptr<v1::StudyService::Stub> studies_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  Targets targets_;
  bool hung_ = false;
};

TEST_F(HandlerFuzzTest, BadRequestsGetCallerErrorsAndTheServerKeepsServing) {
  const uint64_t seed =
      static_cast<uint64_t>(EnvInt("DIAL_FUZZ_SEED", 20240607));
  const int per_rpc = static_cast<int>(EnvInt("DIAL_FUZZ_ITERATIONS", 25));
  RequestMaker maker(seed, &targets_);

  std::vector<const pb::MethodDescriptor*> methods;
  const pb::FileDescriptor* api = v1::GetStudyRequest::descriptor()->file();
  for (const char* name : {"StudyService", "WorkerService"}) {
    const pb::ServiceDescriptor* service = api->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.push_back(service->method(i));
    }
  }
  ASSERT_GE(methods.size(), 18u);
  for (const auto* method : methods) {
    if (method->name() == "CreateStudy") continue;
    EXPECT_TRUE(BaseRequests().count(method->name()))
        << method->name() << " has no base request here; add one";
  }

  ASSERT_NO_FATAL_FAILURE(Replenish());
  std::map<std::string, std::map<grpc::StatusCode, int>> seen;
  int unparsed = 0;
  const int total = per_rpc * static_cast<int>(methods.size());
  for (int i = 0; i < total; ++i) {
    if (i % 20 == 0) {
      ASSERT_NO_FATAL_FAILURE(Replenish());
    }
    const pb::MethodDescriptor* method = methods[i % methods.size()];
    std::unique_ptr<pb::Message> request = Base(method, maker, i);
    const char* mode;
    switch (maker.Below(5)) {
      case 0:
      case 1:
        mode = "fields filled at random";
        request->Clear();
        maker.Fill(request.get(), 0);
        break;
      case 2:
      case 3:
        mode = "a valid request with fields broken";
        maker.Perturb(request.get());
        break;
      default: {
        mode = "bytes parsed as the request";
        std::unique_ptr<pb::Message> parsed(request->New());
        if (!maker.FromBytes(*request, parsed.get())) {
          ++unparsed;
          continue;
        }
        request = std::move(parsed);
      }
    }
    // A long poll of the registered worker would hold the call up to 30 s.
    if (auto* acquire = dynamic_cast<v1::AcquireTrialRequest*>(request.get());
        acquire && acquire->worker_id() == targets_.worker_id) {
      acquire->set_wait_ms(std::min<int64_t>(acquire->wait_ms(), 100));
    }

    std::string response_bytes;
    grpc::Status status = Call(method, *request, &response_bytes);
    ++seen[method->name()][status.error_code()];
    const std::string what = absl::StrCat(
        method->full_name(), " (", mode, ", seed ", seed, ", iteration ", i,
        ") answered code ", status.error_code(), ": ", status.error_message(),
        "\nrequest: ", request->ShortDebugString().substr(0, 2000));
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      hung_ = true;
      FAIL() << what;
    }
    EXPECT_TRUE(Acceptable(status.error_code())) << what;
    if (status.ok() && !method->server_streaming()) {
      std::unique_ptr<pb::Message> response(
          pb::MessageFactory::generated_factory()
              ->GetPrototype(method->output_type())
              ->New());
      EXPECT_TRUE(response->ParseFromString(response_bytes)) << method->name();
    }
  }
  // Which codes each RPC answered: shows how deep the requests got.
  for (const auto* method : methods) {
    int calls = 0, refused = 0;
    std::string codes;
    for (const auto& [code, n] : seen[method->name()]) {
      calls += n;
      if (code != grpc::StatusCode::OK) refused += n;
      absl::StrAppend(&codes, " ", code, ":", n);
    }
    std::cout << method->name() << codes << "\n";
    EXPECT_GE(calls, per_rpc / 2) << method->name();
    if (method->input_type()->field_count() > 0) {
      EXPECT_GT(refused, 0) << method->name() << " refused no request at all";
    }
  }
  // Most mutated byte strings still parse; random ones mostly do not.
  EXPECT_LT(unparsed, total / 4);

  // Bytes that are no request message at all never reach Dial's code:
  // gRPC's callback API refuses them itself, with UNIMPLEMENTED and no
  // message (documented in docs/operations.md). Checked here so that a
  // change in gRPC shows up.
  {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    grpc::Slice garbage(std::string("\xff\xff\xff", 3));
    grpc::ByteBuffer request(&garbage, 1), response;
    std::promise<grpc::Status> done;
    generic_->UnaryCall(&ctx, "/dial.v1.StudyService/GetStudy",
                        grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) { done.set_value(std::move(s)); });
    grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << status.error_message();
  }

  // Still healthy: a valid study can be created and read back.
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::CreateStudyRequest create;
  *create.mutable_spec() = BaseSpec(0, "fz-final");
  v1::CreateStudyResponse created;
  grpc::Status status = studies_->CreateStudy(&ctx, create, &created);
  ASSERT_TRUE(status.ok()) << status.error_message();
  grpc::ClientContext get_ctx;
  SetDeadline(get_ctx);
  v1::GetStudyRequest get;
  get.set_study("fz-final");
  v1::GetStudyResponse got;
  status = studies_->GetStudy(&get_ctx, get, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.study().state(), v1::STUDY_ACTIVE);
}

}  // namespace
}  // namespace dial::scheduler
