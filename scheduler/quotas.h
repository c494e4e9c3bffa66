// Quotas: what each owner may use of the shared fleet, read from the
// scheduler's --quotas file, one line per owner:
//   <owner> weight=2 max_slots=16 max_gpus=8 max_priority=10
// A `default` line applies to every owner without a line of their own, and
// fills the keys an owner's line leaves out. Keys left out everywhere:
// weight 1, no slot or GPU limit, max_priority 0. Blank lines and lines
// starting with '#' are ignored. Reload() reads the file again (SIGHUP); a
// bad file keeps the quotas as they were. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dial::scheduler {

struct Quota {
  double weight = 1;         // share of the fleet against other owners
  int32_t max_slots = 0;     // running trials at once; 0: no limit
  int32_t max_gpus = 0;      // GPUs held at once; 0: no limit
  int32_t max_priority = 0;  // the highest study priority they may set
};

// The parsed file: quotas by owner, and the default.
struct QuotaTable {
  Quota fallback;
  std::map<std::string, Quota> owners;
  const Quota& For(const std::string& owner) const {
    auto it = owners.find(owner);
    return it == owners.end() ? fallback : it->second;
  }
};

class Quotas {
 public:
  // Everyone gets the built-in default (no file).
  Quotas() = default;
  // Reads `path`: INVALID_ARGUMENT naming the line and the reason, NOT_FOUND
  // if it cannot be read.
  static absl::StatusOr<std::unique_ptr<Quotas>> Load(const std::string& path);
  // Parses the text of a quotas file (as Load).
  static absl::StatusOr<QuotaTable> Parse(absl::string_view text);

  // The table now in force (a reload swaps it whole).
  std::shared_ptr<const QuotaTable> table() const;
  // Reads the file again; on error the old quotas stay and the error is
  // returned. OK and nothing to do without a file.
  absl::Status Reload();
  const std::string& path() const { return path_; }

 private:
  explicit Quotas(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const QuotaTable> table_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<QuotaTable>();
};

// The table in force, or the built-in default's when there is no Quotas
// (no --quotas); never null.
std::shared_ptr<const QuotaTable> TableOf(const Quotas* quotas);

}  // namespace dial::scheduler
