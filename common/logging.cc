#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "common/text.h"

namespace dial {
namespace {

// The message with its control characters escaped (common/text.h), and
// its newlines too: one event is one line, so text from a request (a
// host name, an error) cannot forge a line of its own or drive the
// terminal of whoever reads the log.
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string safe = Printable(
        absl::string_view(msg.payload.data(), msg.payload.size()), true);
    dest.append(safe.data(), safe.data() + safe.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

}  // namespace

std::unique_ptr<spdlog::formatter> SafeLogFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern(
      "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %*");
  return formatter;
}

void InitLogging(absl::string_view program, absl::string_view level) {
  auto logger = spdlog::stderr_logger_mt(std::string(program));
  logger->set_formatter(SafeLogFormatter());
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    parsed = spdlog::level::info;
  }
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace dial
