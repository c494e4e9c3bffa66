#include "common/text.h"

#include "absl/strings/str_format.h"

namespace dial {
namespace {

// The length of a UTF-8 sequence from its first byte; 0 for a byte that
// cannot start one.
size_t SequenceLength(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// The code point of a complete sequence, or nullopt when it is overlong,
// a surrogate or out of range.
std::optional<char32_t> Decode(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 1; i < s.size(); ++i) {
    if ((b(i) & 0xC0) != 0x80) return std::nullopt;
  }
  char32_t c = 0;
  switch (s.size()) {
    case 1:
      return b(0);
    case 2:
      return static_cast<char32_t>(((b(0) & 0x1F) << 6) | (b(1) & 0x3F));
    case 3:
      c = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
      if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
      return c;
    case 4:
      c = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) |
          (b(3) & 0x3F);
      if (c < 0x10000 || c > 0x10FFFF) return std::nullopt;
      return c;
  }
  return std::nullopt;
}

void EscapeBytes(absl::string_view bytes, std::string* out) {
  for (char b : bytes) {
    absl::StrAppendFormat(out, "\\x%02x", static_cast<unsigned char>(b));
  }
}

}  // namespace

bool IsUnsafeCodePoint(char32_t c, bool strict) {
  if (c == '\t' || c == '\n') return strict;
  return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0x061C || c == 0x200E ||
         c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

std::optional<std::string> FindUnsafe(absl::string_view text, bool strict) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(static_cast<unsigned char>(text[i]));
    std::optional<char32_t> c;
    if (n > 0 && i + n <= text.size()) c = Decode(text.substr(i, n));
    if (!c) return absl::StrFormat("a byte that is not UTF-8 at byte %d", i);
    if (IsUnsafeCodePoint(*c, strict)) {
      return absl::StrFormat(
          "%s character U+%04X at byte %d",
          *c >= 0x202A || *c == 0x061C || *c == 0x200E || *c == 0x200F
              ? "bidirectional control"
              : "control",
          static_cast<uint32_t>(*c), i);
    }
    i += n;
  }
  return std::nullopt;
}

void TerminalSafeFilter::Flush(std::string* out) {
  if (auto c = Decode(pending_)) {
    if (IsUnsafeCodePoint(*c, strict_)) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(*c));
    } else {
      out->append(pending_);
    }
  } else {
    EscapeBytes(pending_, out);
  }
  pending_.clear();
  need_ = 0;
}

void TerminalSafeFilter::Feed(absl::string_view data, std::string* out) {
  for (char ch : data) {
    const unsigned char b = static_cast<unsigned char>(ch);
    if (need_ > 0 && (b & 0xC0) != 0x80) {
      EscapeBytes(pending_, out);  // cut short by a byte that starts anew
      pending_.clear();
      need_ = 0;
    }
    if (need_ == 0) {
      need_ = SequenceLength(b);
      if (need_ == 0) {
        EscapeBytes(absl::string_view(&ch, 1), out);
        continue;
      }
    }
    pending_.push_back(ch);
    if (pending_.size() == need_) Flush(out);
  }
}

void TerminalSafeFilter::Finish(std::string* out) {
  EscapeBytes(pending_, out);
  pending_.clear();
  need_ = 0;
}

std::string Printable(absl::string_view text, bool strict) {
  std::string out;
  out.reserve(text.size());
  TerminalSafeFilter filter(strict);
  filter.Feed(text, &out);
  filter.Finish(&out);
  return out;
}

}  // namespace dial
