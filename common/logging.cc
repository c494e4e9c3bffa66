#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace dial {

void InitLogging(absl::string_view program, absl::string_view level) {
  auto logger = spdlog::stderr_logger_mt(std::string(program));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    parsed = spdlog::level::info;
  }
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace dial
