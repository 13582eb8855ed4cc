#include "base/logging.h"

#include <chrono>
#include <ctime>
#include <memory>

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace infera {
namespace {

// The fields of the event being logged on this thread (set by LogEvent for
// the duration of one synchronous log call; the formatters read them).
thread_local const std::vector<LogField>* t_fields = nullptr;

void AppendJsonString(std::string_view s, spdlog::memory_buf_t& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out.append(std::string_view("\\\"")); break;
      case '\\': out.append(std::string_view("\\\\")); break;
      case '\n': out.append(std::string_view("\\n")); break;
      case '\r': out.append(std::string_view("\\r")); break;
      case '\t': out.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

const char* LevelWord(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "off";
  }
}

// {"time": "...Z", "level": "info", "message": "...", <fields>}
class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time;
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    fmt::format_to(std::back_inserter(dest), "{{\"time\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\","
                   "\"message\":", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms,
                   LevelWord(msg.level));
    AppendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), dest);
    if (t_fields != nullptr) {
      for (const LogField& f : *t_fields) {
        dest.push_back(',');
        AppendJsonString(f.key, dest);
        dest.push_back(':');
        if (f.number) {
          dest.append(f.value);
        } else {
          AppendJsonString(f.value, dest);
        }
      }
    }
    dest.append(std::string_view("}\n"));
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

// "[I] message key=value ..." (colour by level on a terminal).
class TextFieldsFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (t_fields == nullptr) return;
    for (const LogField& f : *t_fields) {
      fmt::format_to(std::back_inserter(dest), " {}=", f.key);
      const bool quote = !f.number && (f.value.empty() || f.value.find_first_of(" \"=") != std::string::npos);
      if (quote) {
        AppendJsonString(f.value, dest);
      } else {
        dest.append(f.value);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<TextFieldsFlag>(); }
};

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void InitLogging(LogLevel level, LogFormat format) {
  auto logger = spdlog::stderr_color_mt("infera");
  if (format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<TextFieldsFlag>('*').set_pattern("%^[%L]%$ %v%*");
    logger->set_formatter(std::move(f));
  }
  spdlog::set_default_logger(logger);
  SetLogLevel(level);
}

void SetLogLevel(LogLevel level) { spdlog::set_level(ToSpd(level)); }

LogLevel CurrentLogLevel() {
  switch (spdlog::get_level()) {
    case spdlog::level::trace: return LogLevel::kTrace;
    case spdlog::level::debug: return LogLevel::kDebug;
    case spdlog::level::info: return LogLevel::kInfo;
    case spdlog::level::warn: return LogLevel::kWarn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::kError;
    default: return LogLevel::kOff;
  }
}

bool ShouldLog(LogLevel level) { return level != LogLevel::kOff && spdlog::should_log(ToSpd(level)); }

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
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

LogField Field(std::string key, std::string value) { return {std::move(key), std::move(value), false}; }
LogField Field(std::string key, int64_t value) { return {std::move(key), std::to_string(value), true}; }
LogField Field(std::string key, bool value) { return {std::move(key), value ? "true" : "false", true}; }
LogField Field(std::string key, double value) { return {std::move(key), fmt::format("{:.3f}", value), true}; }

void LogEvent(LogLevel level, std::string_view message, const std::vector<LogField>& fields) {
  if (!ShouldLog(level)) return;
  t_fields = &fields;
  spdlog::log(ToSpd(level), "{}", message);
  t_fields = nullptr;
}

}  // namespace infera
