// The Python API (pybind11): vLLM's offline interface on infera's engine.
//
//   from infera import LLM, SamplingParams
//   llm = LLM(model="model.gguf", max_num_seqs=64)
//   outs = llm.generate(["Hello", "Once upon"], SamplingParams(temperature=0.7, top_p=0.9, max_tokens=100))
//   outs[0].outputs[0].text
//   llm.chat([{"role": "user", "content": "Hi"}])
//   for piece in llm.stream("Hello", SamplingParams(max_tokens=20)): print(piece, end="")
//
// Every call runs the engine (continuous batching over all its requests)
// with the GIL released, taking it back between steps only to check for
// KeyboardInterrupt (the requests are then cancelled and their KV blocks
// freed). An LLM may be used from several Python threads: its calls take
// turns (one engine, one lock).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/logging.h"
#include "build_paths.h"
#include "infera/engine.h"
#include "model/model.h"
#include "python/py_chat.h"
#include "python/py_lora.h"
#include "python/py_outputs.h"
#include "python/py_sampling_params.h"
#include "python/py_value_types.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_common.h"
#include "tools/engine_flags.h"

namespace py = pybind11;

namespace infera::python {
namespace {

// vLLM's EmbeddingRequestOutput: .outputs.embedding.
struct PyEmbeddingOutput {
  std::vector<float> embedding;
};
struct PyEmbeddingRequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  PyEmbeddingOutput outputs;
  bool finished = false;
};

class LLM {
 public:
  LLM(const std::string& model, const std::string& tokenizer, int max_num_seqs, int max_model_len, int threads,
      int64_t kv_cache_mb, int max_num_batched_tokens, bool enable_prefix_caching, const std::string& chat_template,
      const std::string& cpu_isa, const std::string& log_level, std::optional<uint64_t> seed, bool enable_lora,
      int max_loras)
      : seed_(seed) {
    LogLevel level;
    if (!ParseLogLevel(log_level, &level)) throw py::value_error("log_level must be trace, debug, info, warn, error or off");
    SetLogLevel(level);
    if (max_num_seqs < 1) throw py::value_error("max_num_seqs must be at least 1");
    if (enable_lora && (max_loras < 1 || max_loras > kMaxRuntimeLoras)) {
      throw py::value_error("max_loras must be in [1, " + std::to_string(kMaxRuntimeLoras) + "]");
    }
    if (max_model_len < 0 || threads < 0 || kv_cache_mb < 0 || max_num_batched_tokens < 1) {
      throw py::value_error("max_model_len, threads and kv_cache_mb must be >= 0, max_num_batched_tokens >= 1");
    }
    cli::RuntimeOptions rt;
    rt.threads = threads;
    rt.cpu_isa = cpu_isa;
    py::gil_scoped_release release;  // loading reads the whole file
    auto kernels = cli::SelectKernels(rt);
    if (!kernels.ok()) Raise(kernels.status());
    kernels_ = std::make_unique<KernelTable>(*kernels);
    auto lm = cli::LoadModelAndTokenizer(model, tokenizer, true);
    if (!lm.ok()) Raise(lm.status());
    lm_ = std::move(lm).value();
    // chat_template: a built-in format's name, "jinja", or a Jinja template
    // itself (as vLLM's LLM.chat(chat_template=...) takes one).
    const bool is_source = chat_template.find("{%") != std::string::npos || chat_template.find("{{") != std::string::npos;
    auto tmpl = is_source ? ChatTemplate::FromJinja(chat_template) : cli::ResolveChatTemplate(*lm_.tokenizer, chat_template);
    if (!tmpl.ok()) Raise(tmpl.status());
    chat_template_ = *tmpl;
    cli::EngineFlags ef;
    ef.opts.max_num_seqs = max_num_seqs;
    ef.opts.max_model_len = max_model_len;
    ef.opts.kv_cache_mb = kv_cache_mb;
    ef.opts.max_batched_tokens = max_num_batched_tokens;
    ef.no_prefix_cache = !enable_prefix_caching;
    ef.opts.max_runtime_loras = enable_lora ? max_loras : 0;
    if (std::string e = cli::ResolveEngineFlags(&ef, threads); !e.empty()) throw py::value_error(e);
    auto engine = Engine::Create(*lm_.model, lm_.tokenizer.get(), *kernels_, ef.opts);
    if (!engine.ok()) Raise(engine.status());
    engine_ = std::move(engine).value();
    lora_ = std::make_unique<LoraCache>(*lm_.model, ef.opts.max_runtime_loras);
  }

  // prompts: a string or a list of strings; params: one SamplingParams, a
  // list (one per prompt) or None (defaults).
  // prompts: vLLM's forms, one or a list: a string, {"prompt": string}
  // (TextPrompt) or {"prompt_token_ids": [ids]} (TokensPrompt; its
  // RequestOutput.prompt is None).
  // use_tqdm: vLLM's progress bar (none here; accepted for its callers).
  // lora_request: vLLM's, a LoRARequest or one per prompt (needs
  // LLM(enable_lora=True); py_lora.h).
  std::vector<PyRequestOutput> Generate(const py::object& prompts, const py::object& params, bool /*use_tqdm*/,
                                        const py::object& lora_request) {
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::optional<std::string>> shown;
    auto add = [&](py::handle p) {
      if (py::isinstance<py::str>(p)) {
        shown.push_back(p.cast<std::string>());
        ids.push_back(lm_.tokenizer->Encode(*shown.back(), true, false));
        return;
      }
      if (!py::isinstance<py::dict>(p))
        throw py::type_error("a prompt is a string, {'prompt': str} or {'prompt_token_ids': [int]}");
      const py::dict d = p.cast<py::dict>();
      for (auto [key, value] : d) {
        const std::string k = key.cast<std::string>();
        if (k != "prompt" && k != "prompt_token_ids") throw py::value_error("unsupported prompt key '" + k + "'");
      }
      if (d.contains("prompt_token_ids")) {
        ids.push_back(d["prompt_token_ids"].cast<std::vector<int32_t>>());
        shown.push_back(d.contains("prompt") ? std::optional<std::string>(d["prompt"].cast<std::string>())
                                             : std::nullopt);
        if (ids.back().empty()) throw py::value_error("prompt_token_ids is empty");
      } else if (d.contains("prompt")) {
        shown.push_back(d["prompt"].cast<std::string>());
        ids.push_back(lm_.tokenizer->Encode(*shown.back(), true, false));
      } else {
        throw py::value_error("a prompt dict needs 'prompt' or 'prompt_token_ids'");
      }
    };
    if (py::isinstance<py::str>(prompts) || py::isinstance<py::dict>(prompts)) {
      add(prompts);
    } else {
      for (py::handle p : prompts.cast<py::list>()) add(p);
    }
    return Run(ids, shown, ParamsFor(params, ids.size()), LoraRequestsFor(lora_request, ids.size()));
  }

  // messages: one conversation (a list of {"role", "content"} dicts) or a
  // list of them.
  // tools / chat_template_kwargs: given to the Jinja chat template, as
  // vLLM's LLM.chat passes them.
  std::vector<PyRequestOutput> Chat(const py::list& messages, const py::object& params, bool add_generation_prompt,
                                    const py::object& tools, const py::object& chat_template_kwargs, bool /*use_tqdm*/,
                                    const py::object& lora_request) {
    std::vector<py::list> conversations;
    if (!messages.empty() && py::isinstance<py::list>(messages[0])) {
      for (const auto& c : messages) conversations.push_back(c.cast<py::list>());
    } else {
      conversations.push_back(messages);
    }
    std::vector<std::vector<int32_t>> ids;
    for (const py::list& conv : conversations) {
      ids.push_back(EncodeConversation(conv, add_generation_prompt, tools, chat_template_kwargs));
    }
    std::vector<std::optional<std::string>> shown(ids.size());
    return Run(ids, shown, ParamsFor(params, ids.size()), LoraRequestsFor(lora_request, ids.size()));
  }

  // The generated text of one prompt, piece by piece (n must be 1).
  class Stream {
   public:
    Stream(LLM* llm, std::vector<int32_t> prompt, RequestParams params)
        : llm_(llm), prompt_(std::move(prompt)), params_(std::move(params)) {}
    Stream* Iter() { return this; }
    std::string Next() {
      if (done_) throw py::stop_iteration();
      std::unique_lock<std::mutex> lock(llm_->mu_, std::defer_lock);
      {
        py::gil_scoped_release release;
        lock.lock();
      }
      Engine& eng = *llm_->engine_;
      // Outputs another call's steps produced for this request meanwhile.
      if (auto it = llm_->parked_.find(id_); started_ && it != llm_->parked_.end()) {
        std::vector<RequestOutput> parked = std::move(it->second);
        llm_->parked_.erase(it);
        std::string text;
        for (const RequestOutput& o : parked) Take(o, &text);
        if (!text.empty()) return text;
        if (done_) throw py::stop_iteration();
      }
      if (!started_) {
        auto id = eng.Add(prompt_, params_);
        if (!id.ok()) {
          done_ = true;
          Raise(id.status());
        }
        id_ = *id;
        started_ = true;
      }
      // Steps until this request has new text or finishes (other streams'
      // requests advance too; their outputs are parked for them).
      while (true) {
        std::vector<RequestOutput> outs;
        {
          py::gil_scoped_release release;
          outs = eng.Step();
        }
        std::string text;
        for (RequestOutput& o : outs) {
          if (o.id != id_) {
            llm_->parked_[o.id].push_back(std::move(o));  // another stream's
            continue;
          }
          Take(o, &text);
        }
        if (!text.empty()) return text;
        if (done_) throw py::stop_iteration();
        if (PyErr_CheckSignals() != 0) {
          Cancel();
          throw py::error_already_set();
        }
      }
    }
    // This request's output: its text appended, its end noted (an engine
    // error raised).
    void Take(const RequestOutput& o, std::string* text) {
      *text += o.text;
      if (!o.finished) return;
      done_ = true;
      if (o.finish_reason == FinishReason::kError) throw std::runtime_error(o.error);
    }
    // Ends the request if the caller stops early (its blocks are freed).
    void Cancel() {
      if (started_ && !done_) {
        done_ = true;
        llm_->engine_->Cancel(id_);
        llm_->StepUntilIdle();
      }
    }
    ~Stream() {
      if (!started_) return;
      py::gil_scoped_release release;  // (dealloc holds the GIL; a call on another thread may hold the lock)
      std::lock_guard<std::mutex> lock(llm_->mu_);
      Cancel();
      llm_->parked_.erase(id_);
    }

   private:
    LLM* llm_;
    std::vector<int32_t> prompt_;
    RequestParams params_;
    uint64_t id_ = 0;
    bool started_ = false, done_ = false;
  };

  // Embeddings of a string or a list of strings (vLLM's LLM.embed): each
  // prompt's final hidden states pooled ("mean", "cls", "last"; None: the
  // model's pooling_type, else "last"), L2-normalized if `normalize`. They run
  // batched through the engine like generate's prompts. lora_request: as
  // generate's.
  std::vector<PyEmbeddingRequestOutput> Embed(const py::object& prompts, const std::optional<std::string>& pooling,
                                              bool normalize, const py::object& lora_request) {
    std::vector<std::string> texts;
    if (py::isinstance<py::str>(prompts)) {
      texts.push_back(prompts.cast<std::string>());
    } else {
      texts = prompts.cast<std::vector<std::string>>();
    }
    RequestParams p;
    p.max_tokens = 0;
    p.normalize_embedding = normalize;
    const int pt = lm_.model->whole().pooling_type;
    p.pooling = pt == 1 ? Pooling::kMean : pt == 2 ? Pooling::kCls : Pooling::kLast;
    if (pooling) {
      if (*pooling == "mean") p.pooling = Pooling::kMean;
      else if (*pooling == "cls") p.pooling = Pooling::kCls;
      else if (*pooling == "last") p.pooling = Pooling::kLast;
      else throw py::value_error("pooling must be 'mean', 'cls' or 'last'");
    }
    std::vector<PyEmbeddingRequestOutput> results(texts.size());
    std::map<uint64_t, size_t> index_of;
    const std::vector<std::optional<PyLoRARequest>> lora = LoraRequestsFor(lora_request, texts.size());
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<std::vector<std::string>> adapters = lora_->Resolve(lora, *engine_);
    if (!adapters.ok()) {
      py::gil_scoped_acquire gil;
      Raise(adapters.status());
    }
    auto fail = [&](const Status& st) {
      for (const auto& [id, i] : index_of) engine_->Cancel(id);
      StepUntilIdle();
      for (const auto& [id, i] : index_of) parked_.erase(id);
      py::gil_scoped_acquire gil;
      Raise(st);
    };
    for (size_t i = 0; i < texts.size(); ++i) {
      results[i].request_id = std::to_string(next_id_++);
      results[i].prompt_token_ids = lm_.tokenizer->Encode(texts[i], true, false);
      p.lora_adapter = (*adapters)[i];
      auto id = engine_->Add(results[i].prompt_token_ids, p);
      if (!id.ok()) fail(Status(id.status().code(), "prompt " + std::to_string(i) + ": " + id.status().message()));
      index_of[*id] = i;
    }
    size_t open = index_of.size();
    while (open > 0 && engine_->HasWork()) {
      for (RequestOutput& o : engine_->Step()) {
        auto it = index_of.find(o.id);
        if (it == index_of.end()) {  // a stream's request: kept for its iterator
          parked_[o.id].push_back(std::move(o));
          continue;
        }
        if (!o.finished) continue;
        if (o.finish_reason == FinishReason::kError) fail(Status(StatusCode::kInternal, o.error));
        results[it->second].outputs.embedding = std::move(o.embedding);
        results[it->second].finished = true;
        --open;
      }
    }
    return results;
  }

  std::unique_ptr<Stream> MakeStream(const std::string& prompt, const py::object& params) {
    return StreamOf(lm_.tokenizer->Encode(prompt, true, false), params);
  }
  std::unique_ptr<Stream> MakeChatStream(const py::list& messages, const py::object& params, const py::object& tools,
                                         const py::object& chat_template_kwargs) {
    return StreamOf(EncodeConversation(messages, true, tools, chat_template_kwargs), params);
  }

  std::vector<int32_t> Encode(const std::string& text, bool add_special) const {
    return lm_.tokenizer->Encode(text, add_special, false);
  }
  std::string Decode(const std::vector<int32_t>& ids) const {
    for (int32_t id : ids) {
      if (id < 0 || id >= lm_.tokenizer->n_vocab()) throw py::value_error("token id out of range");
    }
    return lm_.tokenizer->Decode(ids);
  }
  int max_model_len() const { return engine_->max_model_len(); }

 private:
  std::vector<int32_t> EncodeConversation(const py::list& conv, bool add_generation_prompt, const py::object& tools,
                                          const py::object& kwargs) const {
    return EncodeChatMessages(*lm_.tokenizer, chat_template_, conv, add_generation_prompt, tools, kwargs);
  }

  std::unique_ptr<Stream> StreamOf(std::vector<int32_t> prompt, const py::object& params) {
    const auto p = ParamsFor(params, 1);
    if (p[0].second != 1) throw py::value_error("stream: n must be 1");
    return std::make_unique<Stream>(this, std::move(prompt), p[0].first);
  }

  // (engine parameters, n) per prompt.
  std::vector<std::pair<RequestParams, int>> ParamsFor(const py::object& params, size_t count) const {
    std::vector<std::pair<RequestParams, int>> out;
    if (params.is_none()) {
      PySamplingParams d;
      out.assign(count, {d.ToRequest(), 1});
    } else if (py::isinstance<PySamplingParams>(params)) {
      const auto& sp = params.cast<const PySamplingParams&>();
      out.assign(count, {sp.ToRequest(), sp.n});
    } else {
      auto list = params.cast<std::vector<PySamplingParams>>();
      if (list.size() != count) throw py::value_error("give one SamplingParams, or one per prompt");
      for (const auto& sp : list) out.push_back({sp.ToRequest(), sp.n});
    }
    return out;
  }

  std::vector<PyRequestOutput> Run(const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<std::optional<std::string>>& shown,
                                   const std::vector<std::pair<RequestParams, int>>& params,
                                   const std::vector<std::optional<PyLoRARequest>>& lora) {
    std::vector<PyRequestOutput> results(prompts.size());
    struct Slot {
      size_t prompt;
      int choice;
    };
    std::map<uint64_t, Slot> slot_of;
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    auto cancel_all = [&] {
      for (const auto& [id, s] : slot_of) engine_->Cancel(id);
      StepUntilIdle();
      for (const auto& [id, s] : slot_of) parked_.erase(id);
    };
    StatusOr<std::vector<std::string>> adapters = lora_->Resolve(lora, *engine_);
    if (!adapters.ok()) {
      py::gil_scoped_acquire gil;
      Raise(adapters.status());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      PyRequestOutput& r = results[i];
      r.request_id = std::to_string(next_id_++);
      r.prompt = shown[i];
      r.prompt_token_ids = prompts[i];
      r.outputs.resize(params[i].second);
      for (int c = 0; c < params[i].second; ++c) {
        RequestParams p = params[i].first;
        p.lora_adapter = (*adapters)[i];
        if (!p.sampling.has_seed && seed_) {
          p.sampling.seed = *seed_ + 0x9E3779B97F4A7C15ull * next_id_;
          p.sampling.has_seed = true;
        }
        if (p.sampling.has_seed) p.sampling.seed += static_cast<uint64_t>(c);  // choices differ, yet reproduce
        r.outputs[c].index = c;
        auto id = engine_->Add(prompts[i], p);
        if (!id.ok()) {
          cancel_all();
          py::gil_scoped_acquire gil;
          Raise(Status(id.status().code(), "prompt " + std::to_string(i) + ": " + id.status().message()));
        }
        slot_of[*id] = {i, c};
      }
    }
    size_t open = slot_of.size();
    while (open > 0 && engine_->HasWork()) {
      for (const RequestOutput& o : engine_->Step()) {
        auto it = slot_of.find(o.id);
        if (it == slot_of.end()) {  // a stream's request: kept for its iterator
          parked_[o.id].push_back(o);
          continue;
        }
        PyRequestOutput& r = results[it->second.prompt];
        PyCompletionOutput& c = r.outputs[it->second.choice];
        const RequestParams& rp = params[it->second.prompt].first;
        AppendOutput(o, *lm_.tokenizer, rp.logprobs >= 0, rp.prompt_logprobs, &r, &c);
        if (o.finished) {
          if (o.finish_reason == FinishReason::kError) {
            cancel_all();
            py::gil_scoped_acquire gil;
            throw std::runtime_error(o.error);
          }
          c.finish_reason = OpenAiFinishReason(o.finish_reason);
          if (!o.stop_string.empty()) c.stop_reason = o.stop_string;
          if (o.stop_token >= 0) c.stop_reason = o.stop_token;
          r.num_cached_tokens = std::max(r.num_cached_tokens, o.cached_tokens);
          --open;
        }
      }
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        py::gil_scoped_release again;
        cancel_all();
        py::gil_scoped_acquire back;
        throw py::error_already_set();
      }
    }
    for (PyRequestOutput& r : results) r.finished = true;
    return results;
  }

  // Steps until every cancelled request has left (their blocks freed);
  // streams' outputs are parked. Needs mu_.
  void StepUntilIdle() {
    while (engine_->HasWork()) {
      bool others = false;
      for (RequestOutput& o : engine_->Step()) {
        others = others || !o.finished;
        parked_[o.id].push_back(std::move(o));
      }
      if (others) break;  // a live stream's request: it runs when iterated
    }
  }

  std::unique_ptr<KernelTable> kernels_;
  cli::LoadedModel lm_;
  ChatTemplate chat_template_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LoraCache> lora_;  // (guarded by mu_)
  std::mutex mu_;  // one call drives the engine at a time
  // Outputs produced for a stream's request while another call stepped the
  // engine, until that stream's iterator takes them. Guarded by mu_.
  std::map<uint64_t, std::vector<RequestOutput>> parked_;
  uint64_t next_id_ = 0;
  // vLLM's LLM(seed=): requests without a seed of their own get one from it
  // (and their request number), so a script's runs reproduce.
  const std::optional<uint64_t> seed_;
};

}  // namespace
}  // namespace infera::python

PYBIND11_MODULE(_infera, m) {
  using namespace infera::python;
  m.doc() = "infera: offline batch generation on infera's engine (vLLM's LLM / SamplingParams interface)";
  m.attr("__version__") = INFERA_VERSION;

  BindValueTypes(m);

  py::class_<PyEmbeddingOutput>(m, "EmbeddingOutput")
      .def_readonly("embedding", &PyEmbeddingOutput::embedding)
      .def("__repr__", [](const PyEmbeddingOutput& e) {
        return "EmbeddingOutput(embedding=[" + std::to_string(e.embedding.size()) + " floats])";
      });
  py::class_<PyEmbeddingRequestOutput>(m, "EmbeddingRequestOutput")
      .def_readonly("request_id", &PyEmbeddingRequestOutput::request_id)
      .def_readonly("prompt_token_ids", &PyEmbeddingRequestOutput::prompt_token_ids)
      .def_readonly("outputs", &PyEmbeddingRequestOutput::outputs)
      .def_readonly("finished", &PyEmbeddingRequestOutput::finished);
  py::class_<LLM::Stream>(m, "Stream")
      .def("__iter__", &LLM::Stream::Iter, py::return_value_policy::reference_internal)
      .def("__next__", &LLM::Stream::Next);

  py::class_<LLM>(m, "LLM")
      .def(py::init([](const std::string& model, const std::string& tokenizer, int max_num_seqs, int max_model_len,
                       int threads, int64_t kv_cache_mb, int max_num_batched_tokens, bool enable_prefix_caching,
                       const std::string& chat_template, const std::string& cpu_isa, const std::string& log_level,
                       std::optional<uint64_t> seed, const std::string& dtype, int tensor_parallel_size,
                       float gpu_memory_utilization, bool enforce_eager, bool trust_remote_code, bool enable_lora,
                       int max_loras, int max_lora_rank, std::optional<int> max_cpu_loras) {
             // vLLM's GPU and loading options: one that would change what runs is refused, the rest
             // mean nothing on a CPU (a note when set).
             if (tensor_parallel_size != 1) {
               throw py::value_error(
                   "tensor_parallel_size: tensor parallelism runs across processes "
                   "(mpirun -n N infera serve --tp N)");
             }
             auto llm = std::make_unique<LLM>(model, tokenizer, max_num_seqs, max_model_len, threads, kv_cache_mb,
                                              max_num_batched_tokens, enable_prefix_caching, chat_template, cpu_isa,
                                              log_level, seed, enable_lora, max_loras);
             // vLLM sizes GPU buffers by these; adapters here are kept as loaded, of any rank.
             (void)max_lora_rank;
             (void)max_cpu_loras;
             if (dtype != "auto") LOG_WARN("dtype '{}' ignored: weights keep the model file's types", dtype);
             if (gpu_memory_utilization != 0.9f || enforce_eager || trust_remote_code) {
               LOG_WARN("gpu_memory_utilization, enforce_eager and trust_remote_code mean nothing here (ignored)");
             }
             return llm;
           }),
           py::arg("model") = "", py::kw_only(), py::arg("tokenizer") = "", py::arg("max_num_seqs") = 64,
           py::arg("max_model_len") = 0, py::arg("threads") = 0, py::arg("kv_cache_mb") = 0,
           py::arg("max_num_batched_tokens") = 512, py::arg("enable_prefix_caching") = true,
           py::arg("chat_template") = "", py::arg("cpu_isa") = "", py::arg("log_level") = "warn",
           py::arg("seed") = py::none(), py::arg("dtype") = "auto", py::arg("tensor_parallel_size") = 1,
           py::arg("gpu_memory_utilization") = 0.9f, py::arg("enforce_eager") = false,
           py::arg("trust_remote_code") = false, py::arg("enable_lora") = false, py::arg("max_loras") = 1,
           py::arg("max_lora_rank") = 16, py::arg("max_cpu_loras") = py::none())
      .def("generate", &LLM::Generate, py::arg("prompts"), py::arg("sampling_params") = py::none(), py::kw_only(),
           py::arg("use_tqdm") = true, py::arg("lora_request") = py::none())
      .def("chat", &LLM::Chat, py::arg("messages"), py::arg("sampling_params") = py::none(),
           py::arg("add_generation_prompt") = true, py::kw_only(), py::arg("tools") = py::none(),
           py::arg("chat_template_kwargs") = py::none(), py::arg("use_tqdm") = true,
           py::arg("lora_request") = py::none())
      .def("stream", &LLM::MakeStream, py::arg("prompt"), py::arg("sampling_params") = py::none(),
           py::keep_alive<0, 1>())
      .def("stream_chat", &LLM::MakeChatStream, py::arg("messages"), py::arg("sampling_params") = py::none(),
           py::kw_only(), py::arg("tools") = py::none(), py::arg("chat_template_kwargs") = py::none(),
           py::keep_alive<0, 1>())
      .def("embed", &LLM::Embed, py::arg("prompts"), py::kw_only(), py::arg("pooling") = py::none(),
           py::arg("normalize") = true, py::arg("lora_request") = py::none())
      .def("encode", &LLM::Encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode", &LLM::Decode, py::arg("token_ids"))
      .def_property_readonly("max_model_len", &LLM::max_model_len);
}
