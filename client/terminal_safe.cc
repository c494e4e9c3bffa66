#include "client/terminal_safe.h"

#include <iostream>
#include <memory>

namespace dial::cli {

TerminalSafeStreambuf::~TerminalSafeStreambuf() {
  filter_.Finish(&out_);
  sync();
}

TerminalSafeStreambuf::int_type TerminalSafeStreambuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return 0;
  const char ch = traits_type::to_char_type(c);
  filter_.Feed(absl::string_view(&ch, 1), &out_);
  if (out_.size() >= 4096) sync();
  return c;
}

std::streamsize TerminalSafeStreambuf::xsputn(const char* s,
                                              std::streamsize n) {
  filter_.Feed(absl::string_view(s, static_cast<size_t>(n)), &out_);
  if (out_.size() >= 4096) sync();
  return n;
}

int TerminalSafeStreambuf::sync() {
  if (!out_.empty()) {
    raw_->sputn(out_.data(), static_cast<std::streamsize>(out_.size()));
    out_.clear();
  }
  return raw_->pubsync();
}

std::ostream& GuardTerminal() {
  // Never destroyed before exit's own flushes: leaked on purpose.
  static std::ostream* raw = [] {
    std::streambuf* raw_out = std::cout.rdbuf();
    std::streambuf* raw_err = std::cerr.rdbuf();
    std::cout.rdbuf(new TerminalSafeStreambuf(raw_out));
    std::cerr.rdbuf(new TerminalSafeStreambuf(raw_err));
    return new std::ostream(raw_out);
  }();
  return *raw;
}

}  // namespace dial::cli
