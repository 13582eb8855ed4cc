#include "engine/stop_checker.h"

#include <algorithm>

namespace infera {

StopChecker::StopChecker(std::vector<std::string> stops) {
  for (auto& s : stops) if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopChecker::Push(std::string_view text, bool* stopped) {
  *stopped = false;
  held_.append(text);
  if (stops_.empty()) {
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    *stopped = true;
    return out;
  }
  // Longest suffix of held_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopChecker::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace infera
