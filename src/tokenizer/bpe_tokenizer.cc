#include "tokenizer/bpe_tokenizer.h"

#include <queue>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/utf8.h"

namespace infera {
namespace {

struct MergeSymbol {
  int prev, next;
  size_t start, len;  // byte range in the mapped word; len 0 once merged away
};

struct Pair {
  int rank, left, right;
  size_t len;
  bool operator<(const Pair& o) const {  // min-heap on rank, then leftmost
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

}  // namespace

BpeTokenizer::BpeTokenizer(Vocab v, const std::vector<std::pair<std::string, std::string>>& merges,
                           std::unique_ptr<PreTokenizer> pre, bool ignore_merges)
    : Tokenizer(std::move(v)), pre_(std::move(pre)), ignore_merges_(ignore_merges), rank_by_token_(merges.empty()) {
  merge_rank_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    merge_rank_.emplace(merges[r].first + '\0' + merges[r].second, static_cast<int>(r));
  }
}

int BpeTokenizer::Rank(std::string_view left, std::string_view right, std::string* scratch) const {
  scratch->assign(left);
  if (rank_by_token_) {
    scratch->append(right);
    return vocab_.Find(*scratch);
  }
  scratch->push_back('\0');
  scratch->append(right);
  auto it = merge_rank_.find(*scratch);
  return it == merge_rank_.end() ? -1 : it->second;
}

void BpeTokenizer::EncodeWord(const std::string& w, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    const int32_t id = vocab_.Find(w);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<MergeSymbol> sym;
  for (size_t i = 0; i < w.size();) {
    const size_t n = std::min(Utf8SeqLen(static_cast<unsigned char>(w[i])), w.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::priority_queue<Pair> queue;
  const std::string_view view(w);
  std::string scratch;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const int rank = Rank(view.substr(sym[l].start, sym[l].len), view.substr(sym[r].start, sym[r].len), &scratch);
    if (rank >= 0) queue.push({rank, l, r, sym[l].len + sym[r].len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    MergeSymbol& l = sym[p.left];
    MergeSymbol& r = sym[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].len == 0) continue;
    const std::string_view piece = view.substr(sym[i].start, sym[i].len);
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Not in the vocab: emit each character's token (or unknown).
    for (size_t k = 0; k < piece.size();) {
      const size_t n = std::min(Utf8SeqLen(static_cast<unsigned char>(piece[k])), piece.size() - k);
      const int32_t cid = vocab_.Find(piece.substr(k, n));
      if (cid >= 0) out->push_back(cid);
      else if (vocab_.unk >= 0) out->push_back(vocab_.unk);
      k += n;
    }
  }
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  for (const Fragment& f : SplitSpecial(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    // The regexes need valid UTF-8; invalid bytes become U+FFFD.
    const std::string clean = IsValidUtf8(f.text) ? std::string(f.text) : Utf8Sanitize(f.text);
    for (std::string_view chunk : pre_->Split(clean)) EncodeWord(BytesToUnicode(chunk), &out);
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string BpeTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) return "";
  const TokenType t = vocab_.types[id];
  const std::string& p = vocab_.pieces[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused) return render_special ? p : "";
  if (t == TokenType::kUserDefined) return p;  // stored as plain text
  std::string bytes;
  if (UnicodeToBytes(p, &bytes)) return bytes;
  return p;
}

}  // namespace infera
