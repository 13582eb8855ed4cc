#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace infera {

void InitLogging(LogLevel level) {
  auto logger = spdlog::stderr_color_mt("infera");
  logger->set_pattern("%^[%L]%$ %v");
  spdlog::set_default_logger(logger);
  switch (level) {
    case LogLevel::kTrace: spdlog::set_level(spdlog::level::trace); break;
    case LogLevel::kDebug: spdlog::set_level(spdlog::level::debug); break;
    case LogLevel::kInfo: spdlog::set_level(spdlog::level::info); break;
    case LogLevel::kWarn: spdlog::set_level(spdlog::level::warn); break;
    case LogLevel::kError: spdlog::set_level(spdlog::level::err); break;
    case LogLevel::kOff: spdlog::set_level(spdlog::level::off); break;
  }
}

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  if (name == "trace") *out = LogLevel::kTrace;
  else if (name == "debug") *out = LogLevel::kDebug;
  else if (name == "info") *out = LogLevel::kInfo;
  else if (name == "warn") *out = LogLevel::kWarn;
  else if (name == "error") *out = LogLevel::kError;
  else if (name == "off") *out = LogLevel::kOff;
  else return false;
  return true;
}

}  // namespace infera
