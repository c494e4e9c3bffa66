// JSON text helpers shared by the spec printer and the exports.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace dial {

// Appends `s` as a JSON string literal (quoted; quotes, backslashes and
// control characters escaped).
void AppendJsonString(absl::string_view s, std::string& out);

}  // namespace dial
