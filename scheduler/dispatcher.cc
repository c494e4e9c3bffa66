#include "scheduler/dispatcher.h"

#include <memory>
#include <utility>

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

void Dispatcher::Dispatch(const AssignFn& assign, Outbox& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!it->alive()) {
      Answer(out, std::move(it->done), std::optional<Assignment>());
      it = waiters_.erase(it);
      continue;
    }
    auto assignment = assign(it->worker_id, it->free_gpus);
    if (assignment.ok() && !assignment->has_value()) {
      ++it;
      continue;
    }
    Answer(out, std::move(it->done), std::move(assignment));
    it = waiters_.erase(it);
  }
}

void Dispatcher::Expire(absl::Time now, Outbox& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now || !it->alive()) {
      Answer(out, std::move(it->done), std::optional<Assignment>());
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Dispatcher::DropWorker(const std::string& worker_id, Outbox& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->worker_id == worker_id) {
      Answer(out, std::move(it->done),
             absl::NotFoundError("worker lease expired; register again"));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Dispatcher::EndAll(Outbox& out) {
  for (auto& w : waiters_) {
    Answer(out, std::move(w.done), std::optional<Assignment>());
  }
  waiters_.clear();
}

}  // namespace dial::scheduler
