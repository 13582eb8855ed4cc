#include "server/request_fields.h"

#include <fmt/format.h>

namespace infera::server {
namespace {

using nlohmann::json;

constexpr RequestField Parsed(const char* name, const char* origin, int endpoints, const char* what) {
  return {name, origin, endpoints, FieldUse::kParsed, Noop::kNull, nullptr, JsonKind::kString, what};
}
constexpr RequestField NoEffect(const char* name, const char* origin, int endpoints, JsonKind kind,
                                const char* why) {
  return {name, origin, endpoints, FieldUse::kNoEffect, Noop::kNull, nullptr, kind, why};
}
constexpr RequestField Refused(const char* name, const char* origin, int endpoints, Noop noop, const char* what,
                               const char* noop_text = nullptr) {
  return {name, origin, endpoints, FieldUse::kRefused, noop, noop_text, JsonKind::kString, what};
}

constexpr int kC = kCompletions;
constexpr int kB = kBothEndpoints;

constexpr RequestField kFields[] = {
    // OpenAI.
    Parsed("model", "OpenAI", kB, "the served model's name (another: 404)"),
    Parsed("prompt", "OpenAI", kC, "the prompt(s): text or token ids"),
    Parsed("messages", "OpenAI", kChat, "the conversation"),
    Parsed("max_tokens", "OpenAI", kB, "the most tokens to generate"),
    Parsed("max_completion_tokens", "OpenAI", kChat, "the most tokens to generate"),
    Parsed("temperature", "OpenAI", kB, "sampling temperature"),
    Parsed("top_p", "OpenAI", kB, "nucleus sampling"),
    Parsed("n", "OpenAI", kB, "choices per prompt"),
    Parsed("stream", "OpenAI", kB, "server-sent events"),
    Parsed("stream_options", "OpenAI", kB, "include_usage"),
    Parsed("stop", "OpenAI", kB, "stop strings"),
    Parsed("seed", "OpenAI", kB, "reproducible sampling"),
    Parsed("presence_penalty", "OpenAI", kB, "penalty on tokens already present"),
    Parsed("frequency_penalty", "OpenAI", kB, "penalty by token count"),
    Parsed("logprobs", "OpenAI", kB, "token log-probabilities"),
    Parsed("top_logprobs", "OpenAI", kChat, "the k most likely tokens"),
    Parsed("echo", "OpenAI", kC, "prepend the prompt; prompt scoring"),
    Parsed("logit_bias", "OpenAI", kB, "bias added to logits"),
    Parsed("best_of", "OpenAI", kB, "equal to n only (choosing the best of several: 400)"),
    Parsed("response_format", "OpenAI", kB, "text, json_object or json_schema"),
    Parsed("tools", "OpenAI", kChat, "functions the model may call (rendered by the Jinja chat template)"),
    Parsed("tool_choice", "OpenAI", kChat, "none, auto, required or a named function (the last two enforced)"),
    NoEffect("user", "OpenAI", kB, JsonKind::kString, "an end-user id; written to the request log"),
    NoEffect("safety_identifier", "OpenAI", kB, JsonKind::kString, "an end-user id; written to the request log"),
    NoEffect("metadata", "OpenAI", kChat, JsonKind::kObject, "tags for stored completions (store is refused)"),
    NoEffect("prompt_cache_key", "OpenAI", kB, JsonKind::kString,
             "a cache hint: infera's prefix cache reuses every shared prefix anyway"),
    NoEffect("prompt_cache_retention", "OpenAI", kB, JsonKind::kString,
             "a cache hint: cached blocks live until memory is needed"),
    Parsed("parallel_tool_calls", "OpenAI", kChat, "false: at most one call per reply"),
    Refused("store", "OpenAI", kChat, Noop::kFalse, "storing completions"),
    Refused("service_tier", "OpenAI", kB, Noop::kText, "other service tiers", "auto|default"),
    Refused("reasoning_effort", "OpenAI", kChat, Noop::kNull, "reasoning effort"),
    Refused("verbosity", "OpenAI", kChat, Noop::kNull, "output verbosity"),
    Refused("prediction", "OpenAI", kChat, Noop::kNull, "predicted outputs"),
    Refused("web_search_options", "OpenAI", kChat, Noop::kNull, "web search"),
    Refused("functions", "OpenAI", kChat, Noop::kEmpty, "function calling"),
    Refused("function_call", "OpenAI", kChat, Noop::kText, "function calling", "none|auto"),
    Refused("audio", "OpenAI", kChat, Noop::kNull, "audio output"),
    Refused("modalities", "OpenAI", kChat, Noop::kText, "audio output", "text"),
    Parsed("suffix", "OpenAI", kC,
           "text after the completion: fill-in-the-middle, for models with FIM tokens (as /infill)"),
    // vLLM.
    Parsed("top_k", "vLLM", kB, "top-k sampling"),
    Parsed("min_p", "vLLM", kB, "min-p sampling"),
    Parsed("repetition_penalty", "vLLM", kB, "repetition penalty"),
    Parsed("ignore_eos", "vLLM", kB, "generate past end-of-text"),
    Parsed("min_tokens", "vLLM", kB, "mask end-of-text until this many tokens"),
    Parsed("priority", "vLLM", kB, "scheduling priority"),
    Parsed("add_generation_prompt", "vLLM", kChat, "open the assistant's turn (default true)"),
    Parsed("add_special_tokens", "vLLM", kC, "BOS before the prompt (default true)"),
    Refused("add_special_tokens", "vLLM", kChat, Noop::kFalse, "special tokens on top of the template's"),
    Parsed("chat_template_kwargs", "vLLM", kChat,
           "variables for the Jinja template (built-in formats: enable_thinking)"),
    Refused("use_beam_search", "vLLM", kB, Noop::kFalse, "beam search"),
    Refused("length_penalty", "vLLM", kB, Noop::kOne, "beam search"),
    Parsed("stop_token_ids", "vLLM", kB, "token ids that end the output (stop_reason: the id)"),
    Parsed("include_stop_str_in_output", "vLLM", kB, "the matched stop string ends the text"),
    Parsed("skip_special_tokens", "vLLM", kB, "false: control tokens the model writes appear in the text"),
    Refused("spaces_between_special_tokens", "vLLM", kB, Noop::kTrue, "special tokens in the text"),
    Refused("truncate_prompt_tokens", "vLLM", kB, Noop::kNull, "prompt truncation"),
    Parsed("prompt_logprobs", "vLLM", kB,
           "each prompt token's log-probability, rank and the k most likely there (≤ 20; not with stream)"),
    Refused("allowed_token_ids", "vLLM", kB, Noop::kEmpty, "a token allow-list"),
    Refused("bad_words", "vLLM", kB, Noop::kEmpty, "banned words"),
    Refused("echo", "vLLM", kChat, Noop::kFalse, "echoing the last message"),
    Refused("continue_final_message", "vLLM", kChat, Noop::kFalse, "continuing the final message"),
    Parsed("chat_template", "vLLM", kChat, "a Jinja template for this request (--trust-request-chat-template)"),
    Refused("documents", "vLLM", kChat, Noop::kEmpty, "retrieval documents in the template"),
    Refused("mm_processor_kwargs", "vLLM", kB, Noop::kEmpty, "multi-modal input"),
    Parsed("guided_json", "vLLM", kB, "the output is JSON that validates against this schema"),
    Parsed("guided_regex", "vLLM", kB, "the output matches this regular expression"),
    Parsed("guided_choice", "vLLM", kB, "the output is one of these strings"),
    Parsed("guided_grammar", "vLLM", kB, "the output is a sentence of this GBNF grammar"),
    Refused("structural_tag", "vLLM", kB, Noop::kEmpty, "constrained output"),
    Refused("structured_outputs", "vLLM", kB, Noop::kEmpty, "constrained output"),
    Refused("guided_decoding_backend", "vLLM", kB, Noop::kEmpty, "constrained output"),
    Refused("guided_whitespace_pattern", "vLLM", kB, Noop::kEmpty, "constrained output"),
    Refused("logits_processors", "vLLM", kB, Noop::kEmpty, "custom logits processors"),
    Refused("return_tokens_as_token_ids", "vLLM", kB, Noop::kFalse, "token ids in place of text"),
    Refused("return_token_ids", "vLLM", kB, Noop::kFalse, "token ids beside the text"),
    Refused("request_id", "vLLM", kB, Noop::kEmpty, "a caller-chosen response id"),
    Refused("cache_salt", "vLLM", kB, Noop::kEmpty, "a separate prefix cache"),
    Refused("kv_transfer_params", "vLLM", kB, Noop::kEmpty, "disaggregated prefill"),
    Refused("vllm_xargs", "vLLM", kB, Noop::kEmpty, "custom extensions"),
    Refused("prompt_embeds", "vLLM", kC, Noop::kEmpty, "embeddings as the prompt"),
    // llama.cpp (its native fields, which its OpenAI endpoints take too).
    Parsed("n_predict", "llama.cpp", kB, "max_tokens (-1: no limit)"),
    Parsed("repeat_penalty", "llama.cpp", kB, "repetition penalty over a window"),
    Parsed("repeat_last_n", "llama.cpp", kB, "the repetition penalty's window"),
    NoEffect("cache_prompt", "llama.cpp", kB, JsonKind::kBool,
             "reusing the cached prefix: infera's output is the same with or without it"),
    NoEffect("id_slot", "llama.cpp", kB, JsonKind::kInteger, "a server slot: infera's scheduler places requests"),
    NoEffect("dynatemp_exponent", "llama.cpp", kB, JsonKind::kNumber, "only matters with dynatemp_range (refused)"),
    NoEffect("xtc_threshold", "llama.cpp", kB, JsonKind::kNumber, "only matters with xtc_probability (refused)"),
    NoEffect("mirostat_tau", "llama.cpp", kB, JsonKind::kNumber, "only matters with mirostat (refused)"),
    NoEffect("mirostat_eta", "llama.cpp", kB, JsonKind::kNumber, "only matters with mirostat (refused)"),
    NoEffect("dry_base", "llama.cpp", kB, JsonKind::kNumber, "only matters with dry_multiplier (refused)"),
    NoEffect("dry_allowed_length", "llama.cpp", kB, JsonKind::kInteger, "only matters with dry_multiplier (refused)"),
    NoEffect("dry_penalty_last_n", "llama.cpp", kB, JsonKind::kInteger, "only matters with dry_multiplier (refused)"),
    NoEffect("dry_sequence_breakers", "llama.cpp", kB, JsonKind::kArray, "only matters with dry_multiplier (refused)"),
    Parsed("grammar", "llama.cpp", kB, "the output is a sentence of this GBNF grammar"),
    Parsed("json_schema", "llama.cpp", kB, "the output is JSON that validates against this schema"),
    Refused("grammar_lazy", "llama.cpp", kB, Noop::kFalse, "grammar-constrained output"),
    Refused("grammar_triggers", "llama.cpp", kB, Noop::kEmpty, "grammar-constrained output"),
    Refused("preserved_tokens", "llama.cpp", kB, Noop::kEmpty, "grammar-constrained output"),
    Refused("mirostat", "llama.cpp", kB, Noop::kZero, "mirostat sampling"),
    Refused("typical_p", "llama.cpp", kB, Noop::kOne, "locally typical sampling"),
    Refused("tfs_z", "llama.cpp", kB, Noop::kOne, "tail-free sampling"),
    Refused("top_n_sigma", "llama.cpp", kB, Noop::kNotPositive, "top-n-sigma sampling"),
    Refused("dynatemp_range", "llama.cpp", kB, Noop::kZero, "dynamic temperature"),
    Refused("xtc_probability", "llama.cpp", kB, Noop::kZero, "XTC sampling"),
    Refused("dry_multiplier", "llama.cpp", kB, Noop::kZero, "DRY sampling"),
    Refused("penalize_nl", "llama.cpp", kB, Noop::kFalse, "penalizing newlines"),
    Refused("min_keep", "llama.cpp", kB, Noop::kZero, "a floor on the sampler's candidates"),
    Refused("samplers", "llama.cpp", kB, Noop::kEmpty, "a custom sampler order"),
    Parsed(
        "n_probs", "llama.cpp", kB,
        "/completion: completion_probabilities with the k most likely tokens (≤ 1000); elsewhere as logprobs (≤ 20)"),
    Parsed("post_sampling_probs", "llama.cpp", kB,
           "probabilities of the distribution each token was drawn from (after the samplers), not the model's"),
    Refused("n_keep", "llama.cpp", kB, Noop::kZero, "tokens kept on a context shift"),
    Refused("n_indent", "llama.cpp", kB, Noop::kZero, "an indentation stop"),
    Refused("t_max_predict_ms", "llama.cpp", kB, Noop::kZero, "a generation time limit"),
    Parsed("return_tokens", "llama.cpp", kB,
           "/completion: the generated token ids in 'tokens' (elsewhere 400 unless false)"),
    Refused("timings_per_token", "llama.cpp", kB, Noop::kFalse, "timings in every chunk"),
    Refused("response_fields", "llama.cpp", kB, Noop::kEmpty, "a custom response shape"),
    Parsed("lora", "llama.cpp", kB, "LoRA adapters' scales for this request: [{\"id\", \"scale\"}], the others off"),
    Refused("image_data", "llama.cpp", kB, Noop::kEmpty, "multi-modal input"),
    Refused("multimodal_data", "llama.cpp", kB, Noop::kEmpty, "multi-modal input"),
    Refused("reasoning_format", "llama.cpp", kChat, Noop::kText, "separating the reasoning from the reply", "none"),
    Refused("parse_tool_calls", "llama.cpp", kChat, Noop::kFalse, "tool calling"),
    Refused("thinking_forced_open", "llama.cpp", kChat, Noop::kFalse, "a forced-open reasoning block"),
    // infera.
    Parsed("session_id", "infera", kB, "the conversation's id for KV offload tiers"),
};

bool MatchesText(const char* options, const std::string& s) {
  std::string_view rest(options);
  while (true) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == s) return true;
    if (bar == std::string_view::npos) return false;
    rest.remove_prefix(bar + 1);
  }
}

}  // namespace

std::span<const RequestField> RequestFields() { return kFields; }

const RequestField* FindRequestField(std::string_view name, bool chat) {
  const int endpoint = chat ? kChat : kCompletions;
  for (const RequestField& f : kFields) {
    if (name == f.name && (f.endpoints & endpoint) != 0) return &f;
  }
  return nullptr;
}

bool IsNoopValue(const RequestField& f, const json& v) {
  if (v.is_null()) return true;
  switch (f.noop) {
    case Noop::kNull:
      return false;
    case Noop::kEmpty:  // (json::empty() is false for every string)
      return v.is_string() ? v.get_ref<const std::string&>().empty() : (v.is_array() || v.is_object()) && v.empty();
    case Noop::kFalse:
      return v.is_boolean() && !v.get<bool>();
    case Noop::kTrue:
      return v.is_boolean() && v.get<bool>();
    case Noop::kZero:
      return (v.is_number() && v.get<double>() == 0) || (v.is_boolean() && !v.get<bool>());
    case Noop::kOne:
      return v.is_number() && v.get<double>() == 1;
    case Noop::kNotPositive:
      return v.is_number() && v.get<double>() <= 0;
    case Noop::kText:
      if (v.is_string()) return MatchesText(f.noop_text, v.get<std::string>());
      if (!v.is_array()) return false;  // modalities: a list of the allowed strings
      for (const json& item : v) {
        if (!item.is_string() || !MatchesText(f.noop_text, item.get<std::string>())) return false;
      }
      return true;
  }
  return false;
}

std::string NoopDescription(const RequestField& f) {
  switch (f.noop) {
    case Noop::kNull: return "null";
    case Noop::kEmpty: return "empty";
    case Noop::kFalse: return "false";
    case Noop::kTrue: return "true";
    case Noop::kZero: return "0";
    case Noop::kOne: return "1";
    case Noop::kNotPositive: return "≤ 0";
    case Noop::kText: {
      std::string out;
      for (std::string_view rest(f.noop_text);;) {
        const size_t bar = rest.find('|');
        if (!out.empty()) out += " or ";
        out += fmt::format("\"{}\"", rest.substr(0, bar));
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
      }
      return out;
    }
  }
  return "";
}

}  // namespace infera::server
