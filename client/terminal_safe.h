// What dialctl prints goes through this filter: text from the scheduler
// (a trial's stderr tail, an error, a note, a worker's host) is someone
// else's, and its control characters or bidirectional overrides would
// drive the terminal of whoever runs dialctl (clear the screen, set the
// window title, hide or reorder text). They are printed as escapes
// ("\u001b"); newline and tab pass. Not thread-safe: one per stream,
// written from one thread.
#pragma once

#include <iosfwd>
#include <streambuf>
#include <string>

#include "common/text.h"

namespace dial::cli {

class TerminalSafeStreambuf : public std::streambuf {
 public:
  // Writes the escaped text to `raw`, which must outlive this.
  explicit TerminalSafeStreambuf(std::streambuf* raw) : raw_(raw) {}
  ~TerminalSafeStreambuf() override;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  std::streambuf* raw_;
  TerminalSafeFilter filter_{/*strict=*/false};
  std::string out_;
};

// Puts a TerminalSafeStreambuf in front of std::cout and std::cerr for the
// rest of the process; returns the raw stream of standard output, for
// what dialctl itself writes on purpose (its progress line's cursor
// moves) or data written as it is (an export into a file or a pipe).
std::ostream& GuardTerminal();

}  // namespace dial::cli
