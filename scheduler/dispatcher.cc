#include "scheduler/dispatcher.h"

#include <memory>
#include <queue>
#include <utility>
#include <vector>

namespace dial::scheduler {

void Dispatcher::Answer(Outbox& out, AcquireCallback done,
                        absl::StatusOr<std::optional<Assignment>> result) {
  // std::function needs a copyable closure; the answer is moved once.
  auto shared = std::make_shared<absl::StatusOr<std::optional<Assignment>>>(
      std::move(result));
  out.replies.push_back([done = std::move(done), shared](WriteTicket ticket) {
    done(Reply<std::optional<Assignment>>(std::move(*shared), ticket));
  });
}

void Dispatcher::Park(Waiter waiter) {
  const Seq seq = next_++;
  by_shape_[waiter.shape].insert(seq);
  by_worker_.emplace(waiter.worker_id, seq);
  by_deadline_.insert({waiter.deadline, seq});
  ++by_principal_[waiter.principal];
  waiters_.emplace(seq, std::move(waiter));
}

void Dispatcher::End(Seq seq, absl::StatusOr<std::optional<Assignment>> result,
                     Outbox& out) {
  auto it = waiters_.find(seq);
  Waiter& w = it->second;
  auto shape = by_shape_.find(w.shape);
  shape->second.erase(seq);
  if (shape->second.empty()) by_shape_.erase(shape);
  for (auto [at, end] = by_worker_.equal_range(w.worker_id); at != end; ++at) {
    if (at->second == seq) {
      by_worker_.erase(at);
      break;
    }
  }
  by_deadline_.erase({w.deadline, seq});
  if (--by_principal_[w.principal] == 0) by_principal_.erase(w.principal);
  Answer(out, std::move(w.done), std::move(result));
  waiters_.erase(it);
}

bool Dispatcher::Try(Seq seq, const AssignFn& assign, Outbox& out) {
  const Waiter& w = waiters_.at(seq);
  if (!w.alive()) {
    End(seq, std::optional<Assignment>(), out);
    return true;
  }
  auto assignment = assign(w.worker_id, w.free_gpus);
  if (assignment.ok() && !assignment->has_value()) return false;
  End(seq, std::move(assignment), out);
  return true;
}

void Dispatcher::Dispatch(const AssignFn& assign, Outbox& out, bool by_shape) {
  if (!by_shape) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      const Seq seq = it->first;
      ++it;  // before Try, which may erase `seq`
      Try(seq, assign, out);
    }
    return;
  }
  // Each shape's oldest call, oldest first; a shape leaves the pass when
  // its oldest call gets no trial.
  std::priority_queue<std::pair<Seq, std::string>,
                      std::vector<std::pair<Seq, std::string>>, std::greater<>>
      fronts;
  for (const auto& [shape, seqs] : by_shape_) {
    fronts.push({*seqs.begin(), shape});
  }
  while (!fronts.empty()) {
    auto [seq, shape] = fronts.top();
    fronts.pop();
    if (!waiters_.count(seq) || !Try(seq, assign, out)) continue;
    auto next = by_shape_.find(shape);
    if (next != by_shape_.end()) fronts.push({*next->second.begin(), shape});
  }
}

void Dispatcher::Expire(absl::Time now, Outbox& out) {
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    End(by_deadline_.begin()->second, std::optional<Assignment>(), out);
  }
  // Calls whose client left: a check of a flag each, no trial sought.
  std::vector<Seq> gone;
  for (const auto& [seq, w] : waiters_) {
    if (!w.alive()) gone.push_back(seq);
  }
  for (Seq seq : gone) End(seq, std::optional<Assignment>(), out);
}

void Dispatcher::DropWorker(const std::string& worker_id, Outbox& out) {
  std::vector<Seq> seqs;
  for (auto [at, end] = by_worker_.equal_range(worker_id); at != end; ++at) {
    seqs.push_back(at->second);
  }
  for (Seq seq : seqs) {
    End(seq, absl::NotFoundError("worker lease expired; register again"), out);
  }
}

void Dispatcher::EndAll(Outbox& out) {
  while (!waiters_.empty()) {
    End(waiters_.begin()->first, std::optional<Assignment>(), out);
  }
}

}  // namespace dial::scheduler
