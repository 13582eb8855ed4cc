#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infera {

// Length of the UTF-8 sequence starting with byte c (1 for invalid leads).
inline size_t Utf8SeqLen(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Number of bytes at the end of s that form an incomplete (but so far
// valid) UTF-8 sequence, 0 if s ends on a character boundary.
size_t Utf8IncompleteTail(std::string_view s);

// Replaces every invalid UTF-8 sequence with U+FFFD.
std::string Utf8Sanitize(std::string_view s);
bool IsValidUtf8(std::string_view s);

}  // namespace infera
