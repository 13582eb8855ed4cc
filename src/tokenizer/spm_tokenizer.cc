#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace infera {
namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

std::string EscapeSpaces(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    if (c == ' ') out += kSpace;
    else out += c;
  }
  return out;
}

struct PieceSymbol {
  int prev, next;
  size_t start, len;  // byte range in the text; len 0 once merged away
};

struct Bigram {
  int left, right;
  float score;
  size_t len;
  bool operator<(const Bigram& o) const {  // max-heap: highest score, then leftmost
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
  split_words_ = true;
  for (int32_t id = 0; id < vocab_.size() && split_words_; ++id) {
    const std::string& p = vocab_.pieces[id];
    for (size_t pos = p.find(kSpace, 1); pos != std::string::npos; pos = p.find(kSpace, pos + 1)) {
      if (pos < 3 || p.compare(pos - 3, 3, kSpace) != 0) {
        split_words_ = false;
        break;
      }
    }
  }
}

void SpmTokenizer::EncodeFragment(const std::string& text, std::vector<int32_t>* out) const {
  if (!split_words_) {
    EncodeWord(text, out);
    return;
  }
  // Cut before every U+2581 that follows another character.
  size_t start = 0;
  for (size_t pos = text.find(kSpace, 1); pos != std::string::npos; pos = text.find(kSpace, pos + 3)) {
    if (pos >= 3 && text.compare(pos - 3, 3, kSpace) == 0) continue;
    EncodeWord(std::string_view(text).substr(start, pos - start), out);
    start = pos;
  }
  EncodeWord(std::string_view(text).substr(start), out);
}

void SpmTokenizer::EncodeWord(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<PieceSymbol> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(Utf8SeqLen(static_cast<unsigned char>(text[i])), text.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Bigram> queue;
  const std::string_view view = text;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    const int32_t id = vocab_.Find(view.substr(sym[left].start, len));
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[id], len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    PieceSymbol& l = sym[b.left];
    PieceSymbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Emit: merged symbols are always vocab pieces; a single character that is
  // not in the vocab falls back to its bytes' <0xXX> tokens.
  for (int i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].len == 0) continue;
    const int32_t id = vocab_.Find(view.substr(sym[i].start, sym[i].len));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (size_t k = 0; k < sym[i].len; ++k) {
      const int32_t bt = vocab_.byte_token[static_cast<unsigned char>(text[sym[i].start + k])];
      const int32_t id2 = bt >= 0 ? bt : vocab_.unk;
      if (id2 >= 0) out->push_back(id2);  // a vocab with neither cannot represent the byte: drop it
    }
  }
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_special, bool parse_special) const {
  return EncodeImpl(text, add_special, parse_special, true);
}

std::vector<int32_t> SpmTokenizer::EncodeContinuation(std::string_view text) const {
  return EncodeImpl(text, false, true, false);
}

std::vector<int32_t> SpmTokenizer::EncodeImpl(std::string_view text, bool add_special, bool parse_special,
                                              bool dummy_prefix) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool prev_special = dummy_prefix;  // the first raw fragment gets the dummy prefix
  for (const Fragment& f : SplitSpecial(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string raw;
    raw.reserve(f.text.size() + 1);
    if (vocab_.add_space_prefix && prev_special) raw.push_back(' ');
    raw.append(f.text);
    EncodeFragment(EscapeSpaces(raw), &out);
    prev_special = false;
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string SpmTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) return "";
  const TokenType t = vocab_.types[id];
  const std::string& p = vocab_.pieces[id];
  switch (t) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return render_special ? p : (t == TokenType::kUnknown ? "\xE2\x96\x85" : "");
    case TokenType::kByte: {
      unsigned v = 0;
      if (!ParseByteToken(p, &v)) return p;
      return std::string(1, static_cast<char>(v));
    }
    case TokenType::kUnused: return render_special ? p : "";
    default: {
      std::string out;
      out.reserve(p.size());
      for (size_t i = 0; i < p.size();) {
        if (p.compare(i, 3, kSpace) == 0) {
          out += ' ';
          i += 3;
        } else {
          out += p[i++];
        }
      }
      return out;
    }
  }
}

}  // namespace infera
