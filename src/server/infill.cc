#include "server/infill.h"

#include <fmt/format.h>

#include <algorithm>

namespace infera::server {

using nlohmann::json;

bool TakeInfillFields(json* body, InfillRequest* out, ApiError* err) {
  *out = InfillRequest{};
  for (auto [key, dst] : {std::pair{"input_prefix", &out->prefix}, std::pair{"input_suffix", &out->suffix},
                          std::pair{"prompt", &out->prompt}}) {
    auto it = body->find(key);
    if (it == body->end()) continue;
    if (!it->is_null() && !it->is_string()) return SetBadValue(err, key, fmt::format("'{}' must be a string", key));
    if (it->is_string()) *dst = it->get<std::string>();
    body->erase(it);
  }
  auto it = body->find("input_extra");
  if (it == body->end()) return true;
  const char* kShape = R"('input_extra' must be an array of {"filename": string, "text": string})";
  if (!it->is_null() && !it->is_array()) return SetBadValue(err, "input_extra", kShape);
  if (it->is_array()) {
    for (const json& chunk : *it) {
      if (!chunk.is_object()) return SetBadValue(err, "input_extra", kShape);
      std::string filename = "tmp", text;  // llama-server's defaults
      for (const auto& [k, v] : chunk.items()) {
        if ((k != "filename" && k != "text") || !v.is_string()) return SetBadValue(err, "input_extra", kShape);
        (k == "filename" ? filename : text) = v.get<std::string>();
      }
      out->extra.emplace_back(std::move(filename), std::move(text));
    }
  }
  body->erase(it);
  return true;
}

StatusOr<std::vector<int32_t>> BuildInfillPrompt(const Tokenizer& tok, const InfillRequest& in, int32_t n_batch,
                                                 int32_t n_ctx, int32_t n_predict, bool spm_order) {
  const Vocab::Fim& fim = tok.vocab().fim;
  if (fim.pre < 0 || fim.suf < 0 || fim.mid < 0) {
    return Unimplemented(fmt::format("infill is not supported by this model: it has no fill-in-the-middle {} token",
                                     fim.pre < 0   ? "prefix"
                                     : fim.suf < 0 ? "suffix"
                                                   : "middle"));
  }
  auto encode = [&](const std::string& s) { return tok.Encode(s, /*add_special=*/false, /*parse_special=*/false); };
  auto append = [](std::vector<int32_t>* to, const std::vector<int32_t>& from) {
    to->insert(to->end(), from.begin(), from.end());
  };
  // Other files first: the repository, then each file under its name.
  std::vector<int32_t> extra;
  if (fim.rep >= 0) {
    extra.push_back(fim.rep);
    append(&extra, encode("myproject\n"));
  }
  for (const auto& [filename, text] : in.extra) {
    if (fim.sep >= 0) {
      extra.push_back(fim.sep);
      append(&extra, encode(filename + "\n"));
    } else {
      append(&extra, encode("\n\n--- snippet ---\n\n"));
    }
    append(&extra, encode(text));
  }
  if (fim.sep >= 0) {  // the file being edited
    extra.push_back(fim.sep);
    append(&extra, encode("filename\n"));
  }
  std::vector<int32_t> prefix = encode(in.prefix), suffix = encode(in.suffix);
  const std::vector<int32_t> prompt = encode(in.prompt);
  // The prefix and suffix share a batch 3:1; the extra files the rest of the
  // context, less room for the answer.
  const int64_t prefix_take = std::min<int64_t>(static_cast<int64_t>(prefix.size()), 3 * (n_batch / 4));
  const int64_t suffix_take =
      std::min<int64_t>(static_cast<int64_t>(suffix.size()),
                        std::max<int64_t>(0, n_batch / 4 - (2 + static_cast<int64_t>(prompt.size()))));
  const int64_t extra_take =
      std::min<int64_t>(std::max<int64_t>(0, int64_t{n_ctx} - n_batch - 2 * int64_t{std::max(n_predict, 0)}),
                        static_cast<int64_t>(extra.size()));
  std::vector<int32_t> before = {fim.pre}, after = {fim.suf};  // [FIM_PRE] prefix prompt, [FIM_SUF] suffix
  before.insert(before.end(), prefix.end() - prefix_take, prefix.end());
  append(&before, prompt);
  after.insert(after.end(), suffix.begin(), suffix.begin() + suffix_take);
  std::vector<int32_t> out;
  if (tok.vocab().add_bos && tok.vocab().bos >= 0) out.push_back(tok.vocab().bos);
  out.insert(out.end(), extra.end() - extra_take, extra.end());
  append(&out, spm_order ? after : before);
  append(&out, spm_order ? before : after);
  out.push_back(fim.mid);
  return out;
}

}  // namespace infera::server
