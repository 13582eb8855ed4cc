// The OpenAI-compatible API on top of the HTTP layer: routes, auth, request
// validation, the chat template, tokenization, and the conversation with the
// engine (through AsyncEngine's C++ API only).
//
// Lifecycle: constructed before the model is loaded (every model route then
// answers 503, /health and /ready say "loading"); SetReady attaches the
// engine; SetDraining turns /ready to 503 and refuses new work while
// in-flight requests finish (/health stays 200: the process is alive).
// /health is liveness (503 only while loading or failed), /ready readiness
// (503 also while draining or with more than ready_max_waiting waiting).
//
// Thread-safety: Handle may run on several I/O threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/infill.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "server/server_metrics.h"
#include "server/tracing.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infera::server {

struct ApiServerOptions {
  std::string served_model_name = "infera";
  std::string api_key;          // "": no authentication
  int32_t max_n = 16;           // largest n (choices per prompt)
  int32_t max_queue = 256;      // waiting requests beyond this: 429
  int32_t ready_max_waiting = 256;  // waiting requests beyond this: /ready 503 "overloaded"
  bool context_shift = false;   // as the engine was created with
  double log_sample = 1.0;      // fraction of successful requests given an info log line
  bool log_prompts = false;     // put prompts and outputs in those lines
  OtlpExporter* exporter = nullptr;  // spans go here when set (owned by the caller)
  // Browser origins allowed to call the API (CORS): exact origins such as
  // "https://app.example.com", or "*" for any. Empty: no CORS headers, and
  // browsers' cross-origin preflights are refused (403).
  std::vector<std::string> cors_origins;
  std::string version, commit;  // answered by GET /version
  bool web_ui = true;           // the chat page at GET /
  bool spm_infill = false;      // /infill puts the suffix first (llama-server's --spm-infill)
  bool trust_request_chat_template = false;  // a request's 'chat_template' replaces the model's
  // Responses API objects kept in memory for GET /v1/responses/{id} and
  // previous_response_id (least recently used dropped beyond; 0: none kept).
  size_t responses_store = 1000;
};

// What the API needs of a loaded model; owned by the caller, outliving the
// ApiServer's use of it.
struct ApiBackend {
  AsyncEngine* engine = nullptr;  // its step observer is set by SetReady
  const Tokenizer* tokenizer = nullptr;
  ChatTemplate chat_template;
  // How replies write tool calls: --tool-call-parser (explicit), else
  // recognized from the chat template.
  ToolCallFormat tool_format = ToolCallFormat::kJson;
  bool tool_format_explicit = false;
  uint64_t model_bytes = 0;
  BuildInfo build;
  Pooling pooling = Pooling::kLast;  // /v1/embeddings (--pooling, or the model's metadata)
  int32_t n_embd = 0;                // the model's embedding size
  // The engine's LoRA slots: the adapters it was created with
  // (EngineOptions::lora_adapters, in that order: their names, which a
  // request's model may name, files and starting scales), then one entry
  // per EngineOptions::max_runtime_loras slot (runtime, empty name: free).
  struct Lora {
    std::string name, path;
    float scale = 1.0f;
    bool runtime = false;
  };
  std::vector<Lora> lora;
  // Loads the adapter at `path` for the served model, named `name`
  // (POST /v1/load_lora_adapter; called on an HTTP thread). Set with
  // runtime slots.
  std::function<StatusOr<std::shared_ptr<const LoraAdapter>>(const std::string& name, const std::string& path)>
      load_lora;
};

// The routes an API key guards, for help texts: "/v1/completions, ...".
std::string GuardedRoutes();

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions opts);

  // The model is loaded: model routes start answering.
  void SetReady(const ApiBackend& backend);
  // Shutting down: /health 503, new completions 503.
  void SetDraining();
  // Cannot serve any more (a split model's group failed): /health 503
  // "failed", new completions 503.
  void SetFailed();

  void Handle(HttpRequest req, std::shared_ptr<Responder> resp);
  // A request the HTTP layer refused before it reached Handle (413, malformed
  // HTTP): counted in infera_http_requests_total and logged like the others.
  void HttpLayerError(int status, const std::string& target, const std::string& message);
  ServerMetrics& metrics() { return metrics_; }

 private:
  enum class State { kLoading, kReady, kDraining, kFailed };
  bool Authorized(const HttpRequest& req) const;
  // The Access-Control-Allow-Origin value for the request's Origin header
  // ("" when it sent none or that origin is not allowed).
  std::string AllowedOrigin(const HttpRequest& req) const;
  void HandleOptions(const HttpRequest& req, const std::shared_ptr<Responder>& resp, uint8_t route_methods) const;
  void HandleVersion(const std::shared_ptr<Responder>& resp) const;
  // POST /v1/embeddings (native: llama-server's /embedding).
  void HandleEmbeddings(const HttpRequest& req, const std::shared_ptr<Responder>& resp, bool native);
  // GET /: the web chat page (web/chat.html), or 404 with --no-web-ui.
  void HandleWebUi(const std::shared_ptr<Responder>& resp) const;
  // GET /props (llama-server's): context, the completion defaults, slots,
  // chat template. POST /apply-template: a chat's rendered prompt.
  void HandleProps(const std::shared_ptr<Responder>& resp) const;
  void HandleApplyTemplate(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const;
  // Which API a completion request came through: OpenAI's; llama-server's
  // /completion or /infill (the request's prompt made by TakeInfillPrompt);
  // Anthropic's /v1/messages (translated to a chat request, anthropic.h);
  // OpenAI's /v1/responses (a chat request, `turn` its translation,
  // responses_api.h).
  enum class CompletionApi { kOpenAi, kNative, kInfill, kAnthropic, kResponses };
  void HandleCompletion(const HttpRequest& req, const std::shared_ptr<Responder>& resp, bool chat,
                        const TraceContext& trace, const std::string& request_id,
                        CompletionApi api = CompletionApi::kOpenAi,
                        std::shared_ptr<const ResponsesTurn> turn = nullptr);
  // /v1/responses and /v1/responses/... (api_server_responses.cc): creates
  // (request_id: the response's id), counts input tokens, reads, lists input
  // items of, deletes stored responses.
  void HandleResponses(HttpRequest& req, const std::shared_ptr<Responder>& resp, const TraceContext& trace,
                       const std::string& request_id);
  // POST /v1/messages/count_tokens: {"input_tokens": the rendered prompt's tokens}.
  void HandleCountTokens(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const;
  // POST /infill: replaces the body's input_prefix / input_suffix /
  // input_extra / prompt with the FIM prompt's token ids (infill.h). False:
  // answered with the error (400; 501 for a model without FIM tokens).
  bool TakeInfillPrompt(HttpRequest* req, const std::shared_ptr<Responder>& resp) const;
  // /v1/completions with OpenAI's suffix: the prompt (one string, the text
  // before) and the suffix become the FIM prompt /infill makes. False:
  // answered with the error (400, also for a model without FIM tokens).
  bool TakeSuffixPrompt(HttpRequest* req, const std::shared_ptr<Responder>& resp) const;
  // Both: the FIM prompt's ids, with a batch of min(2048, context / 2) and
  // room for n_predict tokens (infill.h).
  StatusOr<std::vector<int32_t>> InfillPromptIds(const InfillRequest& infill, int64_t n_predict) const;
  static const char* StateName(State state);  // "loading", "ready", "draining", "failed"
  void HandleHealth(const std::shared_ptr<Responder>& resp, State state) const;
  void HandleReady(const std::shared_ptr<Responder>& resp, State state) const;
  void HandleLogLevel(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  void HandleSession(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  bool Sampled(const std::string& request_id) const;
  // Limits and tokenizer for parsing requests (after SetReady).
  ParseContext MakeParseContext() const;
  void HandleModels(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const;
  void HandleTokenize(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const;
  void HandleDetokenize(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const;
  void HandleMetrics(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  // GET /lora-adapters: [{"id", "name", "path", "scale"}]; POST: sets the
  // scales requests get by default ([{"id", "scale"}], the others 0), as
  // llama-server does.
  void HandleLoraAdapters(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  // vLLM's runtime LoRA updating: POST /v1/load_lora_adapter
  // {"lora_name", "lora_path"} loads an adapter into a free runtime slot;
  // POST /v1/unload_lora_adapter {"lora_name"} stops serving it (requests
  // running with it finish first). 404 without runtime slots.
  void HandleLoadLora(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  void HandleUnloadLora(const HttpRequest& req, const std::shared_ptr<Responder>& resp);
  // A request to `model` (as sent) without its own scales: the adapter
  // `model` names (*adapter, at 1, the others off), else the server's
  // current scales (*scales; empty without adapters).
  void LoraFor(const std::string& model, std::vector<float>* scales, std::string* adapter) const;
  // Whether `model` (as sent) is served here: "" , the served name or an adapter's.
  bool ServesModel(const std::string& model) const;

  const ApiServerOptions opts_;
  ServerMetrics metrics_;
  std::atomic<State> state_{State::kLoading};
  ApiBackend backend_;  // written once before state_ becomes kReady
  const int64_t created_;
  std::atomic<uint64_t> next_request_{1};
  uint64_t id_salt_ = 0;  // random per process: response ids differ across restarts
  std::unique_ptr<ResponsesStore> responses_store_;  // never null
  // LoRA slots as the requests see them (guarded by lora_mu_): backend_.lora
  // as adapters load and unload at run time (an unloaded one's entry is free
  // at once here; its engine slot when its requests end), the scales
  // requests get by default, and the names being loaded now.
  mutable std::mutex lora_mu_;
  std::vector<ApiBackend::Lora> lora_;
  std::vector<float> lora_scales_;
  std::vector<std::string> lora_loading_;
};

}  // namespace infera::server
