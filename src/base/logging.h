// Logging goes to stderr only (stdout carries command output). Thin wrapper
// over spdlog so the rest of the code does not depend on its API.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace infera {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Configures the process logger (stderr sink). Call once at start-up, before
// other threads exist. Thread-safe afterwards (spdlog's logger is).
void InitLogging(LogLevel level);
bool ParseLogLevel(std::string_view name, LogLevel* out);

}  // namespace infera

#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
