// Outbox: the effects of what the core did under its lock, collected by the
// per-concern classes instead of calling back into the core. The core
// applies the first group before it releases the lock and runs `replies`
// after, with the call's write ticket, so no reactor is finished and no
// callback runs while the lock is held. Not thread-safe: filled under the
// core's lock, drained by the thread that releases it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "scheduler/reply.h"

namespace dial::scheduler {

// A checkpoint retention no longer keeps: its index row (study, trial,
// step) goes, and the checkpoint `id` too unless another kept step names
// the same path (a command trial that overwrites one file).
struct DoomedCheckpoint {
  std::string id;
  std::string study;
  int64_t trial = 0;
  int64_t step = 0;
  bool remove = true;
};

struct Outbox {
  // Applied under the lock, before it is released:
  std::set<std::string> fills;  // studies whose PENDING trials to top up
  bool dispatch = false;        // hand PENDING trials to parked long polls
  // Checkpoints to delete once what made them obsolete is durable.
  std::vector<DoomedCheckpoint> doomed;
  // Run after the lock is released:
  std::vector<std::function<void(WriteTicket)>> replies;
};

}  // namespace dial::scheduler
