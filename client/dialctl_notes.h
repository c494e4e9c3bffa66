// `dialctl study note STUDY [TEXT...]` and `dialctl trials note STUDY N
// [TEXT...]`: without TEXT print the note; with it set the note (the words
// joined by spaces; "-" reads it from standard input; "" clears it).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"

namespace dial::cli {

// `text`: the words after STUDY (and N); empty prints the note. `in` is
// read for "-". Prints the note (or, with `json`, the study or trial).
absl::Status RunNote(client::DialClient& client, const std::string& study,
                     std::optional<int64_t> trial,
                     const std::vector<std::string>& text, bool json,
                     std::istream& in, std::ostream& out);

}  // namespace dial::cli
