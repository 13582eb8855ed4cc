#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace infera {

bool Vocab::IsEog(int32_t id) const {
  for (int32_t e : eog) if (e == id) return true;
  return false;
}

void Vocab::Finalize() {
  index.clear();
  index.reserve(pieces.size());
  byte_token.fill(-1);
  if (scores.size() < pieces.size()) scores.resize(pieces.size(), 0.0f);
  if (types.size() < pieces.size()) types.resize(pieces.size(), TokenType::kNormal);
  for (int32_t id = 0; id < size(); ++id) {
    index.emplace(pieces[id], id);  // first id wins on duplicates
    unsigned v = 0;
    if (ParseByteToken(pieces[id], &v) &&
        (types[id] == TokenType::kByte || types[id] == TokenType::kNormal || types[id] == TokenType::kUndefined)) {
      types[id] = TokenType::kByte;
      if (byte_token[v] < 0) byte_token[v] = static_cast<int32_t>(id);
    } else if (types[id] == TokenType::kByte) {
      types[id] = TokenType::kNormal;  // malformed byte token: treat as text
    }
  }
  auto add_eog = [&](int32_t id) {
    if (id >= 0 && id < size() && !IsEog(id)) eog.push_back(id);
  };
  add_eog(eos);
  for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                        "<EOT>", "<|END_OF_TURN_TOKEN|>"}) {
    int32_t id = Find(s);
    if (id >= 0 && (types[id] == TokenType::kControl || types[id] == TokenType::kUserDefined)) add_eog(id);
  }
  // The FIM tokens' spellings, as llama.cpp recognizes them (DeepSeek's with
  // U+FF5C fullwidth bars and U+2581 for the space).
  auto find_fim = [&](int32_t* out, std::initializer_list<const char*> texts) {
    for (const char* s : texts) {
      if (*out >= 0) return;
      const int32_t id = Find(s);
      if (id >= 0 && (types[id] == TokenType::kControl || types[id] == TokenType::kUserDefined)) *out = id;
    }
  };
  find_fim(&fim.pre, {"<|fim_prefix|>", "<fim-prefix>",
                      "<\xef\xbd\x9c"
                      "fim\xe2\x96\x81"
                      "begin\xef\xbd\x9c>",
                      "<fim_prefix>", "<PRE>",
                      "\xe2\x96\x81"
                      "<PRE>",
                      "<|code_prefix|>"});
  find_fim(&fim.suf, {"<|fim_suffix|>", "<fim-suffix>",
                      "<\xef\xbd\x9c"
                      "fim\xe2\x96\x81"
                      "hole\xef\xbd\x9c>",
                      "<fim_suffix>", "<SUF>",
                      "\xe2\x96\x81"
                      "<SUF>",
                      "<|code_suffix|>"});
  find_fim(&fim.mid, {"<|fim_middle|>", "<fim-middle>",
                      "<\xef\xbd\x9c"
                      "fim\xe2\x96\x81"
                      "end\xef\xbd\x9c>",
                      "<fim_middle>", "<MID>",
                      "\xe2\x96\x81"
                      "<MID>",
                      "<|code_middle|>"});
  find_fim(&fim.pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"});
  find_fim(&fim.rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  find_fim(&fim.sep, {"<|file_sep|>", "<fim-sep>", "<SEP>", "<filename>"});
  for (int32_t id : {fim.pad, fim.rep, fim.sep}) add_eog(id);
}

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const auto t = vocab_.types[id];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined) && !vocab_.pieces[id].empty()) special_.push_back(id);
  }
  std::stable_sort(special_.begin(), special_.end(), [&](int32_t a, int32_t b) {
    return vocab_.pieces[a].size() > vocab_.pieces[b].size();
  });
  for (int32_t id : special_) special_first_byte_[static_cast<unsigned char>(vocab_.pieces[id][0])] = true;
}

std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecial(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t pos = 0, raw_start = 0;
  while (pos < text.size()) {
    int32_t match = -1;
    if (special_first_byte_[static_cast<unsigned char>(text[pos])]) {
      for (int32_t id : special_) {
        if (vocab_.types[id] == TokenType::kControl && !parse_special) continue;
        const std::string& p = vocab_.pieces[id];
        if (text.compare(pos, p.size(), p) == 0) {
          match = id;
          break;
        }
      }
    }
    if (match < 0) {
      ++pos;
      continue;
    }
    if (pos > raw_start) out.push_back({-1, text.substr(raw_start, pos - raw_start)});
    out.push_back({match, {}});
    pos += vocab_.pieces[match].size();
    raw_start = pos;
  }
  if (raw_start < text.size()) out.push_back({-1, text.substr(raw_start)});
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    std::string p = TokenToPiece(id, render_special);
    if (p.empty()) continue;
    if (first && vocab_.add_space_prefix && p[0] == ' ') p.erase(0, 1);
    first = false;
    out += p;
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool at_start, bool render_special)
    : tok_(tok), at_start_(at_start), render_special_(render_special) {}

std::string StreamDecoder::Push(int32_t id) {
  std::string piece = tok_.TokenToPiece(id, render_special_);
  if (piece.empty()) return "";
  if (at_start_) {
    if (tok_.vocab().add_space_prefix && piece[0] == ' ') piece.erase(0, 1);
    at_start_ = false;
  }
  pending_ += piece;
  const size_t tail = Utf8IncompleteTail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - tail);
  pending_.erase(0, pending_.size() - tail);
  return Utf8Sanitize(ready);
}

std::string StreamDecoder::Flush() {
  std::string out = Utf8Sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace infera
