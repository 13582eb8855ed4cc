#include "tokenizer/byte_unicode.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace infera {
namespace {

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::unordered_map<uint32_t, unsigned char> to_byte;
  Tables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      AppendUtf8(cp, &to_unicode[b]);
      to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& T() {
  static const Tables* t = new Tables();
  return *t;
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::string& ByteToUnicode(unsigned char b) { return T().to_unicode[b]; }

std::string BytesToUnicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += T().to_unicode[c];
  return out;
}

bool UnicodeToBytes(std::string_view text, std::string* out) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = std::min(Utf8SeqLen(c), text.size() - i);
    uint32_t cp = n == 1 ? c : (c & (0xFF >> (n + 1)));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    auto it = T().to_byte.find(cp);
    if (it == T().to_byte.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

}  // namespace infera
