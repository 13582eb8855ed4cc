#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <map>
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

struct Symbol {
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

SpmTokenizer::SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {}

void SpmTokenizer::EncodeFragment(const std::string& text, std::vector<int32_t>* out) const {
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(Utf8SeqLen(static_cast<unsigned char>(text[i])), text.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Bigram> queue;
  std::map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string piece = text.substr(sym[left].start, sym[left].len + sym[right].len);
    const int32_t id = vocab_.Find(piece);
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[id], piece.size()});
    rev_merge[piece] = {left, right};
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Emit: whole pieces when in the vocab, else undo merges, else bytes.
  auto resegment = [&](auto&& self, size_t start, size_t len) -> void {
    const std::string piece = text.substr(start, len);
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    auto it = rev_merge.find(piece);
    if (it != rev_merge.end()) {
      const Symbol& a = sym[it->second.first];
      const size_t left_len = sym[it->second.second].start - a.start;
      self(self, start, left_len);
      self(self, start + left_len, len - left_len);
      return;
    }
    for (size_t k = 0; k < len; ++k) {
      const int32_t bt = vocab_.byte_token[static_cast<unsigned char>(text[start + k])];
      out->push_back(bt >= 0 ? bt : vocab_.unk);
    }
  };
  for (int i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].len > 0) resegment(resegment, sym[i].start, sym[i].len);
  }
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool prev_special = true;  // the first raw fragment gets the dummy prefix
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
      std::sscanf(p.c_str() + 3, "%2x", &v);
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
