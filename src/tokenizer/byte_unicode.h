// GPT-2's reversible byte <-> unicode mapping used by byte-level BPE vocabs:
// printable bytes map to themselves, the rest to U+0100.. so every token is
// printable text (a space becomes "Ġ", a newline "Ċ").
#pragma once

#include <string>
#include <string_view>

namespace infera {

// UTF-8 of the mapped character for byte b.
const std::string& ByteToUnicode(unsigned char b);
// Maps every byte of `bytes`.
std::string BytesToUnicode(std::string_view bytes);
// Inverse; returns false if `text` holds a character outside the mapping.
bool UnicodeToBytes(std::string_view text, std::string* out);
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace infera
