// Tokenizer files other than GGUF and llama2.c: SentencePiece .model,
// tiktoken rank files, HF vocab.json + merges.txt and HF tokenizer.json.
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/file_loaders.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/spm_tokenizer.h"

namespace infera {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;
using nlohmann::json;

bool Base64Decode(std::string_view in, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

// Special tokens appended after the ranks, as the model families define them.
void AddTiktokenSpecials(size_t n_ranks, Vocab* v, std::string* pre) {
  auto add = [&](const std::string& s) {
    v->pieces.push_back(s);
    v->scores.push_back(0);
    v->types.push_back(TokenType::kControl);
  };
  if (n_ranks == 128000) {  // Llama 3
    const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                           "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                           "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|reserved_special_token_4|>", "<|eot_id|>"};
    for (const char* s : named) add(s);
    for (int i = 5; v->pieces.size() < 128256; ++i) add(fmt::format("<|reserved_special_token_{}|>", i));
    v->bos = 128000;
    v->eos = 128001;
    v->add_bos = true;
    if (pre->empty()) *pre = "llama3";
  } else if (n_ranks == 151643) {  // Qwen
    add("<|endoftext|>");
    add("<|im_start|>");
    add("<|im_end|>");
    for (int i = 0; i < 205; ++i) add(fmt::format("<|extra_{}|>", i));
    v->eos = 151643;
    v->add_bos = false;
    if (pre->empty()) *pre = "qwen2";
  } else if (pre->empty()) {
    *pre = "llama3";
  }
}

StatusOr<std::unique_ptr<Tokenizer>> MakeBpe(Vocab v, const Merges& merges, const std::string& pre_name,
                                            bool ignore_merges, const std::string& source) {
  auto pre = PreTokenizer::FromPresetName(pre_name);
  if (!pre.ok()) return pre.status().WithPrefix(source);
  v.add_space_prefix = false;
  v.Finalize();
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(v), merges, std::move(pre).value(), ignore_merges));
}

Status ParseMergeLine(const std::string& line, const std::string& source, Merges* out) {
  const size_t sp = line.find(' ', 1);
  if (sp == std::string::npos || sp + 1 >= line.size()) return DataLoss(source + ": malformed merge '" + line + "'");
  out->emplace_back(line.substr(0, sp), line.substr(sp + 1));
  return Status::Ok();
}

// tokenizer_config.json / special_tokens_map.json: bos/eos strings, add_bos.
void ApplyTokenizerConfig(const std::string& dir, Vocab* v) {
  auto text = ReadFileToString(dir + "/tokenizer_config.json");
  if (!text.ok()) return;
  json j = ParseJson(*text);
  if (!j.is_object()) return;
  auto token_text = [&](const char* key) -> std::string {
    auto it = j.find(key);
    if (it == j.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
    return "";
  };
  if (auto b = token_text("bos_token"); !b.empty() && v->Find(b) >= 0) v->bos = v->Find(b);
  if (auto e = token_text("eos_token"); !e.empty() && v->Find(e) >= 0) v->eos = v->Find(e);
  if (auto it = j.find("add_bos_token"); it != j.end() && it->is_boolean()) v->add_bos = it->get<bool>();
  if (auto it = j.find("add_eos_token"); it != j.end() && it->is_boolean()) v->add_eos = it->get<bool>();
  if (auto it = j.find("chat_template"); it != j.end()) {
    if (it->is_string()) {
      v->chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const auto& t : *it) {
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
          v->chat_template = t["template"].get<std::string>();
        }
      }
    }
  }
}

StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJsonUnchecked(const std::string& path, const std::string& pre_override) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = ParseJson(text);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return DataLoss(path + ": not a tokenizer.json (no model object)");
  }
  const json& model = j["model"];
  const std::string type = model.value("type", "BPE");
  if (type != "BPE") return Unimplemented(path + ": tokenizer model type '" + type + "' is not supported (BPE only)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) return DataLoss(path + ": model.vocab must be an object");
  Vocab v;
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) return DataLoss(path + ": vocab ids must be integers");
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) max_id = std::max<int64_t>(max_id, t["id"].get<int64_t>());
    }
  }
  if (max_id < 0 || max_id >= (1 << 24)) return DataLoss(path + ": bad vocab size");
  v.pieces.assign(max_id + 1, "");
  v.types.assign(max_id + 1, TokenType::kUnused);
  v.scores.assign(max_id + 1, 0.0f);
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0) return DataLoss(path + ": negative vocab id");
    v.pieces[id] = it.key();
    v.types[id] = TokenType::kNormal;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t["id"].is_number_integer()) continue;
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0) continue;
      v.pieces[id] = t["content"].get<std::string>();
      v.types[id] = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  Merges merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const auto& m : model["merges"]) {
      if (m.is_string()) {
        RETURN_IF_ERROR(ParseMergeLine(m.get<std::string>(), path, &merges));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return DataLoss(path + ": malformed merges entry");
      }
    }
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  // Metaspace pre-tokenizer + byte_fallback: a SentencePiece vocab serialized
  // as BPE merges. Scores are derived from merge ranks (earlier = better).
  const json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  const bool metaspace = (pre.is_object() && pre.value("type", "") == "Metaspace") ||
                         (!pre.is_object() && model.value("byte_fallback", false));
  if (metaspace) {
    v.Finalize();
    for (size_t r = 0; r < merges.size(); ++r) {
      const int32_t id = v.Find(merges[r].first + merges[r].second);
      if (id >= 0 && v.scores[id] == 0.0f) v.scores[id] = -static_cast<float>(r + 1);
    }
    for (int32_t id = 0; id < v.size(); ++id) {
      if (v.pieces[id] == "<unk>") v.unk = id;
    }
    v.bos = v.Find("<s>");
    v.eos = v.Find("</s>");
    v.add_space_prefix = true;
    ApplyTokenizerConfig(dir, &v);
    v.Finalize();
    return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
  }
  // Byte-level: take the Split regexes from the pre-tokenizer when present.
  std::vector<std::string> patterns;
  auto collect = [&](const json& p) {
    if (!p.is_object()) return;
    const std::string t = p.value("type", "");
    if (t == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
        p["pattern"]["Regex"].is_string()) {
      patterns.push_back(p["pattern"]["Regex"].get<std::string>());
    } else if (t == "ByteLevel" && p.value("use_regex", true)) {
      patterns.push_back(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
    }
  };
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    for (const auto& p : pre["pretokenizers"]) collect(p);
  } else {
    collect(pre);
  }
  v.add_bos = false;
  ApplyTokenizerConfig(dir, &v);
  const bool ignore_merges = model.value("ignore_merges", false);
  if (!pre_override.empty() || patterns.empty()) {
    return MakeBpe(std::move(v), merges, pre_override.empty() ? "gpt2" : pre_override, ignore_merges, path);
  }
  auto pt = PreTokenizer::FromPatterns(patterns);
  if (!pt.ok()) return pt.status().WithPrefix(path);
  v.add_space_prefix = false;
  v.Finalize();
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(v), merges, std::move(pt).value(), ignore_merges));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromSentencePiece(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  ASSIGN_OR_RETURN(SentencePieceModel m, ParseSentencePieceModel(bytes, path));
  if (m.model_type != 2 && m.model_type != 0) {
    return Unimplemented(fmt::format("{}: SentencePiece model type {} is not supported (BPE only)", path, m.model_type));
  }
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(m.vocab)));
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTiktoken(const std::string& path, const std::string& pre_override) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::istringstream in(text);
  std::string b64;
  int64_t rank;
  Vocab v;
  std::string bytes;
  while (in >> b64 >> rank) {
    if (rank != static_cast<int64_t>(v.pieces.size())) {
      return DataLoss(fmt::format("{}: tiktoken ranks must be 0, 1, 2, ... (got {} at line {})", path, rank, v.pieces.size() + 1));
    }
    bytes.clear();
    if (!Base64Decode(b64, &bytes) || bytes.empty()) return DataLoss(fmt::format("{}: bad base64 at line {}", path, v.pieces.size() + 1));
    v.pieces.push_back(BytesToUnicode(bytes));
    v.scores.push_back(0);
    v.types.push_back(TokenType::kNormal);
  }
  if (!in.eof() || v.pieces.empty()) return DataLoss(path + ": not a tiktoken rank file (lines of 'base64 rank')");
  std::string pre = pre_override;
  AddTiktokenSpecials(v.pieces.size() - 0, &v, &pre);
  return MakeBpe(std::move(v), {}, pre, /*ignore_merges=*/true, path);
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromVocabMerges(const std::string& vocab_path, const std::string& merges_path,
                                                             const std::string& pre_override) {
  ASSIGN_OR_RETURN(std::string vtext, ReadFileToString(vocab_path));
  json j = ParseJson(vtext);
  if (j.is_discarded() || !j.is_object()) return DataLoss(vocab_path + ": not a JSON object of token -> id");
  Vocab v;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer()) return DataLoss(vocab_path + ": ids must be integers");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return DataLoss(vocab_path + ": id out of range");
    if (static_cast<size_t>(id) >= v.pieces.size()) {
      v.pieces.resize(id + 1);
      v.types.resize(id + 1, TokenType::kUnused);
    }
    v.pieces[id] = it.key();
    const bool special = it.key().size() > 4 && it.key().rfind("<|", 0) == 0 && it.key().substr(it.key().size() - 2) == "|>";
    v.types[id] = special ? TokenType::kControl : TokenType::kNormal;
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  if (int32_t e = v.Find("<|endoftext|>"); e >= 0) v.eos = e;
  ASSIGN_OR_RETURN(std::string mtext, ReadFileToString(merges_path));
  std::istringstream in(mtext);
  std::string line;
  Merges merges;
  bool first = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // HF files start with "#version: 0.2"; some copies drop it, so detect it.
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    RETURN_IF_ERROR(ParseMergeLine(line, merges_path, &merges));
  }
  v.add_bos = false;
  return MakeBpe(std::move(v), merges, pre_override.empty() ? "gpt2" : pre_override, false, vocab_path);
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTokenizerJson(const std::string& path, const std::string& pre_override) {
  try {
    return FromTokenizerJsonUnchecked(path, pre_override);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(path + ": invalid tokenizer.json: " + e.what());
  }
}

}  // namespace infera
