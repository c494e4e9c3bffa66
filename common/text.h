// Text from others (a trial's stderr, a worker's host name, a note, an
// error message) on its way to a terminal or a log: control characters
// and bidirectional overrides there would let it move the cursor, clear
// the screen, set a window title, forge a log line or reorder what a
// reader sees. These helpers find such characters and escape them.
// Thread-safe: pure functions; a TerminalSafeFilter is not (one per
// stream).
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dial {

// Whether code point `c` may move, hide or reorder text on a terminal:
// C0 controls (all but tab and newline unless `strict`), DEL, C1 controls
// (U+0080..U+009F, e.g. U+009B, a one-character CSI), and the
// bidirectional marks, embeddings, overrides and isolates (U+061C,
// U+200E, U+200F, U+202A..U+202E, U+2066..U+2069).
bool IsUnsafeCodePoint(char32_t c, bool strict);

// The first unsafe character of `text` (see IsUnsafeCodePoint), or byte
// that is not valid UTF-8, described for an error message ("control
// character U+001B at byte 4"); nullopt when there is none.
std::optional<std::string> FindUnsafe(absl::string_view text, bool strict);

// Escapes text incrementally, for a stream written a piece at a time:
// unsafe code points become escapes such as "\u001b", and bytes
// that are not UTF-8 "\xNN"; tab and newline pass unless `strict`.
class TerminalSafeFilter {
 public:
  explicit TerminalSafeFilter(bool strict) : strict_(strict) {}
  // Appends to `out` what `data` becomes; an incomplete UTF-8 sequence at
  // its end waits for the next call.
  void Feed(absl::string_view data, std::string* out);
  // Flushes an incomplete sequence (as \xNN escapes).
  void Finish(std::string* out);

 private:
  void Flush(std::string* out);
  bool strict_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
  size_t need_ = 0;      // its length
};

// `text` with every unsafe character escaped (TerminalSafeFilter), e.g. for
// one log line or one field shown to a person.
std::string Printable(absl::string_view text, bool strict = false);

}  // namespace dial
