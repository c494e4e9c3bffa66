// Durability: when the writes a store has applied become durable. A store
// with group commit applies writes at once (later reads see them) but makes
// them durable later, many in one commit; callers that answer a client must
// wait for the writes their answer could reflect. Implementations are
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace dial::storage {

class Durability {
 public:
  virtual ~Durability() = default;

  // Numbers the writes applied so far (0 before the first). A caller that
  // read or wrote under its own lock takes this value as its write ticket.
  virtual uint64_t WrittenSeq() const = 0;
  // Calls `done` once every write up to `seq` is durable (OK), or with
  // UNAVAILABLE once one of them is lost (its commit failed): the store then
  // refuses writes until Recover(), and the lost handler runs first (once
  // per loss, on a thread of the store's, holding none of its locks) so the
  // owner can re-read the store, which holds none of the lost writes.
  // `done` may run at once on the caller's thread, or on the store's thread.
  virtual void WhenDurable(uint64_t seq,
                           std::function<void(absl::Status)> done) = 0;
  // Returns only once a running handler has returned (unless called from
  // it), so its owner may then be destroyed.
  virtual void SetLostHandler(std::function<void()> handler) = 0;
  // Takes writes again after a loss (not after a failed log sync, which is
  // final).
  virtual void Recover() = 0;
};

}  // namespace dial::storage
