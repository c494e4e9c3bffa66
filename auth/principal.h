// Who is calling: a principal's name and role, as the scheduler's edges
// (gRPC, later HTTP) authenticate it and pass it to the core explicitly.
// docs/security.md says what each role may do. Thread-safe: plain values.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace dial::auth {

enum class Role {
  kViewer,  // reads every study
  kUser,    // creates studies, acts on its own
  kWorker,  // runs trials (WorkerService only)
  kAdmin,   // everything, including backups and the audit log
};

absl::string_view RoleName(Role role);

struct Principal {
  std::string name;
  Role role = Role::kAdmin;
  // True when the scheduler runs without --auth-tokens (loopback only):
  // every caller is this anonymous admin.
  bool anonymous = false;

  bool is_admin() const { return role == Role::kAdmin; }
  // Reads any study.
  bool can_read_all() const {
    return role == Role::kAdmin || role == Role::kViewer;
  }
  // Changes a study owned by `owner`.
  bool can_write(const std::string& owner) const {
    return role == Role::kAdmin || (role == Role::kUser && owner == name);
  }
  // Reads a study owned by `owner`.
  bool can_read(const std::string& owner) const {
    return can_read_all() || (role == Role::kUser && owner == name);
  }
};

// The principal of a scheduler without authentication.
inline Principal Anonymous() { return {"", Role::kAdmin, true}; }

}  // namespace dial::auth
