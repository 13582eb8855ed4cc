// infera generate --input prompts.jsonl --output out.jsonl: offline batch
// generation through the serving engine. One JSON object per input line
// (prompt or messages, plus sampling fields); one output line per input, in
// input order, shaped like an OpenAI completion choice plus usage. A line
// in the OpenAI Batch API's form (custom_id, method, url, body) gets that
// API's output line instead.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "infera/engine.h"
#include "sampling/sampler.h"
#include "server/openai_request.h"
#include "server/output_constraints.h"
#include "tokenizer/chat_template.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/parallel_session.h"

namespace infera::cli {
namespace {

struct GenerateArgs {
  std::string model, input, output, tokenizer, chat_template, chat_template_file;
  int threads = 0;
  int max_n = 128;
  EngineFlags engine;
  ParallelFlags parallel;
};

using Json = nlohmann::json;

// One input line, ready for the engine.
struct LineRequest {
  std::vector<int32_t> prompt;
  RequestParams params;
  int32_t n = 1;            // choices (samples) of this prompt
  Json custom_id;           // echoed back when given
  // An OpenAI Batch API line ({"custom_id", "method": "POST", "url", "body"},
  // as vLLM's run_batch reads): its result is written in that API's output
  // shape, the body a completion or chat completion object.
  bool batch_api = false;
  bool chat = false;
  std::string model;  // the body's "model" ("" if none)
};

// One choice's result.
struct Result {
  std::string text;    // accumulated over the steps
  RequestOutput last;  // the final output: finish reason, usage, timing
};

// An OpenAI Batch API output line for request `req` (line `index`): its
// response body a completion or chat completion object, as the server's.
Json BatchApiResult(const LineRequest& req, size_t index, const std::vector<Result>& choices, int64_t created,
                    const std::string& model_name) {
  Json list = Json::array();
  int64_t completion = 0, cached = 0;
  for (size_t c = 0; c < choices.size(); ++c) {
    const RequestOutput& o = choices[c].last;
    Json choice = {{"index", c},
                   {"logprobs", nullptr},
                   {"finish_reason", OpenAiFinishReason(o.finish_reason)},
                   {"stop_reason", o.stop_string.empty() ? Json(nullptr) : Json(o.stop_string)}};
    if (req.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", choices[c].text}, {"refusal", nullptr}};
    } else {
      choice["text"] = choices[c].text;
    }
    list.push_back(std::move(choice));
    completion += o.completion_tokens;
    cached += o.cached_tokens;
  }
  const int32_t prompt = choices[0].last.prompt_tokens;
  const std::string request_id = fmt::format("{}-{}", req.chat ? "chatcmpl" : "cmpl", index);
  const Json body = {{"id", request_id},
                     {"object", req.chat ? "chat.completion" : "text_completion"},
                     {"created", created},
                     {"model", req.model.empty() ? model_name : req.model},
                     {"choices", std::move(list)},
                     {"usage",
                      {{"prompt_tokens", prompt},
                       {"completion_tokens", completion},
                       {"total_tokens", prompt + completion},
                       {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
  return {{"id", fmt::format("batch_req_{}", index)},
          {"custom_id", req.custom_id},
          {"response", {{"status_code", 200}, {"request_id", request_id}, {"body", body}}},
          {"error", nullptr}};
}

// The OpenAI Batch API line `j` (it has "body"): checks method and url and
// returns the body's text (its key order kept) into *body_text; error text
// on bad input.
std::string ParseBatchEnvelope(const Json& j, const std::string& line, LineRequest* req, std::string* body_text) {
  for (const auto& [key, value] : j.items()) {
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
      return fmt::format("unknown field '{}' in an OpenAI batch line (custom_id, method, url, body)", key);
    }
  }
  if (j.contains("method") && j["method"] != "POST") return "'method' must be \"POST\"";
  if (!j.contains("url") || !j["url"].is_string()) return "an OpenAI batch line needs 'url'";
  const std::string url = j["url"].get<std::string>();
  if (url != "/v1/completions" && url != "/v1/chat/completions") {
    return fmt::format("'url' {} is not served here (/v1/completions or /v1/chat/completions)", url);
  }
  if (!j["body"].is_object()) return "'body' must be a JSON object";
  req->batch_api = true;
  req->chat = url == "/v1/chat/completions";
  if (req->chat != j["body"].contains("messages")) {
    return req->chat ? "a /v1/chat/completions body needs 'messages'" : "a /v1/completions body needs 'prompt'";
  }
  *body_text = DumpJson(ParseOrderedJson(line)["body"]);
  return {};
}

// The fields a line may carry; any other is refused (a typo such as
// "max_token" would otherwise be dropped silently).
constexpr const char* kKnownFields[] = {"prompt",
                                        "messages",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "n_predict",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "seed",
                                        "stop",
                                        "ignore_eos",
                                        "priority",
                                        "repetition_penalty",
                                        "repeat_penalty",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "n",
                                        "min_tokens",
                                        "custom_id",
                                        "model",
                                        "user",
                                        "grammar",
                                        "guided_grammar",
                                        "guided_choice",
                                        "response_format",
                                        "json_schema",
                                        "guided_json",
                                        "guided_regex",
                                        "lora"};

// LoRA adapters for one request (--lora / --lora-modules loaded them): its
// 'lora' [{"id", "scale"}] (the others off), else a 'model' that names an
// adapter (that one alone, at 1), else the adapters' default scales.
std::string ParseLoraSelection(const Json& j, const std::vector<const LoraAdapter*>& adapters, RequestParams* p) {
  const size_t n = adapters.size();
  if (j.contains("lora") && !j["lora"].is_null()) {
    const Json& l = j["lora"];
    if (!l.is_array()) return "'lora' must be a list of {\"id\", \"scale\"}";
    if (n == 0 && !l.empty()) return "'lora' names adapters, but none was loaded (--lora FILE)";
    p->lora_scales.assign(n, 0.0f);
    for (const Json& e : l) {
      if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || e["id"].get<int64_t>() < 0 ||
          e["id"].get<int64_t>() >= static_cast<int64_t>(n)) {
        return fmt::format("each 'lora' entry needs an 'id' in [0, {})", n);
      }
      const Json scale = e.value("scale", Json(1.0));
      if (!scale.is_number() || !std::isfinite(scale.get<double>())) return "a 'lora' entry's 'scale' must be a number";
      p->lora_scales[static_cast<size_t>(e["id"].get<int64_t>())] = scale.get<float>();
    }
    return {};
  }
  if (j.contains("model") && j["model"].is_string()) {
    for (size_t i = 0; i < n; ++i) {
      if (adapters[i]->name == j["model"].get<std::string>()) {
        p->lora_scales.assign(n, 0.0f);
        p->lora_scales[i] = 1.0f;
      }
    }
  }
  return {};
}

// Reads the fields of one request; error text on bad input.
// `line`: the request's text (JSON schemas keep their properties' order).
std::string ParseRequest(const Json& j, const std::string& line, const Tokenizer& tok,
                         const ChatTemplate& chat_template, int max_n, LineRequest* req) {
  if (!j.is_object()) return "not a JSON object";
  RequestParams* p = &req->params;
  {
    server::ApiError err;
    if (!server::CheckUnsupportedFields(j, j.contains("messages"), &err)) return err.message;
  }
  for (const auto& [key, value] : j.items()) {
    bool known = server::IsUnsupportedField(key);  // checked above: a no-op value
    for (const char* k : kKnownFields) known = known || key == k;
    if (!known) return fmt::format("unknown field '{}'", key);
  }
  auto num = [&](const char* k, auto* out) -> std::string {
    if (!j.contains(k) || j[k].is_null()) return {};
    if (!j[k].is_number()) return fmt::format("'{}' must be a number", k);
    *out = j[k].get<std::remove_pointer_t<decltype(out)>>();
    return {};
  };
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return "'prompt' must be a string";
    req->prompt = tok.Encode(j["prompt"].get<std::string>(), true, false);
  } else if (j.contains("messages")) {
    if (!j["messages"].is_array() || j["messages"].empty()) return "'messages' must be a non-empty array";
    std::vector<ChatMessage> msgs;
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string()) {
        return "each message needs a string 'role' and 'content'";
      }
      msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    auto ids = EncodeChat(tok, chat_template, msgs, true);
    if (!ids.ok()) return std::string(ids.status().message());
    req->prompt = std::move(ids).value();
  } else {
    return "needs 'prompt' or 'messages'";
  }
  {
    server::ApiError err;
    if (!server::ParseOutputConstraint(ParseOrderedJson(line), &p->grammar, &err)) return err.message;
  }
  std::string e;
  // max_tokens, or its other names (OpenAI chat, llama.cpp).
  const char* max_name = "max_tokens";
  for (const char* k : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (j.contains(k) && !j[k].is_null()) {
      max_name = k;
      break;
    }
  }
  if (!(e = num(max_name, &p->max_tokens)).empty()) return e;
  if (!(e = num("temperature", &p->sampling.temperature)).empty()) return e;
  if (!(e = num("top_p", &p->sampling.top_p)).empty()) return e;
  if (!(e = num("top_k", &p->sampling.top_k)).empty()) return e;
  if (!(e = num("min_p", &p->sampling.min_p)).empty()) return e;
  if (!(e = num(j.contains("repetition_penalty") ? "repetition_penalty" : "repeat_penalty",
                &p->sampling.repetition_penalty)).empty()) {
    return e;
  }
  if (!(e = num("presence_penalty", &p->sampling.presence_penalty)).empty()) return e;
  if (!(e = num("frequency_penalty", &p->sampling.frequency_penalty)).empty()) return e;
  if (!(e = num("priority", &p->priority)).empty()) return e;
  if (!(e = num("min_tokens", &p->min_tokens)).empty()) return e;
  if (j.contains("n") && !j["n"].is_null()) {
    if (!j["n"].is_number_integer() || j["n"].get<int64_t>() < 1 || j["n"].get<int64_t>() > max_n) {
      return fmt::format("'n' must be an integer in [1, {}] (--max-n)", max_n);
    }
    req->n = j["n"].get<int32_t>();
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return "'seed' must be an integer";
    p->sampling.seed = j["seed"].get<uint64_t>();
    p->sampling.has_seed = true;
  }
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean()) return "'ignore_eos' must be true or false";
    p->ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    if (j["stop"].is_string()) {
      p->stop.push_back(j["stop"].get<std::string>());
    } else if (j["stop"].is_array()) {
      for (const auto& s : j["stop"]) {
        if (!s.is_string()) return "'stop' must be a string or a list of strings";
        p->stop.push_back(s.get<std::string>());
      }
    } else {
      return "'stop' must be a string or a list of strings";
    }
  }
  if (j.contains("custom_id")) req->custom_id = j["custom_id"];
  if (j.contains(max_name) && !(std::string(max_name) == "n_predict" && p->max_tokens == -1) && p->max_tokens < 1) {
    return fmt::format("'{}' must be at least 1", max_name);
  }
  if (Status st = ValidateSamplingParams(p->sampling); !st.ok()) return st.message();
  return {};
}

int Generate(const GenerateArgs& a, const RuntimeOptions& rt_in) {
  if (a.input.empty() || a.output.empty()) return ReportError("usage: infera generate --input IN.jsonl --output OUT.jsonl");
  if (a.max_n < 1) return ReportError("--max-n must be at least 1");
  if (Status st = CheckOutputNotInput(a.output, {a.input, ModelPathOrDefault(a.model), a.tokenizer}); !st.ok()) {
    return ReportError(st);
  }
  auto session = ParallelSession::Start(a.parallel);
  if (!session.ok()) return ReportError(session.status());
  ParallelSession& ps = **session;
  const RuntimeOptions rt = ps.RankRuntime(rt_in, a.threads);
  const int threads = rt.threads;
  if (ps.rank() != 0) return ps.RunWorker(ModelPathOrDefault(a.model), rt);
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  EngineFlags ef = a.engine;
  if (std::string e = ResolveEngineFlags(&ef, threads); !e.empty()) return ReportError(e);
  auto input = ReadTextArg(a.input);
  if (!input.ok()) return ReportError(input.status());
  std::vector<std::string> lines;
  std::vector<size_t> line_numbers;  // 1-based, for messages
  {
    size_t pos = 0, number = 0;
    while (pos < input->size()) {
      size_t end = input->find('\n', pos);
      if (end == std::string::npos) end = input->size();
      std::string line = input->substr(pos, end - pos);
      ++number;
      if (line.find_first_not_of(" \t\r") != std::string::npos) {
        lines.push_back(std::move(line));
        line_numbers.push_back(number);
      }
      pos = end + 1;
    }
  }
  auto lm = LoadModelAndTokenizer(a.model, a.tokenizer, true, ForKernels(ps.load_options(), *kernels));
  if (Status st = ps.Ready(ModelPathOrDefault(a.model), lm.status(), *kernels, threads); !st.ok()) {
    return ReportError(st);
  }
  auto chat_template = ResolveChatTemplate(*lm->tokenizer, a.chat_template, a.chat_template_file);
  if (!chat_template.ok()) return ReportError(chat_template.status());
  auto draft = LoadDraftModel(ef.draft_model, ForKernels({}, *kernels), &ef.opts);
  if (!draft.ok()) return ReportError(draft.status());
  auto lora = LoadLoraAdapters(ef.lora, *lm->model, &ef.opts);
  if (!lora.ok()) return ReportError(lora.status());
  auto engine = Engine::Create(*lm->model, lm->tokenizer.get(), *kernels, ef.opts,
                               ps.RunnerFactory(*lm->model, *kernels, ef.opts.max_model_len));
  if (!engine.ok()) return ReportError(engine.status());
  Engine& eng = **engine;
  // Validate and queue every request before generating anything.
  struct Slot {
    size_t line;
    int32_t choice;
  };
  std::map<uint64_t, Slot> slot_of;
  std::vector<LineRequest> requests(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = fmt::format("{}: line {}", a.input == "-" ? "stdin" : a.input, line_numbers[i]);
    Json j = Json::parse(lines[i], nullptr, false);
    if (j.is_discarded()) return ReportError(where + ": not valid JSON");
    LineRequest& req = requests[i];
    if (j.is_object() && j.contains("body")) {
      std::string body_text;
      if (std::string e = ParseBatchEnvelope(j, lines[i], &req, &body_text); !e.empty()) {
        return ReportError(where + ": " + e);
      }
      const Json body = j["body"];
      if (std::string e = ParseRequest(body, body_text, *lm->tokenizer, *chat_template, a.max_n, &req); !e.empty()) {
        return ReportError(where + ": body: " + e);
      }
      if (j.contains("custom_id")) req.custom_id = j["custom_id"];
      if (body.contains("model") && body["model"].is_string()) req.model = body["model"].get<std::string>();
      if (std::string e = ParseLoraSelection(body, ef.opts.lora_adapters, &req.params); !e.empty()) {
        return ReportError(where + ": body: " + e);
      }
    } else if (std::string e = ParseRequest(j, lines[i], *lm->tokenizer, *chat_template, a.max_n, &req); !e.empty()) {
      return ReportError(where + ": " + e);
    } else if (std::string e2 = ParseLoraSelection(j, ef.opts.lora_adapters, &req.params); !e2.empty()) {
      return ReportError(where + ": " + e2);
    }
    for (int32_t c = 0; c < req.n; ++c) {
      RequestParams p = req.params;
      // Choices of a seeded request differ from each other yet reproduce.
      if (p.sampling.has_seed) p.sampling.seed += static_cast<uint64_t>(c);
      auto id = eng.Add(req.prompt, p);
      if (!id.ok()) return ReportError(where + ": " + id.status().message());
      slot_of[*id] = {i, c};
    }
  }
  auto out = OutputFile::Create(a.output);  // renamed over --output at the end
  if (!out.ok()) return ReportError(out.status());
  std::vector<std::vector<Result>> results(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) results[i].resize(requests[i].n);
  const size_t total = slot_of.size();
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0, last_shown = 0;
  uint64_t gen_tokens = 0;
  double alloc_slots = 0, held_tokens = 0;  // summed over steps: KV memory use
  while (eng.HasWork()) {
    const EngineStats before = eng.Stats();
    alloc_slots += static_cast<double>(before.kv_blocks_used) * before.kv_block_size;
    held_tokens += static_cast<double>(before.kv_tokens_held);
    for (RequestOutput& o : eng.Step()) {
      const Slot& slot = slot_of.at(o.id);
      Result& r = results[slot.line][slot.choice];
      r.text += o.text;
      gen_tokens += o.tokens.size();
      if (o.finished) {
        r.last = std::move(o);
        ++done;
      }
    }
    if (done != last_shown && (tty || done * 10 / total != last_shown * 10 / total || done == total)) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (tty) {
        const int width = 30, fill = static_cast<int>(done * width / total);
        std::fprintf(stderr, "\r[%s%s] %zu/%zu  %.1f tok/s", std::string(fill, '#').c_str(),
                     std::string(width - fill, '-').c_str(), done, total, gen_tokens / std::max(s, 1e-9));
      } else {
        std::fprintf(stderr, "generate: %zu/%zu done\n", done, total);
      }
      last_shown = done;
    }
  }
  if (tty && total > 0) std::fputc('\n', stderr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t prompt_tokens = 0, cached = 0;
  const int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // The model's name in the result objects, as serve names it by default.
  const std::string model_name = std::filesystem::path(ModelPathOrDefault(a.model)).stem().string();
  for (size_t i = 0; i < results.size(); ++i) {
    const std::vector<Result>& choices = results[i];
    const RequestOutput& first = choices[0].last;
    if (requests[i].batch_api) {
      Json line = BatchApiResult(requests[i], i, choices, created, model_name);
      if (Status st = (*out)->Write(DumpJson(line) + "\n"); !st.ok()) return ReportError(st);
      for (const Result& c : choices) cached += c.last.cached_tokens;
      prompt_tokens += static_cast<uint64_t>(first.prompt_tokens) * choices.size();
      continue;
    }
    Json j = {{"index", i}};
    if (!requests[i].custom_id.is_null()) j["custom_id"] = requests[i].custom_id;
    // The first choice at the top (the whole answer when n = 1), every choice in "choices".
    j["text"] = choices[0].text;
    j["finish_reason"] = FinishReasonName(first.finish_reason);
    Json list = Json::array();
    int64_t completion = 0, cached_here = 0;
    double e2e = 0;
    for (size_t c = 0; c < choices.size(); ++c) {
      const RequestOutput& o = choices[c].last;
      list.push_back({{"index", c}, {"text", choices[c].text}, {"finish_reason", FinishReasonName(o.finish_reason)}});
      completion += o.completion_tokens;
      cached_here += o.cached_tokens;
      e2e = std::max(e2e, o.e2e_seconds);
    }
    j["choices"] = std::move(list);
    j["usage"] = {{"prompt_tokens", first.prompt_tokens},
                  {"completion_tokens", completion},
                  {"total_tokens", first.prompt_tokens + completion},
                  {"prompt_tokens_details", {{"cached_tokens", cached_here}}}};
    j["timing"] = {{"queue_ms", 1e3 * first.queue_seconds}, {"ttft_ms", 1e3 * first.ttft_seconds}, {"e2e_ms", 1e3 * e2e}};
    if (Status st = (*out)->Write(DumpJson(j) + "\n"); !st.ok()) {
      return ReportError(st);
    }
    prompt_tokens += static_cast<uint64_t>(first.prompt_tokens) * choices.size();
    cached += cached_here;
  }
  if (Status st = (*out)->Commit(); !st.ok()) return ReportError(st);
  const EngineStats st = eng.Stats();
  std::fprintf(stderr,
               "generate: %zu requests in %.2f s (%zu sequences) | prompt %llu tokens (%llu from the prefix cache) | "
               "generated %llu tokens | %.1f generated tok/s, %.1f total tok/s | %llu steps, %llu preemptions | KV "
               "slots allocated but unused: %.1f %%\n",
               lines.size(), secs, total, static_cast<unsigned long long>(prompt_tokens),
               static_cast<unsigned long long>(cached), static_cast<unsigned long long>(gen_tokens),
               gen_tokens / std::max(secs, 1e-9), (prompt_tokens + gen_tokens) / std::max(secs, 1e-9),
               static_cast<unsigned long long>(st.steps), static_cast<unsigned long long>(st.num_preemptions),
               alloc_slots > 0 ? 100.0 * (1.0 - held_tokens / alloc_slots) : 0.0);
  if (st.spec_draft_tokens > 0) {
    std::fprintf(stderr, "generate: speculative: %llu drafted, %llu accepted (%.1f %%)\n",
                 static_cast<unsigned long long>(st.spec_draft_tokens),
                 static_cast<unsigned long long>(st.spec_accepted_tokens),
                 100.0 * st.spec_accepted_tokens / st.spec_draft_tokens);
  }
  return kExitOk;
}

}  // namespace

CommandFn RegisterGenerate(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("-i,--input", a->input,
                 "JSONL: one request per line (prompt or messages, max_tokens, n, temperature, ...); - reads stdin")
      ->required();
  app.add_option("-o,--output", a->output, "JSONL: one result per input line, in input order")->required();
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use; more is capped)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file (llama2.c checkpoints)");
  app.add_option("--chat-template", a->chat_template, kChatTemplateHelp);
  app.add_option("--chat-template-file", a->chat_template_file, "a Jinja chat template to use instead of the model's");
  app.add_option("--max-n", a->max_n, "largest n (choices per line) accepted");
  AddEngineFlags(app, &a->engine);
  AddParallelFlags(app, &a->parallel);
  return [a, rt]() { return Generate(*a, rt); };
}

}  // namespace infera::cli
