// ApiServer's llama-server-style endpoints and request translations:
// /tokenize, /detokenize, /props, /apply-template, the FIM prompts of
// /infill and OpenAI's suffix, Anthropic's count_tokens. The routing,
// auth and the completion path are in api_server.cc; LoRA adapters in
// api_server_lora.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/json.h"
#include "server/api_responses.h"
#include "server/api_server.h"
#include "server/infill.h"

namespace infera::server {

using nlohmann::json;

void ApiServer::HandleCountTokens(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const {
  ParseContext ctx = MakeParseContext();
  ctx.limits.max_model_len = std::numeric_limits<int32_t>::max();  // counting, not generating
  CompletionSpec spec;
  ApiError err;
  if (!ParseCompletionRequest(req.body, /*chat=*/true, ctx, &spec, &err)) return SendError(resp, err);
  SendJson(resp, 200, {{"input_tokens", spec.prompts[0].size()}});
}

StatusOr<std::vector<int32_t>> ApiServer::InfillPromptIds(const InfillRequest& infill, int64_t n_predict) const {
  const int32_t n_ctx = backend_.engine->max_model_len();
  return BuildInfillPrompt(*backend_.tokenizer, infill, std::min(2048, n_ctx / 2), n_ctx,
                           static_cast<int32_t>(std::clamp<int64_t>(n_predict, 0, n_ctx)), opts_.spm_infill);
}

bool ApiServer::TakeSuffixPrompt(HttpRequest* req, const std::shared_ptr<Responder>& resp) const {
  json body;
  ApiError err;
  if (!ParseJsonBody(req->body, &body, &err)) return true;  // (the parser answers)
  auto suffix = body.find("suffix");
  if (suffix == body.end() || suffix->is_null() ||
      (suffix->is_string() && suffix->get_ref<const std::string&>().empty())) {
    return true;  // no suffix: an ordinary completion
  }
  auto bad = [&](const char* param, const std::string& message) {
    SendError(resp, BadValue(param, message));
    return false;
  };
  if (!suffix->is_string()) return bad("suffix", "'suffix' must be a string");
  InfillRequest infill;
  infill.suffix = suffix->get<std::string>();
  auto prompt = body.find("prompt");
  if (prompt != body.end() && prompt->is_array() && prompt->size() == 1) prompt = prompt->begin();
  if (prompt == body.end() || !prompt->is_string()) {
    return bad("prompt", "with 'suffix' the prompt must be one string (the text before the insertion)");
  }
  if (body.value("echo", false) == true) return bad("echo", "'echo' cannot be used with 'suffix'");
  infill.prefix = prompt->get<std::string>();
  int64_t max_tokens = 16;  // OpenAI's default
  if (auto it = body.find("max_tokens"); it != body.end() && it->is_number_integer()) max_tokens = it->get<int64_t>();
  auto ids = InfillPromptIds(infill, max_tokens);
  if (!ids.ok()) return bad("suffix", std::string(ids.status().message()) + "; 'suffix' needs such a model");
  body["prompt"] = *ids;
  body.erase("suffix");
  req->body = DumpJson(body);
  return true;
}

bool ApiServer::TakeInfillPrompt(HttpRequest* req, const std::shared_ptr<Responder>& resp) const {
  json body;
  ApiError err;
  InfillRequest infill;
  if (!ParseJsonBody(req->body, &body, &err) || !TakeInfillFields(&body, &infill, &err)) {
    SendError(resp, err);
    return false;
  }
  int64_t n_predict = 0;  // room kept for the answer (when the request says)
  for (const char* key : {"max_tokens", "n_predict"}) {
    if (auto it = body.find(key); it != body.end() && it->is_number_integer()) n_predict = it->get<int64_t>();
  }
  auto ids = InfillPromptIds(infill, n_predict);
  if (!ids.ok()) {  // (the one failure: a model without FIM tokens)
    SendError(resp, Error(501, std::string(ids.status().message()), "not_supported_error", "infill_not_supported"));
    return false;
  }
  body["prompt"] = *ids;
  req->body = DumpJson(body);
  return true;
}

void ApiServer::HandleTokenize(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const {
  json body;
  ApiError err;
  if (!ParseJsonBody(req.body, &body, &err)) return SendError(resp, err);
  const Tokenizer& tok = *backend_.tokenizer;
  auto text = body.find("content");
  if (text == body.end()) text = body.find("prompt");
  bool add_special = true;
  for (const char* key : {"add_special", "add_special_tokens"}) {
    auto it = body.find(key);
    if (it == body.end()) continue;
    if (!it->is_boolean()) {
      return SendError(resp, BadValue(key, fmt::format("'{}' must be a boolean", key)));
    }
    add_special = it->get<bool>();
  }
  std::vector<int32_t> ids;
  if (text != body.end() && text->is_string()) {
    ids = tok.Encode(text->get<std::string>(), add_special, /*parse_special=*/true);
  } else if (body.contains("messages")) {
    ParseContext ctx = MakeParseContext();
    ctx.limits.max_model_len = std::numeric_limits<int32_t>::max();  // counting, not generating
    CompletionSpec spec;
    if (!ParseCompletionRequest(req.body, /*chat=*/true, ctx, &spec, &err)) return SendError(resp, err);
    ids = spec.prompts[0];
  } else {
    return SendError(resp, BadValue("content", "'content' (or 'prompt') must be a string, or 'messages' a chat"));
  }
  json pieces = json::array();
  const bool with_pieces = body.value("with_pieces", false);
  if (with_pieces) {
    for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", tok.TokenToPiece(id, true)}});
  }
  json out = {{"tokens", with_pieces ? pieces : json(ids)},
              {"count", ids.size()},
              {"max_model_len", backend_.engine->max_model_len()}};
  SendJson(resp, 200, out);
}

void ApiServer::HandleProps(const std::shared_ptr<Responder>& resp) const {
  // The defaults a completion request gets: those of an empty one, parsed.
  CompletionSpec spec;
  ApiError err;
  if (!ParseCompletionRequest(R"({"prompt": ""})", /*chat=*/false, MakeParseContext(), &spec, &err)) {
    return SendError(resp, err);
  }
  const SamplingParams& sp = spec.params.sampling;
  const json params = {{"n_predict", spec.params.max_tokens},
                       {"temperature", sp.temperature},
                       {"top_k", sp.top_k},
                       {"top_p", sp.top_p},
                       {"min_p", sp.min_p},
                       {"repeat_penalty", sp.repetition_penalty},
                       {"repeat_last_n", sp.penalty_last_n},
                       {"presence_penalty", sp.presence_penalty},
                       {"frequency_penalty", sp.frequency_penalty},
                       {"seed", -1}};
  const ChatTemplate& t = backend_.chat_template;
  SendJson(resp, 200,
           {{"default_generation_settings", {{"n_ctx", backend_.engine->max_model_len()}, {"params", params}}},
            {"total_slots", backend_.engine->max_num_seqs()},
            {"model_alias", opts_.served_model_name},
            {"chat_template", t.jinja_source().empty() ? t.Name() : t.jinja_source()},
            {"build_info", opts_.commit.empty() ? opts_.version : opts_.version + "-" + opts_.commit},
            {"modalities", {{"vision", false}, {"audio", false}}}});
}

void ApiServer::HandleApplyTemplate(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const {
  // The chat request's prompt as the template renders it (checked as a
  // chat completion request is).
  ParseContext ctx = MakeParseContext();
  ctx.limits.max_model_len = std::numeric_limits<int32_t>::max();  // rendering, not generating
  ctx.render_chat_text = true;
  CompletionSpec spec;
  ApiError err;
  if (!ParseCompletionRequest(req.body, /*chat=*/true, ctx, &spec, &err)) return SendError(resp, err);
  SendJson(resp, 200, {{"prompt", spec.chat_text}});
}

void ApiServer::HandleDetokenize(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const {
  json body;
  ApiError err;
  if (!ParseJsonBody(req.body, &body, &err)) return SendError(resp, err);
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return SendError(resp, BadValue("tokens", "'tokens' must be a list of token ids"));
  }
  std::vector<int32_t> ids;
  const int32_t n_vocab = backend_.engine->n_vocab();
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      return SendError(resp, BadValue("tokens", fmt::format("'tokens' must be token ids in [0, {})", n_vocab)));
    }
    ids.push_back(t.get<int32_t>());
  }
  const std::string text = backend_.tokenizer->Decode(ids, true);
  SendJson(resp, 200, {{"content", text}, {"prompt", text}});
}

}  // namespace infera::server
