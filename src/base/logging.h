// Logging goes to stderr only (stdout carries command output). Thin wrapper
// over spdlog so the rest of the code does not depend on its API.
//
// Two formats: text ("[I] message key=value ...", the default on a
// terminal) and JSON (one object per line: time, level, message, then the
// event's fields), chosen once at start-up. Structured events carry fields
// (request_id, trace_id, token counts, ...) through LogEvent.
#pragma once

#include <fmt/format.h>

// spdlog formats into its memory buffer through fmt::detail::vformat_to<char>,
// a template that fmt 9's shared library already holds (instantiated in
// format.cc) but its headers do not declare extern. Without this declaration
// every translation unit that logs compiles its own copy of fmt's whole
// formatting core (integer and float writers, Dragonbox): ~3 s per file at
// -O3 and ~12 s under ASan.
// GCC only: libfmt.so is built by GCC, and clang mangles this specialization's
// dependent argument type differently (std::is_same<...>::value in it), so the
// fuzzing build (clang) would not link against it.
#if defined(__GNUC__) && !defined(__clang__) && defined(FMT_SHARED) && !defined(FMT_HEADER_ONLY) && \
    FMT_VERSION >= 90000 && FMT_VERSION < 100000
FMT_BEGIN_NAMESPACE
FMT_BEGIN_DETAIL_NAMESPACE
extern template FMT_API void vformat_to<char>(buffer<char>& buf, basic_string_view<char> fmt,
                                              basic_format_args<FMT_BUFFER_CONTEXT(char)> args, locale_ref loc);
FMT_END_DETAIL_NAMESPACE
FMT_END_NAMESPACE
#endif

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infera {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat { kText, kJson };

// Configures the process logger (stderr sink). Call once at start-up, before
// other threads exist. Thread-safe afterwards (spdlog's logger is).
void InitLogging(LogLevel level, LogFormat format = LogFormat::kText);
bool ParseLogLevel(std::string_view name, LogLevel* out);
const char* LogLevelName(LogLevel level);
// The level now / a new level (any thread, at run time).
LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
bool ShouldLog(LogLevel level);

// One field of a structured event; numbers are written unquoted in JSON.
struct LogField {
  std::string key;
  std::string value;
  bool number = false;
};
LogField Field(std::string key, std::string value);
LogField Field(std::string key, int64_t value);
LogField Field(std::string key, double value);
LogField Field(std::string key, bool value);
inline LogField Field(std::string key, const char* value) { return Field(std::move(key), std::string(value)); }

// Logs `message` with `fields` (JSON: as members; text: as key=value).
void LogEvent(LogLevel level, std::string_view message, const std::vector<LogField>& fields);

}  // namespace infera

#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
