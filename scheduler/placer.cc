#include "scheduler/placer.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace dial::scheduler {

placement::Selector Placer::SelectorOf(const v1::StudySpec& spec) {
  placement::Selector selector;
  for (const auto& [key, list] : spec.trial().resources().selector()) {
    std::vector<std::string>& values = selector[key];
    for (const auto& v : list.values()) values.push_back(v.string_value());
  }
  return selector;
}

const v1::Trial* Placer::Startable(const StudyEntry& entry) {
  // Trials are in number order: the first PENDING is the oldest.
  for (int64_t number : entry.pending()) {
    if (!entry.Uploading(number)) return &entry.trials().at(number);
  }
  return nullptr;
}

placement::Pending Placer::PendingOf(const StudyEntry& entry,
                                     const v1::Trial& oldest) {
  const v1::StudySpec& spec = entry.study().spec();
  placement::Pending p;
  p.study = entry.name();
  p.owner = entry.study().owner();
  p.priority = spec.priority();
  p.gpus = spec.trial().resources().gpus();
  p.selector = SelectorOf(spec);
  p.require_isolation = spec.trial().resources().require_isolation();
  if (spec.trial().has_command() && spec.trial().command().argv_size() > 0) {
    p.command = spec.trial().command().argv(0);
  }
  p.refused_by = entry.refusals();
  p.oldest_ms = google::protobuf::util::TimeUtil::TimestampToMilliseconds(
      oldest.create_time());
  return p;
}

placement::Running Placer::RunningNow() const {
  placement::Running running;
  for (const auto& [name, entry] : p_.studies->all()) {
    if (!entry->worker_run()) continue;
    auto count = entry->state_counts().find(v1::RUNNING);
    if (count == entry->state_counts().end() || count->second == 0) continue;
    const int32_t n = static_cast<int32_t>(count->second);
    placement::Running::Held& held = running.by_owner[entry->study().owner()];
    held.slots += n;
    held.gpus += n * entry->study().spec().trial().resources().gpus();
    running.slots_by_study[name] = n;
  }
  running.recent = recent_;
  return running;
}

placement::Worker Placer::WorkerOf(const v1::Worker& worker) const {
  placement::Worker w;
  w.id = worker.id();
  w.gpus = worker.resources().gpus_size();
  w.free_gpus = w.gpus;
  for (const auto& [key, value] : worker.resources().labels()) {
    w.labels[key] = value;
  }
  // Every worker has its host, whether or not it says so.
  w.labels.emplace("host", worker.host());
  w.isolated = worker.resources().isolation().isolated();
  if (worker.resources().has_commands() &&
      !worker.resources().commands().any()) {
    w.commands.emplace(worker.resources().commands().allowed().begin(),
                       worker.resources().commands().allowed().end());
  }
  return w;
}

std::pair<StudyEntry*, const v1::Trial*> Placer::Choose(
    const std::string& worker_id, int32_t free_gpus) {
  placement::Worker worker;
  if (const v1::Worker* known = p_.workers->Find(worker_id)) {
    worker = WorkerOf(*known);
  }
  worker.id = worker_id;
  worker.free_gpus = free_gpus;
  std::vector<placement::Pending> pending;
  std::vector<std::pair<StudyEntry*, const v1::Trial*>> refs;
  for (const auto& [name, entry] : p_.studies->all()) {
    if (entry->study().state() != v1::STUDY_ACTIVE || !entry->worker_run()) {
      continue;
    }
    if (const v1::Trial* oldest = Startable(*entry)) {
      pending.push_back(PendingOf(*entry, *oldest));
      refs.push_back({entry.get(), oldest});
    }
  }
  placement::Running running = RunningNow();
  std::map<std::string, int32_t> slots;
  for (const auto& [owner, held] : running.by_owner) slots[owner] = held.slots;
  recent_ = usage_.Advance(p_.clock->Now(), slots);
  running.recent = recent_;
  auto chosen =
      placement::Choose(worker, pending, running, *TableOf(p_.quotas));
  if (!chosen) return {nullptr, nullptr};
  return refs[*chosen];
}

int Placer::MarkPreemptions() {
  const absl::Time now = p_.clock->Now();
  Preemptions& marks = *p_.preemptions;
  std::map<std::string, int32_t> preempting;
  for (const auto& [key, mark] : marks.marks()) ++preempting[mark.by_study];
  // Studies whose ready trials no worker has taken for a second.
  std::vector<placement::Need> needs;
  int32_t top = INT32_MIN;  // the highest priority among them
  for (const auto& [name, entry] : p_.studies->all()) {
    if (!entry->worker_run()) continue;
    const v1::Trial* oldest = Startable(*entry);
    if (oldest == nullptr) {
      marks.Placed(name);
      continue;
    }
    if (entry->study().state() != v1::STUDY_ACTIVE ||
        !marks.Unplaced(name, now, absl::Seconds(1))) {
      continue;
    }
    placement::Need need;
    need.study = PendingOf(*entry, *oldest);
    for (int64_t number : entry->pending()) {
      need.ready += !entry->Uploading(number);
    }
    need.preempting = preempting[name];
    top = std::max(top, need.study.priority);
    needs.push_back(std::move(need));
  }
  if (needs.empty()) return 0;
  // Only trials of a lower priority than some need can be preempted, or of
  // the same with --fair-share-preempt.
  std::vector<placement::Candidate> running;
  std::vector<Preemptions::Key> keys;
  std::vector<int32_t> attempts;
  for (const auto& [name, entry] : p_.studies->all()) {
    const v1::StudySpec& spec = entry->study().spec();
    if (!entry->worker_run() || spec.priority() > top ||
        (spec.priority() == top && !p_.fair_share_preempt)) {
      continue;
    }
    for (int64_t number : entry->open()) {
      const v1::Trial& t = entry->trials().at(number);
      if (t.state() != v1::RUNNING || marks.Find({name, number}, t.attempt())) {
        continue;
      }
      placement::Candidate c;
      c.study = name;
      c.trial = number;
      c.owner = entry->study().owner();
      c.priority = spec.priority();
      c.gpus = spec.trial().resources().gpus();
      if (const v1::Worker* w = p_.workers->Find(t.worker_id())) {
        c.worker = WorkerOf(*w);
        c.worker_labels = c.worker.labels;
      }
      c.ran = now - marks.StartedAt({name, number}, now);
      running.push_back(std::move(c));
      keys.push_back({name, number});
      attempts.push_back(t.attempt());
    }
  }
  if (running.empty()) return 0;
  // What runs once the preemptions under way are done: each marked trial's
  // slot already counts as its starved study's, or later ticks would mark
  // again for slots already on their way (and past quotas and shares).
  placement::Running held = RunningNow();
  for (const auto& [key, mark] : marks.marks()) {
    auto victim = p_.studies->Shared(key.first);
    auto gainer = p_.studies->Shared(mark.by_study);
    if (!victim || !gainer) continue;
    auto move = [&](const StudyEntry& entry, int32_t sign) {
      placement::Running::Held& h = held.by_owner[entry.study().owner()];
      h.slots += sign;
      h.gpus += sign * entry.study().spec().trial().resources().gpus();
    };
    move(*victim, -1);
    move(*gainer, 1);
  }
  const auto chosen =
      placement::ChoosePreemptions(needs, running, held, *TableOf(p_.quotas),
                                   p_.preempt_min_run, p_.fair_share_preempt);
  for (const auto& [victim, need] : chosen) {
    marks.Add(keys[victim], {needs[need].study.study, attempts[victim],
                             now + p_.preempt_grace});
  }
  return static_cast<int>(chosen.size());
}

void Placer::RestoreUsage(const std::vector<v1::UsageRecord>& records) {
  using google::protobuf::util::TimeUtil;
  const absl::Time now = p_.clock->Now();
  // Replaces what the meter held: a reload after a lost commit reads the
  // same records again, which must not count twice.
  usage_ = placement::UsageMeter(p_.half_life);
  for (const v1::UsageRecord& r : records) {
    usage_.AddPast(
        r.owner(),
        absl::FromUnixMillis(TimeUtil::TimestampToMilliseconds(r.start_time())),
        absl::FromUnixMillis(TimeUtil::TimestampToMilliseconds(r.end_time())),
        now);
  }
  recent_ = usage_.Advance(now, {});
}

std::vector<Preemptions::Key> Placer::Overdue() const {
  const absl::Time now = p_.clock->Now();
  std::vector<Preemptions::Key> out;
  for (const auto& [key, mark] : p_.preemptions->marks()) {
    if (mark.deadline <= now) out.push_back(key);
  }
  return out;
}

std::string Placer::WhyWaiting(const StudyEntry& entry) const {
  if (entry.study().state() != v1::STUDY_ACTIVE || !entry.worker_run()) {
    return "";
  }
  const v1::Trial* oldest = Startable(entry);
  if (oldest == nullptr) return "";
  const placement::Pending pending = PendingOf(entry, *oldest);
  // Refusals name workers: judge each worker then, not kinds of them.
  return placement::WhyWaiting(
      pending,
      Kinds(pending.selector.count("host") || !pending.refused_by.empty()),
      RunningNow(), *TableOf(p_.quotas));
}

const std::vector<placement::Worker>& Placer::Kinds(bool with_host) const {
  if (with_host) {  // rare: a study that selects by host
    each_.clear();
    p_.workers->ForEach(
        [&](const v1::Worker& w) { each_.push_back(WorkerOf(w)); });
    return each_;
  }
  if (kinds_of_ != p_.workers->generation()) {
    kinds_of_ = p_.workers->generation();
    using Commands = std::optional<std::vector<std::string>>;
    std::map<std::tuple<int32_t, placement::Labels, bool, Commands>, int32_t>
        count;
    p_.workers->ForEach([&](const v1::Worker& w) {
      placement::Worker kind = WorkerOf(w);
      if (w.resources().labels().count("host") == 0) kind.labels.erase("host");
      ++count[{kind.gpus, std::move(kind.labels), kind.isolated,
               std::move(kind.commands)}];
    });
    kinds_.clear();
    for (auto& [key, n] : count) {
      placement::Worker kind;
      kind.gpus = kind.free_gpus = std::get<0>(key);
      kind.labels = std::get<1>(key);
      kind.isolated = std::get<2>(key);
      kind.commands = std::get<3>(key);
      kind.count = n;
      kinds_.push_back(std::move(kind));
    }
  }
  return kinds_;
}

std::string Placer::ShapeOf(const std::string& worker_id,
                            int32_t free_gpus) const {
  std::string shape = absl::StrCat(free_gpus);
  if (const v1::Worker* w = p_.workers->Find(worker_id)) {
    const placement::Labels labels(w->resources().labels().begin(),
                                   w->resources().labels().end());
    for (const auto& [key, value] : labels) {
      absl::StrAppend(&shape, " ", key.size(), ":", key, value.size(), ":",
                      value);
    }
  }
  return shape;
}

bool Placer::ShapesDecide() const {
  for (const auto& [name, entry] : p_.studies->all()) {
    if (entry->worker_run() && !entry->pending().empty() &&
        (entry->study().spec().trial().resources().selector().count("host") ||
         !entry->refusals().empty())) {
      return false;
    }
  }
  return true;
}

}  // namespace dial::scheduler
