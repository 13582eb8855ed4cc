// libFuzzer target: OpenAI request bodies (untrusted network input) through
// the parser and validator, with the bundled model's tokenizer. Must never
// crash, whatever the bytes; whatever it accepts must be within the limits.
// Output constraints (GBNF, regex, JSON schema, choices) are parsed into
// grammars here too, and each grammar is then run over the body's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/json.h"
#include "base/paths.h"
#include "formats/gguf_reader.h"
#include "sampling/grammar.h"
#include "server/anthropic.h"
#include "server/infill.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "tokenizer/loader.h"

namespace {
std::unique_ptr<infera::Tokenizer> g_tokenizer;  // set once in LLVMFuzzerInitialize, read-only after
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace infera;
  auto path = FindDefaultModel();
  if (!path.ok()) std::abort();
  auto g = GgufFile::Open(*path);
  if (!g.ok()) std::abort();
  auto t = TokenizerFromGguf(**g);
  if (!t.ok()) std::abort();
  g_tokenizer = std::move(t).value();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera::server;
  if (size == 0) return 0;
  ParseContext ctx;
  ctx.tokenizer = g_tokenizer.get();
  ctx.limits.max_model_len = 256;
  ctx.limits.n_vocab = g_tokenizer->n_vocab();
  ctx.limits.max_n = 4;
  ctx.limits.n_lora = 2;
  // Chat bodies go through a Jinja template that renders tools and tool
  // calls (hermes format), and per-request templates are trusted, so the
  // template interpreter and the tool-call paths are fuzzed too.
  static const infera::ChatTemplate kTemplate =
      infera::ChatTemplate::FromJinja(
          "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% if m.tool_calls %}"
          "<tool_call>{{ m.tool_calls | tojson }}</tool_call>{% endif %}<|im_end|>\n{% endfor %}"
          "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{% if add_generation_prompt %}"
          "<|im_start|>assistant\n{% endif %}")
          .value();
  ctx.chat_template = kTemplate;
  ctx.trust_request_chat_template = true;
  ctx.tool_format = infera::server::DetectToolCallFormat(kTemplate.jinja_source());
  const bool chat = (data[0] & 1) != 0;
  ctx.native = !chat && (data[0] & 2) != 0;  // llama-server's /completion
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (chat && (data[0] & 8) != 0) {  // Anthropic's /v1/messages: translated, then parsed as chat
    std::string chat_body;
    ApiError aerr;
    if (!AnthropicToChatRequest(body, (data[0] & 16) != 0, &chat_body, &aerr)) {
      if (aerr.status != 400 || aerr.message.empty()) __builtin_trap();
      (void)AnthropicErrorBody(aerr.status, aerr.ToJson());
      return 0;
    }
    body = std::move(chat_body);
  } else if (chat && (data[0] & 32) != 0) {  // OpenAI's /v1/responses: translated, then parsed as chat
    // One stored conversation for previous_response_id "resp_1".
    // (Built once, never freed: a store holds a mutex, so it cannot be returned by value.)
    static infera::server::ResponsesStore* const store = [] {
      auto* s = new infera::server::ResponsesStore(2);
      auto r = std::make_shared<infera::server::StoredResponse>();
      r->history = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": "{}"}}]}])");
      s->Put("resp_1", r);
      return s;
    }();
    infera::server::ResponsesTurn turn;
    ApiError rerr;
    if (!ResponsesToChatRequest(body, store, (data[0] & 16) != 0, "x", &turn, &rerr)) {
      if ((rerr.status != 400 && rerr.status != 404) || rerr.message.empty()) __builtin_trap();
      return 0;
    }
    if (!turn.echo.is_object() || !turn.input_items.is_array()) __builtin_trap();
    body = std::move(turn.chat_body);
  }
  CompletionSpec spec;
  ApiError err;
  if (ctx.native && (data[0] & 4) != 0) {  // /infill: its fields first, then /completion's
    nlohmann::json j = infera::ParseJson(body);
    InfillRequest infill;
    if (!j.is_object() || !TakeInfillFields(&j, &infill, &err)) return 0;
    if (BuildInfillPrompt(*g_tokenizer, infill, 512, 256, 16).ok()) __builtin_trap();  // no FIM tokens
  }
  if (ParseCompletionRequest(body, chat, ctx, &spec, &err)) {
    if (spec.prompts.empty() || spec.n < 1 || spec.n > 4) __builtin_trap();
    // Top-k counts within the endpoint's limit (20 for OpenAI's, 1000 for n_probs).
    if (spec.params.logprobs > (ctx.native ? 1000 : 20) || spec.params.prompt_logprobs > 20) __builtin_trap();
    if (spec.return_tokens && !ctx.native) __builtin_trap();
    if (!spec.params.lora_scales.empty() && spec.params.lora_scales.size() != 2) __builtin_trap();
    for (const auto& p : spec.prompts) {
      if (p.empty() || p.size() >= 256) __builtin_trap();
      for (int32_t id : p) {
        if (id < 0 || id >= ctx.limits.n_vocab) __builtin_trap();
      }
    }
    // A constraint's grammar (grammar, regex, schema, choice): follow the
    // body's own bytes through it, as decoding would follow tokens.
    if (spec.params.grammar) {
      infera::GrammarMatcher m(spec.params.grammar);
      for (size_t i = 0; i < body.size() && !m.dead(); i += 3) {
        (void)m.AcceptBytes(std::string_view(body).substr(i, 3));
        (void)m.CanEnd();
      }
      (void)m.StateKey();
    }
  } else if (err.status != 400 || err.message.empty()) {
    __builtin_trap();
  }
  (void)err.ToJson();
  return 0;
}
