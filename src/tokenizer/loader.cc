#include "tokenizer/loader.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "formats/llama2c.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/file_loaders.h"
#include "tokenizer/spm_tokenizer.h"

namespace infera {

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& f, const std::string& pre_override) {
  auto model = f.GetString("tokenizer.ggml.model");
  if (!model) return DataLoss(f.name() + ": no tokenizer in file (missing tokenizer.ggml.model)");
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString || tokens->arr_s.empty()) {
    return DataLoss(f.name() + ": tokenizer.ggml.tokens must be a non-empty string array");
  }
  Vocab v;
  v.pieces = tokens->arr_s;
  const size_t n = v.pieces.size();
  if (const GgufValue* s = f.Find("tokenizer.ggml.scores")) {
    if (s->type != GgufType::kArray || s->arr_f.size() != n) return DataLoss(f.name() + ": tokenizer.ggml.scores must have one float per token");
    v.scores.assign(s->arr_f.begin(), s->arr_f.end());
  }
  if (const GgufValue* t = f.Find("tokenizer.ggml.token_type")) {
    if (t->type != GgufType::kArray || t->arr_i.size() + t->arr_u.size() != n) {
      return DataLoss(f.name() + ": tokenizer.ggml.token_type must have one integer per token");
    }
    for (size_t k = 0; k < n; ++k) {
      const int64_t x = t->arr_i.empty() ? static_cast<int64_t>(t->arr_u[k]) : t->arr_i[k];
      v.types.push_back(x >= 0 && x <= 6 ? static_cast<TokenType>(x) : TokenType::kNormal);
    }
  }
  auto id = [&](const char* key, int32_t* out) -> Status {
    auto x = f.GetInt(key);
    if (!x) return Status::Ok();
    if (*x == 0xFFFFFFFFll || *x == -1) return Status::Ok();  // "unset"
    if (*x < 0 || *x >= static_cast<int64_t>(n)) return DataLoss(fmt::format("{}: {} = {} is not a token id", f.name(), key, *x));
    *out = static_cast<int32_t>(*x);
    return Status::Ok();
  };
  RETURN_IF_ERROR(id("tokenizer.ggml.bos_token_id", &v.bos));
  RETURN_IF_ERROR(id("tokenizer.ggml.eos_token_id", &v.eos));
  RETURN_IF_ERROR(id("tokenizer.ggml.unknown_token_id", &v.unk));
  RETURN_IF_ERROR(id("tokenizer.ggml.padding_token_id", &v.pad));
  // Fill-in-the-middle tokens (the older prefix/suffix/middle keys: CodeLlama's GGUFs).
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_pre_token_id", &v.fim.pre));
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_suf_token_id", &v.fim.suf));
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_mid_token_id", &v.fim.mid));
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_pad_token_id", &v.fim.pad));
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_rep_token_id", &v.fim.rep));
  RETURN_IF_ERROR(id("tokenizer.ggml.fim_sep_token_id", &v.fim.sep));
  if (v.fim.pre < 0) RETURN_IF_ERROR(id("tokenizer.ggml.prefix_token_id", &v.fim.pre));
  if (v.fim.suf < 0) RETURN_IF_ERROR(id("tokenizer.ggml.suffix_token_id", &v.fim.suf));
  if (v.fim.mid < 0) RETURN_IF_ERROR(id("tokenizer.ggml.middle_token_id", &v.fim.mid));
  int32_t eot = -1, eom = -1;
  RETURN_IF_ERROR(id("tokenizer.ggml.eot_token_id", &eot));
  RETURN_IF_ERROR(id("tokenizer.ggml.eom_token_id", &eom));
  v.add_bos = f.GetBool("tokenizer.ggml.add_bos_token").value_or(true);
  v.add_eos = f.GetBool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = f.GetBool("tokenizer.ggml.add_space_prefix").value_or(true);
  v.chat_template = f.GetString("tokenizer.chat_template").value_or("");
  v.Finalize();
  for (int32_t e : {eot, eom}) if (e >= 0 && !v.IsEog(e)) v.eog.push_back(e);
  if (*model == "llama") return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
  if (*model == "gpt2") {
    v.add_space_prefix = false;
    v.add_bos = f.GetBool("tokenizer.ggml.add_bos_token").value_or(false);
    const GgufValue* m = f.Find("tokenizer.ggml.merges");
    if (!m || m->type != GgufType::kArray || m->elem_type != GgufType::kString) {
      return DataLoss(f.name() + ": gpt2 tokenizer without tokenizer.ggml.merges");
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m->arr_s.size());
    for (const auto& line : m->arr_s) {
      const size_t sp = line.find(' ', 1);
      if (sp == std::string::npos) return DataLoss(f.name() + ": malformed merge '" + line + "'");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    const std::string pre_name = !pre_override.empty() ? pre_override : f.GetString("tokenizer.ggml.pre").value_or("default");
    auto pre = PreTokenizer::FromPresetName(pre_name);
    if (!pre.ok()) return pre.status().WithPrefix(f.name());
    const bool ignore_merges = pre_name == "llama-bpe" || pre_name == "llama3" || pre_name == "llama-v3";
    return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(v), merges, std::move(pre).value(), ignore_merges));
  }
  return Unimplemented(f.name() + ": tokenizer model '" + *model + "' is not supported (supported: llama, gpt2)");
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromLlama2c(const std::string& path, int n_vocab) {
  ASSIGN_OR_RETURN(Llama2cVocab lv, ReadLlama2cTokenizer(path, n_vocab));
  Vocab v;
  v.scores = lv.scores;
  for (size_t id = 0; id < lv.pieces.size(); ++id) {
    std::string p = lv.pieces[id];
    TokenType t = TokenType::kNormal;
    if (id == 0) { p = "<unk>"; t = TokenType::kUnknown; }
    else if (id == 1) { p = "<s>"; t = TokenType::kControl; }
    else if (id == 2) { p = "</s>"; t = TokenType::kControl; }
    else {
      std::string esc;
      for (char c : p) esc += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      p = std::move(esc);
    }
    v.pieces.push_back(std::move(p));
    v.types.push_back(t);
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.Finalize();
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromFile(const std::string& path, int n_vocab, const std::string& pre) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path + "/tokenizer.json", ec)) return TokenizerFromTokenizerJson(path + "/tokenizer.json", pre);
    if (fs::exists(path + "/tokenizer.model", ec)) return TokenizerFromFile(path + "/tokenizer.model", n_vocab, pre);
    if (fs::exists(path + "/vocab.json", ec) && fs::exists(path + "/merges.txt", ec)) {
      return TokenizerFromVocabMerges(path + "/vocab.json", path + "/merges.txt", pre);
    }
    return NotFound(path + ": no tokenizer.json, tokenizer.model or vocab.json + merges.txt in this folder");
  }
  char head[16] = {};
  size_t got = 0;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFound(path + ": cannot open tokenizer file");
    in.read(head, sizeof(head));
    got = static_cast<size_t>(in.gcount());
  }
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) {
    ASSIGN_OR_RETURN(auto f, GgufFile::Open(path));
    return TokenizerFromGguf(*f, pre);
  }
  const std::string name = fs::path(path).filename().string();
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".json")) {
    if (name.find("vocab") != std::string::npos) {
      // merges.txt beside it, or the same name with "vocab.json" -> "merges.txt".
      std::string merges = (fs::path(path).parent_path() / "merges.txt").string();
      const size_t at = name.rfind("vocab.json");
      if (!fs::exists(merges, ec) && at != std::string::npos) {
        merges = (fs::path(path).parent_path() / (name.substr(0, at) + "merges.txt")).string();
      }
      if (!fs::exists(merges, ec)) return NotFound(path + ": a vocab.json needs merges.txt beside it");
      return TokenizerFromVocabMerges(path, merges, pre);
    }
    return TokenizerFromTokenizerJson(path, pre);
  }
  if (got > 0 && head[0] == 0x0A) return TokenizerFromSentencePiece(path);  // protobuf: field 1, bytes
  // tiktoken: "base64 rank" lines.
  bool b64 = got > 0;
  size_t k = 0;
  while (k < got && head[k] != ' ') {
    const char c = head[k++];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) b64 = false;
  }
  if (b64 && k > 0 && k < got && (ends_with(".tiktoken") || ends_with(".model") || std::isdigit(static_cast<unsigned char>(head[k + 1])))) {
    return TokenizerFromTiktoken(path, pre);
  }
  return TokenizerFromLlama2c(path, n_vocab);
}

}  // namespace infera
