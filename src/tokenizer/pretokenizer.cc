#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

#include <fmt/format.h>

namespace infera {

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

const char kGpt2[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char kLlama3[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kCjk[] = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";

const std::map<std::string, std::vector<std::string>>& Presets() {
  static const auto* presets = new std::map<std::string, std::vector<std::string>>{
      {"gpt2", {kGpt2}},
      {"llama3", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}},
      {"deepseek-llm",
       {"[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-"
        "\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
        "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-"
        "\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
        "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-"
        "\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126"
        "\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-"
        "\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-"
        "\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
        "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-"
        "\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$", kCjk, R"(\p{N}+)"}},
      {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
  };
  return *presets;
}

// llama.cpp's tokenizer.ggml.pre names -> preset.
std::string CanonicalPreset(const std::string& name) {
  static const std::map<std::string, std::string> alias = {
      {"gpt-2", "gpt2"}, {"gpt2", "gpt2"}, {"mpt", "gpt2"}, {"olmo", "gpt2"}, {"jais", "gpt2"},
      {"phi-2", "gpt2"}, {"llama-bpe", "llama3"}, {"llama3", "llama3"}, {"llama-v3", "llama3"},
      {"dbrx", "llama3"}, {"smaug-bpe", "llama3"}, {"falcon3", "llama3"}, {"qwen2", "qwen2"}, {"qwen", "qwen2"},
      {"stablelm2", "qwen2"}, {"falcon", "falcon"}, {"starcoder", "starcoder"}, {"refact", "starcoder"},
      {"command-r", "starcoder"}, {"smollm", "starcoder"}, {"codeshell", "starcoder"},
      {"deepseek-coder", "deepseek-coder"}, {"deepseek-llm", "deepseek-llm"}, {"default", "default"},
  };
  auto it = alias.find(name);
  return it == alias.end() ? "" : it->second;
}

}  // namespace

PreTokenizer::~PreTokenizer() {
  for (auto* r : regexes_) delete r;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromPatterns(const std::vector<std::string>& patterns) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  for (const auto& pat : patterns) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP,
                                     &err, &off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return InvalidArgument(fmt::format("bad pre-tokenizer regex at offset {}: {}", off, reinterpret_cast<char*>(msg)));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    auto* c = new Compiled();
    c->code = code;
    p->regexes_.push_back(c);
  }
  return p;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromPresetName(const std::string& name) {
  const std::string canon = CanonicalPreset(name);
  if (canon.empty()) {
    std::string known;
    for (const auto& [k, v] : Presets()) known += (known.empty() ? "" : ", ") + k;
    return Unimplemented("unknown pre-tokenizer '" + name + "' (known: " + known + ", and llama.cpp's aliases)");
  }
  return FromPatterns(Presets().at(canon));
}

std::vector<std::string> PreTokenizer::PresetNames() {
  std::vector<std::string> v;
  for (const auto& [k, _] : Presets()) v.push_back(k);
  return v;
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> chunks = {text};
  if (text.empty()) return {};
  std::vector<std::string_view> next;
  for (const Compiled* re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (std::string_view chunk : chunks) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(chunk.data());
      size_t pos = 0, gap_start = 0;
      while (pos <= chunk.size()) {
        const int rc = pcre2_match(re->code, subject, chunk.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        if (e == b) {  // empty match: step one character forward
          if (b >= chunk.size()) break;
          pos = b + 1;
          while (pos < chunk.size() && (static_cast<unsigned char>(chunk[pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (b > gap_start) next.push_back(chunk.substr(gap_start, b - gap_start));
        next.push_back(chunk.substr(b, e - b));
        gap_start = pos = e;
      }
      if (gap_start < chunk.size()) next.push_back(chunk.substr(gap_start));
    }
    pcre2_match_data_free(md);
    chunks.swap(next);
  }
  return chunks;
}

}  // namespace infera
