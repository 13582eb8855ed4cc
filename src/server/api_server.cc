#include "server/api_server.h"

#include <algorithm>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/logging.h"
#include "server/anthropic.h"
#include "server/api_responses.h"
#include "server/completion_job.h"
#include "server/embeddings.h"
#include "server/openai_request.h"
#include "web_chat_page.h"  // generated from web/chat.html

namespace infera::server {

using nlohmann::json;

namespace {

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Equal strings, in time that depends only on their lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

ApiServer::ApiServer(ApiServerOptions opts)
    : opts_(std::move(opts)),
      created_(UnixSeconds()),
      responses_store_(std::make_unique<ResponsesStore>(opts_.responses_store)) {
  metrics::Gauge& stored =
      metrics_.registry()
          .AddGauge("infera_responses_stored", "Responses API objects kept in memory (--responses-store)")
          .Get();
  metrics_.registry().AddCollector([this, &stored] { stored.Set(static_cast<double>(responses_store_->size())); });
  metrics::Gauge& adapters =
      metrics_.registry()
          .AddGauge("infera_lora_adapters_loaded",
                    "LoRA adapters served (given at start and loaded at run time; not those being unloaded)")
          .Get();
  metrics_.registry().AddCollector([this, &adapters] {
    std::lock_guard<std::mutex> lock(lora_mu_);
    adapters.Set(static_cast<double>(
        std::count_if(lora_.begin(), lora_.end(), [](const ApiBackend::Lora& l) { return !l.name.empty(); })));
  });
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void ApiServer::SetReady(const ApiBackend& backend) {
  backend_ = backend;
  {
    std::lock_guard<std::mutex> lock(lora_mu_);
    lora_ = backend_.lora;
    lora_scales_.clear();
    for (const ApiBackend::Lora& l : backend_.lora) lora_scales_.push_back(l.runtime ? 0.0f : l.scale);
  }
  backend_.engine->SetStepObserver([this](const EngineStats& s) { metrics_.EngineStep(s.last_step_tokens); });
  metrics_.AttachEngine(backend_.engine, backend_.model_bytes, backend_.build);
  state_.store(State::kReady, std::memory_order_release);
}

void ApiServer::SetDraining() {
  State s = State::kReady;
  // (A failed server stays failed.)
  if (!state_.compare_exchange_strong(s, State::kDraining)) {
    s = State::kLoading;
    state_.compare_exchange_strong(s, State::kDraining);
  }
}
void ApiServer::SetFailed() { state_.store(State::kFailed, std::memory_order_release); }

bool ApiServer::Authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string auth = req.Header("authorization");
  const std::string prefix = "Bearer ";
  // Anthropic's clients send the key as x-api-key.
  const std::string given =
      auth.compare(0, prefix.size(), prefix) == 0 ? auth.substr(prefix.size()) : req.Header("x-api-key");
  return ConstantTimeEquals(given, opts_.api_key);
}

namespace {

// Every response passes here: it is counted by endpoint and status, carries
// the trace context and request id in its headers, and a failure is logged
// (4xx warn, 5xx error: never sampled away).
class RequestResponder : public Responder {
 public:
  RequestResponder(std::shared_ptr<Responder> inner, ServerMetrics* metrics, std::string endpoint, TraceContext trace,
                   std::string request_id, std::string allow_origin, bool anthropic_errors)
      : anthropic_errors_(anthropic_errors),
        inner_(std::move(inner)),
        metrics_(metrics),
        endpoint_(std::move(endpoint)),
        trace_(std::move(trace)),
        allow_origin_(std::move(allow_origin)),
        request_id_(std::move(request_id)) {}
  void Respond(int status, std::string content_type, std::string body, Headers extra) override {
    metrics_->HttpRequest(endpoint_, status);
    if (status >= 400) {
      std::string message = body;
      auto j = ParseJson(body);
      if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) message = j["error"].value("message", body);
      LogEvent(status >= 500 ? LogLevel::kError : LogLevel::kWarn, "request failed",
               {Field("request_id", request_id_), Field("trace_id", trace_.trace_id), Field("endpoint", endpoint_),
                Field("status", static_cast<int64_t>(status)), Field("error", message)});
    } else {
      LogEvent(LogLevel::kDebug, "request",
               {Field("request_id", request_id_), Field("trace_id", trace_.trace_id), Field("endpoint", endpoint_),
                Field("status", static_cast<int64_t>(status))});
    }
    AddHeaders(&extra);
    if (status >= 400 && anthropic_errors_) body = AnthropicErrorBody(status, body);
    inner_->Respond(status, std::move(content_type), std::move(body), std::move(extra));
  }
  void BeginStream(int status, std::string content_type, Headers extra) override {
    metrics_->HttpRequest(endpoint_, status);
    AddHeaders(&extra);
    inner_->BeginStream(status, std::move(content_type), std::move(extra));
  }
  void Send(std::string data) override { inner_->Send(std::move(data)); }
  void End() override { inner_->End(); }
  void OnDisconnect(std::function<void()> fn) override { inner_->OnDisconnect(std::move(fn)); }

 private:
  void AddHeaders(Headers* h) const {
    h->emplace_back("traceparent", trace_.Traceparent());
    h->emplace_back("X-Request-Id", request_id_);
    if (!allow_origin_.empty()) {
      h->emplace_back("Access-Control-Allow-Origin", allow_origin_);
      h->emplace_back("Access-Control-Expose-Headers", "X-Request-Id, traceparent, Retry-After");
      h->emplace_back("Vary", "Origin");
    }
  }
  const bool anthropic_errors_;  // errors in Anthropic's shape (/v1/messages)
  const std::shared_ptr<Responder> inner_;
  ServerMetrics* const metrics_;
  const std::string endpoint_;
  const TraceContext trace_;
  const std::string allow_origin_;
  const std::string request_id_;
};

// The routes: path (or path prefix), methods, whether the API key applies,
// and the endpoint label of their metrics.
// HEAD is answered wherever GET is (the HTTP layer drops the body); OPTIONS
// on every route.
constexpr uint8_t kGet = 1, kPost = 2, kDelete = 4;
struct Route {
  const char* path;
  bool prefix;
  uint8_t methods;
  bool auth;
  const char* label;
};
constexpr Route kRoutes[] = {
    {"/", false, kGet, false, "/"},
    {"/health", false, kGet, false, "/health"},
    {"/version", false, kGet, false, "/version"},
    {"/ready", false, kGet, false, "/ready"},
    {"/metrics", false, kGet, false, "/metrics"},
    {"/v1/completions", false, kPost, true, "/v1/completions"},
    // llama-server's own completion API (CompletionSpec::native).
    {"/completion", false, kPost, true, "/completion"},
    {"/completions", false, kPost, true, "/completion"},
    {"/infill", false, kPost, true, "/infill"},
    {"/v1/chat/completions", false, kPost, true, "/v1/chat/completions"},
    {"/v1/embeddings", false, kPost, true, "/v1/embeddings"},
    // Anthropic's Messages API (anthropic.h).
    {"/v1/messages", false, kPost, true, "/v1/messages"},
    {"/v1/messages/count_tokens", false, kPost, true, "/v1/messages/count_tokens"},
    // OpenAI's Responses API (responses_api.h).
    {"/v1/responses", false, kPost, true, "/v1/responses"},
    {"/v1/responses/input_tokens", false, kPost, true, "/v1/responses/input_tokens"},
    {"/v1/responses/", true, kGet | kPost | kDelete, true, "/v1/responses/{id}"},
    // llama-server's own embedding API (EmbeddingSpec::native).
    {"/embedding", false, kPost, true, "/embedding"},
    {"/embeddings", false, kPost, true, "/embedding"},
    {"/v1/models", false, kGet, true, "/v1/models"},
    {"/v1/models/", true, kGet, true, "/v1/models/{id}"},
    {"/tokenize", false, kPost, true, "/tokenize"},
    {"/props", false, kGet, true, "/props"},
    {"/apply-template", false, kPost, true, "/apply-template"},
    {"/lora-adapters", false, kGet | kPost, true, "/lora-adapters"},
    // vLLM's runtime LoRA updating (serve --max-runtime-loras).
    {"/v1/load_lora_adapter", false, kPost, true, "/v1/load_lora_adapter"},
    {"/v1/unload_lora_adapter", false, kPost, true, "/v1/unload_lora_adapter"},
    {"/detokenize", false, kPost, true, "/detokenize"},
    {"/admin/log-level", false, kGet | kPost, true, "/admin/log-level"},
    {"/v1/sessions/", true, kPost | kDelete, true, "/v1/sessions/{id}"},
};

// "GET, HEAD, POST, OPTIONS": the Allow header of a route.
std::string AllowedMethods(uint8_t methods) {
  std::string out;
  auto add = [&out](const char* m) { out += out.empty() ? m : std::string(", ") + m; };
  if (methods & kGet) {
    add("GET");
    add("HEAD");
  }
  if (methods & kPost) add("POST");
  if (methods & kDelete) add("DELETE");
  add("OPTIONS");
  return out;
}

const Route* FindRoute(const std::string& path) {
  for (const Route& r : kRoutes) {
    if (r.prefix ? path.rfind(r.path, 0) == 0 : path == r.path) return &r;
  }
  return nullptr;
}

}  // namespace

std::string GuardedRoutes() {
  std::string out;
  for (const Route& r : kRoutes) {
    if (r.auth) out += fmt::format("{}{}", out.empty() ? "" : ", ", r.label);
  }
  return out;
}

void ApiServer::HttpLayerError(int status, const std::string& target, const std::string& message) {
  const Route* route = FindRoute(target.substr(0, target.find('?')));
  const char* endpoint = route ? route->label : "other";
  metrics_.HttpRequest(endpoint, status);
  const std::string request_id = fmt::format("req-{:016x}{:08x}", id_salt_, next_request_.fetch_add(1));
  LogEvent(status >= 500 ? LogLevel::kError : LogLevel::kWarn, "request failed",
           {Field("request_id", request_id), Field("endpoint", endpoint), Field("status", static_cast<int64_t>(status)),
            Field("error", message)});
}

void ApiServer::Handle(HttpRequest req, std::shared_ptr<Responder> raw_resp) {
  const TraceContext trace = TraceContext::FromHeader(req.Header("traceparent"));
  const std::string& path = req.path;
  const bool chat = path == "/v1/chat/completions";
  // Completions are known by their response id; other requests get one too.
  const char* id_kind = chat                        ? "chatcmpl"
                        : path == "/v1/completions" ? "cmpl"
                        : path == "/v1/messages"    ? "msg"
                        : path == "/v1/responses"   ? "resp"
                                                    : "req";
  // (Responses' ids are resp_..., as OpenAI's.)
  const std::string request_id = fmt::format("{}{}{:016x}{:08x}", id_kind, path == "/v1/responses" ? '_' : '-',
                                             id_salt_, next_request_.fetch_add(1));
  const Route* route = FindRoute(path);
  auto resp = std::make_shared<RequestResponder>(std::move(raw_resp), &metrics_, route ? route->label : "other", trace,
                                                 request_id, AllowedOrigin(req),
                                                 /*anthropic_errors=*/path.rfind("/v1/messages", 0) == 0);
  if (route == nullptr) {
    return SendError(resp, Error(404, fmt::format("no route {} {}", req.method, path), "invalid_request_error",
                                 "not_found"));
  }
  if (req.method == "OPTIONS") return HandleOptions(req, resp, route->methods);
  const uint8_t method = req.method == "GET" || req.method == "HEAD" ? kGet
                         : req.method == "POST"                     ? kPost
                         : req.method == "DELETE"                   ? kDelete
                                                                    : 0;
  if ((route->methods & method) == 0) {
    return SendError(resp, Error(405, fmt::format("{} does not accept {}", path, req.method), "invalid_request_error",
                                 "method_not_allowed"),
                     {{"Allow", AllowedMethods(route->methods)}});
  }
  if (route->auth && !Authorized(req)) {
    return SendError(resp, Error(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY'.",
                                 "invalid_request_error", "invalid_api_key"));
  }
  const State state = state_.load(std::memory_order_acquire);
  if (path == "/") return HandleWebUi(resp);
  if (path == "/health") return HandleHealth(resp, state);
  if (path == "/version") return HandleVersion(resp);
  if (path == "/ready") return HandleReady(resp, state);
  if (path == "/metrics") return HandleMetrics(req, resp);
  if (path == "/admin/log-level") return HandleLogLevel(req, resp);
  if (state == State::kLoading) {
    return SendError(resp, Error(503, "the model is loading", "service_unavailable", "model_loading"),
                     {{"Retry-After", "5"}});
  }
  if (path.rfind("/v1/models", 0) == 0) return HandleModels(req, resp);
  if (path == "/tokenize") return HandleTokenize(req, resp);
  if (path == "/props") return HandleProps(resp);
  if (path == "/apply-template") return HandleApplyTemplate(req, resp);
  if (path == "/lora-adapters") return HandleLoraAdapters(req, resp);
  if (path.rfind("/v1/sessions/", 0) == 0) return HandleSession(req, resp);
  if (path == "/detokenize") return HandleDetokenize(req, resp);
  // Stored responses are read and deleted while draining too.
  const bool create_response =
      req.method == "POST" && (path == "/v1/responses" || path == "/v1/responses/input_tokens");
  if (path.rfind("/v1/responses/", 0) == 0 && !create_response) return HandleResponses(req, resp, trace, request_id);
  if (state == State::kDraining) {
    // A balancer retries this on another replica (nothing was processed).
    return SendError(resp, Error(503, "the server is shutting down", "service_unavailable", "shutting_down"),
                     {{"Retry-After", "1"}});
  }
  if (state == State::kFailed) {
    return SendError(resp, Error(503, "the server failed and is restarting", "service_unavailable", "failed"));
  }
  // (Not while draining: the engine's loop may stop before a task posted then runs.)
  if (path == "/v1/load_lora_adapter") return HandleLoadLora(req, resp);
  if (path == "/v1/unload_lora_adapter") return HandleUnloadLora(req, resp);
  if (path == "/v1/embeddings") return HandleEmbeddings(req, resp, /*native=*/false);
  if (path == "/embedding" || path == "/embeddings") return HandleEmbeddings(req, resp, /*native=*/true);
  if (path == "/infill") {
    // The prompt made from input_prefix / input_suffix / input_extra, then
    // a /completion request with it.
    if (!TakeInfillPrompt(&req, resp)) return;
    return HandleCompletion(req, resp, false, trace, request_id, CompletionApi::kInfill);
  }
  // OpenAI's suffix (text after the insertion): the prompt becomes a FIM prompt.
  if (path == "/v1/completions" && req.body.find("suffix") != std::string::npos && !TakeSuffixPrompt(&req, resp))
    return;
  if (path == "/v1/messages" || path == "/v1/messages/count_tokens") {
    // Anthropic's Messages API: as a chat completion request.
    const bool count = path == "/v1/messages/count_tokens";
    ApiError err;
    std::string chat_body;
    if (!AnthropicToChatRequest(req.body, count, &chat_body, &err)) return SendError(resp, err);
    req.body = std::move(chat_body);
    if (count) return HandleCountTokens(req, resp);
    return HandleCompletion(req, resp, true, trace, request_id, CompletionApi::kAnthropic);
  }
  if (create_response) return HandleResponses(req, resp, trace, request_id);
  const bool native = path == "/completion" || path == "/completions";
  HandleCompletion(req, resp, chat, trace, request_id, native ? CompletionApi::kNative : CompletionApi::kOpenAi);
}

void ApiServer::HandleEmbeddings(const HttpRequest& req, const std::shared_ptr<Responder>& resp, bool native) {
  EmbeddingLimits limits;
  limits.max_model_len = backend_.engine->max_model_len();
  limits.n_vocab = backend_.engine->n_vocab();
  limits.n_embd = backend_.n_embd;
  EmbeddingSpec spec;
  ApiError err;
  if (!ParseEmbeddingRequest(req.body, *backend_.tokenizer, limits, &spec, &err)) return SendError(resp, err);
  if (native && spec.base64) {
    return SendError(resp, BadValue("encoding_format", "/embedding returns floats; base64 is /v1/embeddings'"));
  }
  spec.native = native;
  if (!ServesModel(spec.model)) {
    return SendError(resp, Error(404,
                                 fmt::format("The model `{}` does not exist (this server serves `{}`).", spec.model,
                                             opts_.served_model_name),
                                 "invalid_request_error", "model_not_found", "model"));
  }
  LoraFor(spec.model, &spec.lora_scales, &spec.lora_adapter);
  if (backend_.engine->Stats().num_waiting + static_cast<int64_t>(spec.inputs.size()) > opts_.max_queue) {
    return SendError(resp,
                     Error(429, fmt::format("too many requests waiting (limit {}); retry later", opts_.max_queue),
                           "rate_limit_error", "queue_full"),
                     {{"Retry-After", "1"}});
  }
  std::string answer_model = spec.model.empty() ? opts_.served_model_name : spec.model;
  auto job =
      std::make_shared<EmbeddingJob>(std::move(spec), backend_.pooling, resp, backend_.engine, std::move(answer_model));
  job->Start();
  std::weak_ptr<EmbeddingJob> weak = job;
  resp->OnDisconnect([weak] {
    if (auto j = weak.lock()) j->CancelAll();
  });
}

std::string ApiServer::AllowedOrigin(const HttpRequest& req) const {
  const std::string origin = req.Header("origin");
  if (origin.empty()) return "";
  for (const std::string& o : opts_.cors_origins) {
    if (o == "*") return "*";
    if (o == origin) return origin;
  }
  return "";
}

// OPTIONS: a CORS preflight (Origin and Access-Control-Request-Method sent)
// is answered 204 with what the route allows when the origin is allowed,
// else 403; a plain OPTIONS gets 204 and the Allow header. No API key is
// asked (browsers never send one in a preflight).
void ApiServer::HandleOptions(const HttpRequest& req, const std::shared_ptr<Responder>& resp,
                              uint8_t route_methods) const {
  const std::string allowed = AllowedMethods(route_methods);
  const std::string asked = req.Header("access-control-request-method");
  if (req.Header("origin").empty() || asked.empty()) return resp->Respond(204, "", "", {{"Allow", allowed}});
  if (AllowedOrigin(req).empty()) {
    return SendError(resp, Error(403, fmt::format("origin '{}' is not allowed (serve with --cors-origin)",
                                                  req.Header("origin")),
                                 "invalid_request_error", "cors_origin_not_allowed"));
  }
  Headers h = {{"Allow", allowed},
               {"Access-Control-Allow-Methods", allowed},
               {"Access-Control-Max-Age", "600"}};
  // The headers the page asked for (Authorization, Content-Type, the OpenAI
  // SDK's own): the API reads only those it knows, so echoing them is safe.
  if (const std::string hs = req.Header("access-control-request-headers"); !hs.empty()) {
    h.emplace_back("Access-Control-Allow-Headers", hs);
  }
  resp->Respond(204, "", "", std::move(h));
}

void ApiServer::HandleVersion(const std::shared_ptr<Responder>& resp) const {
  SendJson(resp, 200, {{"version", opts_.version}, {"commit", opts_.commit}, {"model", opts_.served_model_name}});
}

void ApiServer::HandleWebUi(const std::shared_ptr<Responder>& resp) const {
  if (!opts_.web_ui) {
    return SendError(resp, Error(404, "the web chat page is off (--no-web-ui)", "invalid_request_error", "not_found"));
  }
  // The page is one file: its script and style are inline, it connects only
  // to this origin, and it must not be framed by another site.
  resp->Respond(200, "text/html; charset=utf-8", kWebChatPage,
                {{"Cache-Control", "no-cache"},
                 {"X-Content-Type-Options", "nosniff"},
                 {"X-Frame-Options", "DENY"},
                 {"Content-Security-Policy",
                  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                  "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}});
}

const char* ApiServer::StateName(State state) {
  switch (state) {
    case State::kLoading: return "loading";
    case State::kReady: return "ready";
    case State::kDraining: return "draining";
    case State::kFailed: return "failed";
  }
  return "unknown";
}

// Liveness: 200 while the process serves (ready, or draining what is in
// flight); 503 while loading (a startup probe waits) and once failed (restart).
void ApiServer::HandleHealth(const std::shared_ptr<Responder>& resp, State state) const {
  const bool alive = state == State::kReady || state == State::kDraining;
  SendJson(resp, alive ? 200 : 503, {{"status", state == State::kReady ? "ok" : StateName(state)}});
}

// Readiness: 200 only when new work is welcome here: loaded, not draining or
// failed, and no more than ready_max_waiting requests waiting.
void ApiServer::HandleReady(const std::shared_ptr<Responder>& resp, State state) const {
  if (state != State::kReady) {
    return SendJson(resp, 503, {{"status", StateName(state)}},
                    {{"Retry-After", state == State::kLoading ? "5" : "1"}});
  }
  const EngineStats stats = backend_.engine->Stats();
  const json body = {{"status", "ready"},
                     {"waiting", stats.num_waiting},
                     {"running", stats.num_running},
                     {"max_waiting", opts_.ready_max_waiting}};
  if (stats.num_waiting > opts_.ready_max_waiting) {
    json over = body;
    over["status"] = "overloaded";
    return SendJson(resp, 503, over, {{"Retry-After", "1"}});
  }
  SendJson(resp, 200, body);
}

bool ApiServer::Sampled(const std::string& request_id) const {
  if (opts_.log_sample >= 1.0) return true;
  if (opts_.log_sample <= 0.0) return false;
  return static_cast<double>(std::hash<std::string>{}(request_id) % 1000000) < opts_.log_sample * 1e6;
}

void ApiServer::HandleLogLevel(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  if (req.method == "POST") {
    json body;
    ApiError err;
    if (!ParseJsonBody(req.body, &body, &err)) return SendError(resp, err);
    LogLevel level;
    auto it = body.find("level");
    if (it == body.end() || !it->is_string() || !ParseLogLevel(it->get<std::string>(), &level)) {
      return SendError(resp, BadValue("level", "'level' must be one of trace, debug, info, warn, error, off"));
    }
    SetLogLevel(level);
    LogEvent(LogLevel::kWarn, "log level changed", {Field("level", LogLevelName(level))});
  }
  SendJson(resp, 200, {{"level", LogLevelName(CurrentLogLevel())}});
}

ParseContext ApiServer::MakeParseContext() const {
  ParseContext ctx;
  ctx.tokenizer = backend_.tokenizer;
  ctx.chat_template = backend_.chat_template;
  ctx.tool_format = backend_.tool_format;
  ctx.tool_format_explicit = backend_.tool_format_explicit;
  ctx.trust_request_chat_template = opts_.trust_request_chat_template;
  ctx.limits.max_model_len = backend_.engine->max_model_len();
  ctx.limits.n_vocab = backend_.engine->n_vocab();
  ctx.limits.max_n = opts_.max_n;
  ctx.limits.context_shift = opts_.context_shift;
  ctx.limits.n_lora = static_cast<int32_t>(backend_.lora.size());
  return ctx;
}

// POST /v1/sessions/{id}/save, DELETE /v1/sessions/{id}: operator control of
// a session's blocks in the KV offload tiers (run on the engine's loop).
void ApiServer::HandleSession(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  std::string rest = req.path.substr(std::string("/v1/sessions/").size());
  const bool save = req.method == "POST";
  if (save) {
    const std::string suffix = "/save";
    if (rest.size() <= suffix.size() || rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return SendError(resp, Error(404, "POST /v1/sessions/{id}/save saves a session; DELETE /v1/sessions/{id} deletes it",
                                   "invalid_request_error", "not_found"));
    }
    rest.resize(rest.size() - suffix.size());
  }
  if (rest.empty() || !ValidSessionId(rest)) {
    return SendError(resp, Error(400, "session ids are 1-128 characters of letters, digits, '-', '_', '.', ':' or '@'",
                                 "invalid_request_error", "invalid_value"));
  }
  AsyncEngine* engine = backend_.engine;
  engine->Post([resp, rest, save](Engine& e) {
    StatusOr<SessionInfo> info = save ? e.SaveSession(rest) : e.DeleteSession(rest);
    if (!info.ok()) {
      const StatusCode c = info.status().code();
      const int status = c == StatusCode::kNotFound ? 404 : c == StatusCode::kInvalidArgument ? 400 : 503;
      return SendError(resp, Error(status, info.status().message(),
                                   status == 503 ? "service_unavailable" : "invalid_request_error",
                                   status == 404 ? "session_not_found" : status == 400 ? "sessions_unavailable"
                                                                                       : "tier_unavailable"));
    }
    json body = {{"id", info->id}, {"object", "session"}, {"tokens", info->tokens}, {"blocks", info->blocks}};
    if (save) body["written_blocks"] = info->written_blocks;
    else body["deleted"] = true;
    SendJson(resp, 200, body);
  });
}

void ApiServer::HandleCompletion(const HttpRequest& req, const std::shared_ptr<Responder>& resp, bool chat,
                                 const TraceContext& trace, const std::string& id, CompletionApi api,
                                 std::shared_ptr<const ResponsesTurn> turn) {
  const bool native = api == CompletionApi::kNative || api == CompletionApi::kInfill;
  const bool infill = api == CompletionApi::kInfill;
  CompletionSpec spec;
  ApiError err;
  ParseContext ctx = MakeParseContext();
  ctx.native = native;
  if (!ParseCompletionRequest(req.body, chat, ctx, &spec, &err)) {
    if (api == CompletionApi::kResponses) err.param = ResponsesParam(err.param);
    return SendError(resp, err);
  }
  if (infill) {
    if (spec.prompts.size() != 1) return SendError(resp, BadValue("prompt", "/infill's prompt is one string"));
    // The answer's "prompt": the whole FIM prompt, its special tokens written out.
    spec.prompt_texts[0] = backend_.tokenizer->Decode(spec.prompts[0], /*render_special=*/true);
  }
  if (api == CompletionApi::kAnthropic) {
    if (spec.n != 1 || spec.logprobs)
      return SendError(resp, BadValue(spec.n != 1 ? "n" : "logprobs", "not part of /v1/messages"));
    spec.anthropic = true;
  }
  if (native && (spec.n != 1 || spec.echo)) {
    // llama-server's answer has one content per prompt, without the prompt.
    return SendError(resp,
                     BadValue(spec.n != 1 ? "n" : "echo",
                              "/completion returns one text per prompt, without the prompt; use /v1/completions"));
  }
  if (spec.params.session_id.empty() && !req.Header("x-session-id").empty()) {
    spec.params.session_id = std::string(req.Header("x-session-id"));
    if (!ValidSessionId(spec.params.session_id)) {
      return SendError(resp, Error(400, "X-Session-Id must be 1-128 characters of letters, digits, '-', '_', '.', ':' or '@'",
                                   "invalid_request_error", "invalid_value"));
    }
  }
  if (!ServesModel(spec.model)) {
    return SendError(resp, Error(404,
                                 fmt::format("The model `{}` does not exist (this server serves `{}`).", spec.model,
                                             opts_.served_model_name),
                                 "invalid_request_error", "model_not_found", "model"));
  }
  if (!spec.lora_given) LoraFor(spec.model, &spec.params.lora_scales, &spec.params.lora_adapter);
  const int64_t want = static_cast<int64_t>(spec.prompts.size()) * spec.n;
  if (backend_.engine->Stats().num_waiting + want > opts_.max_queue) {
    return SendError(resp,
                     Error(429, fmt::format("too many requests waiting (limit {}); retry later", opts_.max_queue),
                           "rate_limit_error", "queue_full"),
                     {{"Retry-After", "1"}});
  }
  CompletionJob::Observability obs;
  obs.metrics = &metrics_;
  obs.trace = trace;
  obs.exporter = opts_.exporter;
  obs.log_request = Sampled(id);
  obs.log_prompts = opts_.log_prompts;
  obs.endpoint = api == CompletionApi::kAnthropic   ? "/v1/messages"
                 : api == CompletionApi::kResponses ? "/v1/responses"
                 : chat                             ? "/v1/chat/completions"
                 : infill                           ? "/infill"
                 : native                           ? "/completion"
                                                    : "/v1/completions";
  // (A request that named a LoRA adapter is answered as that model, as vLLM does.)
  std::string answer_model = spec.model.empty() ? opts_.served_model_name : spec.model;
  auto job = std::make_shared<CompletionJob>(std::move(spec), resp, backend_.engine, backend_.tokenizer, id,
                                             UnixSeconds(), std::move(answer_model), std::move(obs));
  if (turn != nullptr) job->SetResponses(std::move(turn), responses_store_.get());
  job->Start();
  std::weak_ptr<CompletionJob> weak = job;
  resp->OnDisconnect([weak] {
    if (auto j = weak.lock()) j->CancelAll();
  });
}

void ApiServer::HandleModels(const HttpRequest& req, const std::shared_ptr<Responder>& resp) const {
  const json model = {{"id", opts_.served_model_name},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "infera"},
                      {"max_model_len", backend_.engine->max_model_len()}};
  // LoRA adapters are models of their own (vLLM's listing: parent, root).
  json list = json::array({model});
  std::vector<ApiBackend::Lora> adapters;
  {
    std::lock_guard<std::mutex> lock(lora_mu_);
    adapters = lora_;
  }
  for (const ApiBackend::Lora& l : adapters) {
    if (l.name.empty()) continue;  // a free runtime slot
    json m = model;
    m["id"] = l.name;
    m["parent"] = opts_.served_model_name;
    m["root"] = l.path;
    list.push_back(std::move(m));
  }
  if (req.path == "/v1/models") return SendJson(resp, 200, {{"object", "list"}, {"data", list}});
  const std::string name = req.path.substr(std::string("/v1/models/").size());
  for (const json& m : list) {
    if (m["id"] == name) return SendJson(resp, 200, m);
  }
  SendError(resp, Error(404, fmt::format("The model `{}` does not exist.", name), "invalid_request_error",
                        "model_not_found", "model"));
}

void ApiServer::HandleMetrics(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  const bool openmetrics = req.Header("accept").find("application/openmetrics-text") != std::string::npos;
  resp->Respond(200, ServerMetrics::ContentType(openmetrics), metrics_.Render(openmetrics));
}

}  // namespace infera::server
