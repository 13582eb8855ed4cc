// infera generate --input prompts.jsonl --output out.jsonl: offline batch
// generation through the serving engine. One JSON object per input line
// (prompt or messages, plus sampling fields); one output line per input, in
// input order, shaped like an OpenAI completion choice plus usage.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "infera/engine.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace infera::cli {
namespace {

struct GenerateArgs {
  std::string model, input, output, tokenizer;
  int threads = 0;
  EngineFlags engine;
};

using Json = nlohmann::json;

// Reads the fields of one request; error text on bad input.
std::string ParseRequest(const Json& j, const Tokenizer& tok, std::vector<int32_t>* prompt, RequestParams* p) {
  if (!j.is_object()) return "not a JSON object";
  auto num = [&](const char* k, auto* out) -> std::string {
    if (!j.contains(k) || j[k].is_null()) return {};
    if (!j[k].is_number()) return fmt::format("'{}' must be a number", k);
    *out = j[k].get<std::remove_pointer_t<decltype(out)>>();
    return {};
  };
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return "'prompt' must be a string";
    *prompt = tok.Encode(j["prompt"].get<std::string>(), true, false);
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
    bool known = false;
    const ChatFormat f = DetectChatFormat(tok.vocab().chat_template, &known);
    *prompt = EncodeChat(tok, f, msgs, true);
  } else {
    return "needs 'prompt' or 'messages'";
  }
  std::string e;
  if (!(e = num("max_tokens", &p->max_tokens)).empty()) return e;
  if (!(e = num("temperature", &p->sampling.temperature)).empty()) return e;
  if (!(e = num("top_p", &p->sampling.top_p)).empty()) return e;
  if (!(e = num("top_k", &p->sampling.top_k)).empty()) return e;
  if (!(e = num("min_p", &p->sampling.min_p)).empty()) return e;
  if (!(e = num("repetition_penalty", &p->sampling.repetition_penalty)).empty()) return e;
  if (!(e = num("presence_penalty", &p->sampling.presence_penalty)).empty()) return e;
  if (!(e = num("frequency_penalty", &p->sampling.frequency_penalty)).empty()) return e;
  if (!(e = num("priority", &p->priority)).empty()) return e;
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
  if (j.contains("max_tokens") && p->max_tokens < 1) return "'max_tokens' must be at least 1";
  if (Status st = ValidateSamplingParams(p->sampling); !st.ok()) return st.message();
  return {};
}

int Generate(const GenerateArgs& a, const RuntimeOptions& rt_in) {
  if (a.input.empty() || a.output.empty()) return ReportError("usage: infera generate --input IN.jsonl --output OUT.jsonl");
  EngineFlags ef = a.engine;
  if (std::string e = ResolveEngineFlags(&ef, a.threads); !e.empty()) return ReportError(e);
  std::ifstream in(a.input);
  if (!in) return ReportError(a.input + ": cannot open");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  RuntimeOptions rt = rt_in;
  rt.threads = a.threads;
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, a.tokenizer, true);
  if (!lm.ok()) return ReportError(lm.status());
  auto engine = Engine::Create(*lm->model, lm->tokenizer.get(), *kernels, ef.opts);
  if (!engine.ok()) return ReportError(engine.status());
  Engine& eng = **engine;
  // Validate and queue every request before generating anything.
  std::map<uint64_t, size_t> index_of;
  for (size_t i = 0; i < lines.size(); ++i) {
    Json j = Json::parse(lines[i], nullptr, false);
    if (j.is_discarded()) return ReportError(fmt::format("{}: line {}: not valid JSON", a.input, i + 1));
    std::vector<int32_t> prompt;
    RequestParams p;
    if (std::string e = ParseRequest(j, *lm->tokenizer, &prompt, &p); !e.empty()) {
      return ReportError(fmt::format("{}: line {}: {}", a.input, i + 1, e));
    }
    auto id = eng.Add(std::move(prompt), p);
    if (!id.ok()) return ReportError(fmt::format("{}: line {}: {}", a.input, i + 1, id.status().message()));
    index_of[*id] = i;
  }
  std::ofstream out(a.output, std::ios::trunc);
  if (!out) return ReportError(a.output + ": cannot open for writing");
  struct Result {
    std::string text;      // accumulated over the steps
    RequestOutput last;    // the final output: finish reason, usage, timing
  };
  std::vector<Result> results(lines.size());
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
      Result& r = results[index_of.at(o.id)];
      r.text += o.text;
      gen_tokens += o.tokens.size();
      if (o.finished) {
        r.last = std::move(o);
        ++done;
      }
    }
    if (done != last_shown && (tty || done * 10 / lines.size() != last_shown * 10 / lines.size() || done == lines.size())) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (tty) {
        const int width = 30, fill = static_cast<int>(done * width / lines.size());
        std::fprintf(stderr, "\r[%s%s] %zu/%zu  %.1f tok/s", std::string(fill, '#').c_str(),
                     std::string(width - fill, '-').c_str(), done, lines.size(), gen_tokens / std::max(s, 1e-9));
      } else {
        std::fprintf(stderr, "generate: %zu/%zu done\n", done, lines.size());
      }
      last_shown = done;
    }
  }
  if (tty && !lines.empty()) std::fputc('\n', stderr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t prompt_tokens = 0, cached = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const RequestOutput& o = r.last;
    Json j = {{"index", i},
              {"text", r.text},
              {"finish_reason", FinishReasonName(o.finish_reason)},
              {"usage", {{"prompt_tokens", o.prompt_tokens},
                         {"completion_tokens", o.completion_tokens},
                         {"total_tokens", o.prompt_tokens + o.completion_tokens},
                         {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}}},
              {"timing", {{"queue_ms", 1e3 * o.queue_seconds}, {"ttft_ms", 1e3 * o.ttft_seconds},
                          {"e2e_ms", 1e3 * o.e2e_seconds}}}};
    out << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    prompt_tokens += o.prompt_tokens;
    cached += o.cached_tokens;
  }
  out.close();
  if (!out) return ReportError(a.output + ": write failed");
  const EngineStats st = eng.Stats();
  std::fprintf(stderr,
               "generate: %zu requests in %.2f s | prompt %llu tokens (%llu from the prefix cache) | generated %llu "
               "tokens | %.1f generated tok/s, %.1f total tok/s | %llu steps, %llu preemptions | KV slots "
               "allocated but unused: %.1f %%\n",
               lines.size(), secs, static_cast<unsigned long long>(prompt_tokens), static_cast<unsigned long long>(cached),
               static_cast<unsigned long long>(gen_tokens), gen_tokens / std::max(secs, 1e-9),
               (prompt_tokens + gen_tokens) / std::max(secs, 1e-9), static_cast<unsigned long long>(st.steps),
               static_cast<unsigned long long>(st.num_preemptions),
               alloc_slots > 0 ? 100.0 * (1.0 - held_tokens / alloc_slots) : 0.0);
  return kExitOk;
}

}  // namespace

CommandFn RegisterGenerate(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("--input", a->input, "JSONL: one request per line (prompt or messages, max_tokens, temperature, ...)")
      ->required();
  app.add_option("--output", a->output, "JSONL: one result per input line, in input order")->required();
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file (llama2.c checkpoints)");
  AddEngineFlags(app, &a->engine);
  return [a, rt]() { return Generate(*a, rt); };
}

}  // namespace infera::cli
