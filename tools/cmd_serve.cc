// infera serve: the OpenAI-compatible HTTP server. Listens at once (/health
// says "loading" until the model is in), then serves until SIGTERM/SIGINT,
// on which it stops accepting, lets in-flight requests finish (bounded by
// --drain-timeout) and exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "base/logging.h"
#include "base/cpu_features.h"
#include "base/paths.h"
#include "build_paths.h"
#include "engine/async_engine.h"
#include "metrics/registry.h"
#include "server/api_server.h"
#include "server/embeddings.h"
#include "server/http_server.h"
#include "server/tracing.h"
#include "tokenizer/chat_template.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/parallel_session.h"

namespace infera::cli {
namespace {

// A drain signal taken by a thread that does not block it. Threads a library
// starts before `RunServe` blocks the signals keep them unblocked (OpenBLAS
// starts its pool when it is loaded); without a handler the default action
// there would kill the process, and a worker rank, which never waits for the
// signals, would die of mpirun's forwarded SIGUSR1. Written only by the
// handler, read by rank 0's wait loop.
std::atomic<int> g_stray_drain_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "read and written in a signal handler");
extern "C" void RecordStrayDrainSignal(int sig) { g_stray_drain_signal.store(sig, std::memory_order_relaxed); }

struct ServeArgs {
  std::string model, model_positional, tokenizer, host = "127.0.0.1", served_model_name, api_key, api_key_file,
      chat_template, chat_template_file, tool_call_parser = "auto";
  bool trust_request_chat_template = false;
  bool api_key_given = false;  // --api-key on the command line (even "")
  std::vector<std::string> cors_origins;
  bool no_web_ui = false;
  bool spm_infill = false;
  std::string pooling;  // "": the model's
  int port = 8080;
  int threads = 0;
  int http_threads = 2;
  int max_n = 16;
  int max_queue = 256;
  int64_t responses_store = 1000;
  int max_runtime_loras = 0;
  int ready_max_waiting = -1;  // -1: as max_queue
  int64_t max_body_bytes = 8 << 20;
  double drain_timeout = 30;
  int read_timeout = 30;
  double log_sample = 1.0;
  ParallelFlags parallel;
  bool log_prompts = false;
  std::string otlp_endpoint, otlp_service_name = "infera";
  EngineFlags engine;
};

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The model, engine and tokenizer, loaded on a background thread.
struct Loaded {
  LoadedModel lm;
  std::unique_ptr<Model> draft;  // --draft-model
  std::vector<std::unique_ptr<LoraAdapter>> lora;  // --lora, --lora-scaled, --lora-modules
  std::unique_ptr<KernelTable> kernels;
  std::unique_ptr<AsyncEngine> engine;
};

// A split model's per-rank totals on /metrics, labelled by rank (mirrored
// from rank 0's copy, which every step refreshes).
void AddRankMetrics(ParallelSession& ps, metrics::Registry& reg) {
  auto& steps = reg.AddCounter("infera_parallel_steps", "Forward steps run by each rank of a split model", {"rank"});
  auto& step_s = reg.AddCounter("infera_parallel_step_seconds",
                                "Seconds each rank spent in forward steps (compute and communication)", {"rank"});
  auto& comm_s = reg.AddCounter("infera_parallel_communication_seconds",
                                "Seconds each rank spent in communication (waiting for the others included)", {"rank"});
  auto& sent = reg.AddCounter("infera_parallel_sent_bytes", "Payload bytes each rank sent to the others", {"rank"});
  auto& recv = reg.AddCounter("infera_parallel_received_bytes", "Payload bytes each rank received", {"rank"});
  auto last = std::make_shared<std::vector<RankStats>>();
  reg.AddCollector([&ps, &steps, &step_s, &comm_s, &sent, &recv, last] {
    const std::vector<RankStats> now = ps.RankStatsSnapshot();
    last->resize(now.size());
    for (size_t r = 0; r < now.size(); ++r) {
      const std::vector<std::string> label = {std::to_string(r)};
      RankStats& was = (*last)[r];
      auto inc = [&](metrics::Family<metrics::Counter>& f, double v, double& prev) {
        if (v > prev) f.With(label).Inc(v - prev);
        else f.With(label);  // (present from the first scrape)
        prev = std::max(prev, v);
      };
      inc(steps, now[r].steps, was.steps);
      inc(step_s, now[r].step_seconds, was.step_seconds);
      inc(comm_s, now[r].comm_seconds, was.comm_seconds);
      inc(sent, now[r].bytes_sent, was.bytes_sent);
      inc(recv, now[r].bytes_received, was.bytes_received);
    }
  });
}

Status Load(const ServeArgs& a, EngineOptions eopts, const RuntimeOptions& rt, ParallelSession& ps, Loaded* out,
            server::ApiBackend* backend) {
  ASSIGN_OR_RETURN(KernelTable k, SelectKernels(rt));
  out->kernels = std::make_unique<KernelTable>(k);
  auto lm = LoadModelAndTokenizer(a.model, a.tokenizer, true, ForKernels(ps.load_options(), k));
  RETURN_IF_ERROR(ps.Ready(ModelPathOrDefault(a.model), lm.status(), k, rt.threads));
  out->lm = std::move(lm).value();
  ASSIGN_OR_RETURN(ChatTemplate tmpl, ResolveChatTemplate(*out->lm.tokenizer, a.chat_template, a.chat_template_file));
  ASSIGN_OR_RETURN(out->draft, LoadDraftModel(a.engine.draft_model, ForKernels({}, k), &eopts));
  ASSIGN_OR_RETURN(out->lora, LoadLoraAdapters(a.engine.lora, *out->lm.model, &eopts));
  // (A request naming the served model gets the base model, even if an
  // adapter has that name too.)
  for (const auto& l : out->lora) backend->lora.push_back({l->name, l->path, l->default_scale, false});
  eopts.max_runtime_loras = a.max_runtime_loras;
  if (a.max_runtime_loras > 0) {
    for (int i = 0; i < a.max_runtime_loras; ++i) backend->lora.push_back({"", "", 0.0f, true});
    const Model* model = out->lm.model.get();
    backend->load_lora = [model](const std::string& name,
                                 const std::string& path) -> StatusOr<std::shared_ptr<const LoraAdapter>> {
      ASSIGN_OR_RETURN(std::unique_ptr<LoraAdapter> a, LoadLoraAdapter(path, *model));
      a->name = name;
      a->default_scale = 0.0f;  // (only requests naming it use it)
      return std::shared_ptr<const LoraAdapter>(std::move(a));
    };
  }
  ASSIGN_OR_RETURN(out->engine, AsyncEngine::Create(*out->lm.model, out->lm.tokenizer.get(), *out->kernels, eopts,
                                                    ps.RunnerFactory(*out->lm.model, *out->kernels,
                                                                     eopts.max_model_len)));
  backend->engine = out->engine.get();
  backend->tokenizer = out->lm.tokenizer.get();
  backend->chat_template = tmpl;
  if (a.tool_call_parser == "auto") {
    backend->tool_format = server::DetectToolCallFormat(tmpl.jinja_source());
  } else if (!server::ParseToolCallFormat(a.tool_call_parser, &backend->tool_format)) {
    return InvalidArgument(fmt::format("--tool-call-parser must be auto, hermes, llama3_json, mistral or json (got '{}')",
                                       a.tool_call_parser));
  } else {
    backend->tool_format_explicit = true;
  }
  // Embeddings pool as --pooling says, else as the file says (GGUF
  // pooling_type 1 mean, 2 CLS, 3 last), else by the last token: a causal
  // decoder's only position that has seen the whole input.
  const ModelConfig& whole = out->lm.model->whole();
  backend->n_embd = whole.n_embd;
  if (!a.pooling.empty()) {
    server::ParsePooling(a.pooling, &backend->pooling);  // (checked before loading)
  } else if (whole.pooling_type >= 1 && whole.pooling_type <= 3) {
    backend->pooling = whole.pooling_type == 1 ? Pooling::kMean : whole.pooling_type == 2 ? Pooling::kCls : Pooling::kLast;
  }
  LOG_INFO("/v1/embeddings pools by {} ({})", server::PoolingName(backend->pooling),
           !a.pooling.empty() ? "--pooling" : whole.pooling_type >= 1 && whole.pooling_type <= 3 ? "the model's pooling_type"
                                                                                                  : "default");
  backend->build = {INFERA_VERSION, INFERA_GIT_COMMIT,
                    fmt::format("{}/{}", CpuIsaName(out->kernels->isa), out->kernels->qgemm_variant)};
  std::error_code ec;
  const std::string& path = out->lm.model->path;
  if (std::filesystem::is_regular_file(path, ec)) {
    backend->model_bytes = std::filesystem::file_size(path, ec);
  } else if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) backend->model_bytes += e.file_size(ec);
    }
  }
  LOG_INFO("serve: chat template {}, tool calls as {}", tmpl.Name(), server::ToolCallFormatName(backend->tool_format));
  return Status::Ok();
}

// A split model's group failed (or is being torn down): /health says so,
// every request in flight ends with 503 at once (the engine's loop may be
// stuck in a step for good), and the process exits non-zero — under MPI the
// whole job — for its supervisor to restart the group.
[[noreturn]] void FailGroup(server::ApiServer& api, AsyncEngine& engine, ParallelSession& ps, const std::string& why) {
  LOG_ERROR("parallel group failed: {}; failing the requests in flight with 503 and exiting", why);
  api.SetFailed();
  const int n = engine.Abandon("the server's parallel group failed: " + why);
  LOG_ERROR("parallel group failed: {} request(s) ended with 503", n);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the responses go out
  std::fflush(nullptr);
  ps.Abort(3);
}

int Serve(const ServeArgs& args, const RuntimeOptions& rt_in) {
  ServeArgs a = args;
  if (!a.model_positional.empty()) {
    if (!a.model.empty() && a.model != a.model_positional) {
      return ReportError("the model is given twice (MODEL and --model): give it once");
    }
    a.model = a.model_positional;
  }
  if (a.max_n < 1) return ReportError("--max-n must be at least 1");
  if (a.max_queue < 1) return ReportError("--max-queue must be at least 1");
  if (a.ready_max_waiting < -1) return ReportError("--ready-max-waiting must be at least 0");
  if (a.max_body_bytes < 1024) return ReportError("--max-body-bytes must be at least 1024");
  if (!(a.drain_timeout >= 0)) return ReportError("--drain-timeout must be >= 0");
  if (a.read_timeout < 1) return ReportError("--read-timeout must be at least 1 second");
  if (a.http_threads < 1 || a.http_threads > 64) return ReportError("--http-threads must be in 1..64");
  // SIGINT/SIGTERM (and SIGUSR1, which mpirun forwards to every rank as is,
  // while it turns a SIGTERM into killing the job a few seconds later) start
  // a drain. Blocked in every thread from here on (MPI starts threads of its
  // own); rank 0 takes them with sigtimedwait below, and worker ranks, which
  // step until rank 0 stops them after its drain, never. Threads started
  // earlier by a library take them through RecordStrayDrainSignal.
  sigset_t signals;
  sigemptyset(&signals);
  struct sigaction stray {};
  stray.sa_handler = RecordStrayDrainSignal;
  stray.sa_flags = SA_RESTART;
  sigemptyset(&stray.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) {
    sigaddset(&signals, s);
    sigaction(s, &stray, nullptr);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto session = ParallelSession::Start(a.parallel);
  if (!session.ok()) return ReportError(session.status());
  ParallelSession& ps = **session;
  const RuntimeOptions rank_rt = ps.RankRuntime(rt_in, a.threads);
  const int threads = rank_rt.threads;
  if (ps.rank() != 0) return ps.RunWorker(ModelPathOrDefault(a.model), rank_rt);
  EngineFlags ef = a.engine;
  if (std::string e = ResolveEngineFlags(&ef, threads); !e.empty()) return ReportError(e);
  if (!(a.log_sample >= 0 && a.log_sample <= 1)) return ReportError("--log-sample must be in [0, 1]");
  std::unique_ptr<server::OtlpExporter> exporter;
  if (!a.otlp_endpoint.empty()) {
    auto e = server::OtlpExporter::Create(a.otlp_endpoint, a.otlp_service_name);
    if (!e.ok()) return ReportError(e.status());
    exporter = std::move(e).value();
  }
  server::ApiServerOptions opts;
  opts.exporter = exporter.get();
  opts.log_sample = a.log_sample;
  opts.log_prompts = a.log_prompts;
  opts.max_n = a.max_n;
  opts.max_queue = a.max_queue;
  opts.ready_max_waiting = a.ready_max_waiting >= 0 ? a.ready_max_waiting : a.max_queue;
  opts.context_shift = ef.opts.context_shift;
  if (a.api_key_given && a.api_key.empty()) {
    return ReportError("--api-key is empty: that would leave the API open; give a key, or omit the flag");
  }
  if (a.api_key_given && !a.api_key_file.empty()) {
    return ReportError("--api-key and --api-key-file both given: use one (--api-key-file keeps the key out of the "
                       "process list)");
  }
  opts.api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    auto key = ReadFileToString(a.api_key_file);
    if (!key.ok()) return ReportError("--api-key-file: " + key.status().message());
    opts.api_key = Trim(*key);
    if (opts.api_key.empty()) return ReportError("--api-key-file: the file is empty");
  }
  for (const std::string& o : a.cors_origins) {
    // An origin is scheme://host[:port], nothing after; "*" allows any.
    const size_t scheme = o.find("://");
    const bool ok = o == "*" || (scheme != std::string::npos && scheme > 0 && o.size() > scheme + 3 &&
                                 o.find('/', scheme + 3) == std::string::npos && o.find_first_of(" ,\t") == std::string::npos);
    if (!ok) return ReportError("--cors-origin '" + o + "': give an origin such as https://app.example.com, or *");
  }
  opts.cors_origins = a.cors_origins;
  opts.web_ui = !a.no_web_ui;
  opts.spm_infill = a.spm_infill;
  opts.trust_request_chat_template = a.trust_request_chat_template;
  if (a.responses_store < 0) return ReportError("--responses-store must be 0 or more");
  opts.responses_store = static_cast<size_t>(a.responses_store);
  if (Pooling p; !a.pooling.empty() && !server::ParsePooling(a.pooling, &p)) {
    return ReportError("--pooling '" + a.pooling + "': use mean, cls or last");
  }
  opts.version = INFERA_VERSION;
  opts.commit = INFERA_GIT_COMMIT;
  opts.served_model_name = a.served_model_name;
  if (opts.served_model_name.empty()) {
    std::string path = a.model;
    if (path.empty()) {
      auto found = FindDefaultModel();
      path = found.ok() ? *found : "default";
    }
    opts.served_model_name = std::filesystem::path(path).stem().string();
  }
  server::ApiServer api(opts);
  if (ps.split()) AddRankMetrics(ps, api.metrics().registry());
  server::HttpServerOptions hopts;
  hopts.host = a.host;
  hopts.port = a.port;
  hopts.max_body_bytes = static_cast<size_t>(a.max_body_bytes);
  hopts.io_threads = a.http_threads;
  hopts.read_timeout = std::chrono::seconds(a.read_timeout);
  hopts.on_layer_error = [&api](int status, const std::string& target, const std::string& message) {
    api.HttpLayerError(status, target, message);
  };
  auto http = server::HttpServer::Start(
      hopts, [&api](server::HttpRequest req, std::shared_ptr<server::Responder> resp) {
        api.Handle(std::move(req), std::move(resp));
      });
  if (!http.ok()) return ReportError(http.status());
  std::fprintf(stderr, "infera serve: listening on http://%s:%d (model %s loading)\n", a.host.c_str(),
               (*http)->port(), opts.served_model_name.c_str());

  RuntimeOptions rt = rt_in;
  rt.threads = threads;
  Loaded loaded;
  Status load_status;
  std::atomic<bool> load_done{false};
  std::thread loader([&] {
    server::ApiBackend backend;
    load_status = Load(a, ef.opts, rt, ps, &loaded, &backend);
    if (load_status.ok()) api.SetReady(backend);
    load_done = true;
  });
  bool reported_ready = false;
  int sig = 0;
  for (;;) {
    timespec wait{0, 100 * 1000 * 1000};
    sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig <= 0) sig = g_stray_drain_signal.exchange(0, std::memory_order_relaxed);
    if (sig > 0) break;
    if (load_done && !reported_ready) {
      if (!load_status.ok()) {
        loader.join();
        (*http)->Stop();
        return ReportError(load_status);
      }
      reported_ready = true;
      std::fprintf(stderr, "infera serve: ready: model %s at http://%s:%d/v1\n", opts.served_model_name.c_str(),
                   a.host.c_str(), (*http)->port());
    }
    if (reported_ready) {
      if (std::string why = ps.Failure(); !why.empty()) FailGroup(api, *loaded.engine, ps, why);
    }
  }
  if (reported_ready && ps.mpi() && ps.split() && sig != SIGUSR1) {
    // mpirun turns a SIGTERM (or a rank's death) into killing the whole job a
    // few seconds later: no time to drain. End what is in flight with 503.
    FailGroup(api, *loaded.engine, ps,
              "the MPI job is being stopped (mpirun forwards SIGUSR1 for a graceful drain instead)");
  }
  // Shutdown: refuse new connections and work, finish what is in flight.
  std::fprintf(stderr, "infera serve: %s: draining (up to %.0f s)\n", sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM",
               a.drain_timeout);
  api.SetDraining();
  (*http)->StopAccepting();
  loader.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(a.drain_timeout * 1000));
  bool clean = true;
  if (loaded.engine) {
    clean = loaded.engine->Drain(std::chrono::milliseconds(static_cast<int64_t>(a.drain_timeout * 1000)));
  }
  // The last responses are being written: give them a little longer.
  const auto write_deadline = std::max(deadline, std::chrono::steady_clock::now()) + std::chrono::seconds(2);
  while ((*http)->active_requests() > 0 && std::chrono::steady_clock::now() < write_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (*http)->Stop();
  loaded.engine.reset();  // releases the responders its callbacks held
  http->reset();
  std::fprintf(stderr, "infera serve: stopped%s\n", clean ? "" : " (drain timeout: unfinished requests cancelled)");
  return kExitOk;
}

}  // namespace

CommandFn RegisterServe(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("model", a->model_positional, "model: GGUF file, Hugging Face folder or llama2.c .bin (as --model)");
  app.add_option("-m,--model", a->model, "model (default: the bundled model)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer file (llama2.c checkpoints)");
  app.add_option("--host", a->host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", a->port, "port (default 8080; 0: any free port, printed)");
  app.add_option("--served-model-name", a->served_model_name, "the model name clients use (default: the file name)");
  auto* key = app.add_option("--api-key", a->api_key,
                              "require 'Authorization: Bearer KEY' on " + server::GuardedRoutes() +
                                  " (/health and /metrics stay open)");
  app.add_option("--cors-origin", a->cors_origins,
                 "let web pages from this origin call the API (CORS; repeatable; * for any origin)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--pooling", a->pooling,
                 "how /v1/embeddings pools the final hidden states: mean, cls or last (default: the model's "
                 "pooling_type, else last)");
  app.add_flag("--no-web-ui", a->no_web_ui, "do not serve the web chat page at / (the API is unchanged)");
  app.add_flag("--spm-infill", a->spm_infill,
               "/infill lays out suffix then prefix ([FIM_SUF] suffix [FIM_PRE] prefix [FIM_MID]), as some code models "
               "were trained (llama-server's flag)");
  app.add_option("--api-key-file", a->api_key_file, "read the API key from a file (keeps it out of the process list)");
  app.add_option("--chat-template", a->chat_template, kChatTemplateHelp);
  app.add_option("--chat-template-file", a->chat_template_file, "a Jinja chat template to use instead of the model's");
  app.add_option("--tool-call-parser", a->tool_call_parser,
                 "how replies write tool calls: auto (from the chat template), hermes (<tool_call> JSON: Qwen, "
                 "Hermes), llama3_json, mistral ([TOOL_CALLS]), json (a JSON list)");
  app.add_flag("--trust-request-chat-template", a->trust_request_chat_template,
               "accept a Jinja template per request (the 'chat_template' field); off: such requests get 400");
  app.add_option("-t,--threads", a->threads, "compute threads (0: the cores this process may use; more is capped)");
  app.add_option("--http-threads", a->http_threads, "I/O threads for HTTP (default 2)");
  app.add_option("--max-n", a->max_n, "largest n (choices per request) accepted (default 16)");
  app.add_option("--max-queue", a->max_queue, "waiting requests beyond this get 429 (default 256)");
  app.add_option("--responses-store", a->responses_store,
                 "Responses API objects kept in memory for GET /v1/responses/{id} and previous_response_id, least "
                 "recently used dropped beyond (default 1000; 0: none kept)");
  app.add_option("--max-runtime-loras", a->max_runtime_loras,
                 "LoRA slots for adapters loaded while serving (vLLM's POST /v1/load_lora_adapter and "
                 "/v1/unload_lora_adapter; default 0: those answer 404)")
      ->check(CLI::Range(0, kMaxRuntimeLoras));
  app.add_option("--ready-max-waiting", a->ready_max_waiting,
                 "/ready answers 503 'overloaded' while more requests than this wait (default: --max-queue)");
  app.add_option("--max-body-bytes", a->max_body_bytes, "largest request body; larger: 413 (default 8 MiB)");
  app.add_option("--drain-timeout", a->drain_timeout, "seconds in-flight requests get to finish on SIGTERM (default 30)");
  app.add_option("--read-timeout", a->read_timeout, "seconds a client gets to send a request, or to read (default 30)");
  app.add_option("--log-sample", a->log_sample,
                 "fraction of successful requests that get an info log line (default 1; failures always)");
  app.add_flag("--log-prompts", a->log_prompts, "put prompts and outputs in the request log lines (off by default)");
  app.add_option("--otlp-endpoint", a->otlp_endpoint,
                 "export trace spans as OTLP/HTTP JSON, e.g. http://127.0.0.1:4318/v1/traces");
  app.add_option("--otlp-service-name", a->otlp_service_name, "service.name of exported spans (default infera)");
  AddEngineFlags(app, &a->engine);
  AddParallelFlags(app, &a->parallel);
  // llama-server's names (-np arrives as --parallel, see foreign_flags.h).
  app.add_option("-c,--ctx-size", a->engine.opts.max_model_len, "context per sequence, as --max-model-len");
  app.add_option("--parallel", a->engine.opts.max_num_seqs, "sequences per batch, as --max-num-seqs (llama.cpp -np)");
  return [a, rt, key]() {
    a->api_key_given = key->count() > 0;
    return Serve(*a, rt);
  };
}

}  // namespace infera::cli
