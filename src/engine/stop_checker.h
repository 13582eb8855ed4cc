// Finds stop strings in streamed text. Text that could still become the
// start of a stop string is held back, so nothing is printed and then
// retracted. Not thread-safe; one per sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infera {

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stops);

  // Appends text; returns the part that is safe to emit. When a stop string
  // completes, returns the text before it and sets *stopped.
  std::string Push(std::string_view text, bool* stopped);
  // Releases held-back text (generation ended without a stop string).
  std::string Flush();
  // The stop string Push found ("" until one is found).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
};

}  // namespace infera
