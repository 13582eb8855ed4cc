#include "infera/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "attention/kv_storage.h"
#include "base/check.h"
#include "base/logging.h"
#include "engine/draft_model.h"
#include "engine/engine_options_check.h"
#include "engine/engine_request.h"
#include "engine/kv_offloader.h"
#include "engine/lora_selection.h"
#include "engine/ngram_draft.h"
#include "engine/spec_policy.h"
#include "engine/stop_checker.h"
#include "kernels/kernels.h"
#include "kv_cache/block_manager.h"
#include "model/batch.h"
#include "model/model.h"
#include "model/model_runner.h"
#include "sampling/grammar_constraint.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace infera {

// (OpenAI's endpoints allow 20, llama-server's n_probs more.)
constexpr int32_t kMaxTopLogprobs = 1000;

struct Engine::Impl {
  const Model& model;
  const Tokenizer* tok;
  const KernelTable& kernels;
  EngineOptions opts;
  ThreadPool pool;
  std::unique_ptr<ModelRunner> runner;
  KvStorage kv;
  BlockManager blocks;
  Scheduler sched;
  std::map<uint64_t, std::unique_ptr<EngineRequest>> reqs;
  uint64_t next_id = 1;
  uint64_t steps = 0;
  int32_t last_step_tokens = 0;
  ForwardBatch batch;
  std::vector<ChunkRows> rows;   // per scheduled chunk of the step
  std::vector<float> logits;
  std::vector<int32_t> eog_ids;  // every end-of-generation id (for min_tokens)
  // The vocabulary's token bytes as a trie, for grammar masks (built on the
  // first constrained request).
  std::shared_ptr<const VocabTrie> vocab_trie;
  const std::shared_ptr<const VocabTrie>& VocabForGrammars() {
    if (!vocab_trie) {
      std::vector<std::string> pieces(tok->n_vocab());
      for (int32_t id = 0; id < tok->n_vocab(); ++id) pieces[id] = tok->TokenToPiece(id);
      vocab_trie = std::make_shared<const VocabTrie>(std::move(pieces));
    }
    return vocab_trie;
  }
  std::vector<float> raw;        // scratch: logits before bias and penalties
  uint64_t spec_drafted = 0, spec_accepted = 0;
  StepCostModel step_cost;  // single-sequence decode steps' wall times
  std::unique_ptr<DraftModelProposer> drafter;  // with spec == "draft"
  std::unique_ptr<KvOffloader> offload;         // with kv_offload enabled
  // Sessions seen by this engine: id -> tokens of the latest turn (bounded;
  // the tiers keep a record of each too).
  std::unordered_map<std::string, std::vector<int32_t>> sessions;
  static constexpr size_t kMaxSessions = 4096;
  std::vector<uint64_t> pinned_reqs;  // requests holding pinned blocks (loaded from a tier), not yet admitted
  LoraSlots lora;

  std::vector<uint8_t> LoraInUse() const { return LoraSlotsInUse(lora.n_slots(), reqs); }
  // Empties the unloaded LoRA slots that no request uses any more.
  void FreeDrainedLora() {
    if (lora.draining()) lora.FreeDrained(LoraInUse());
  }

  Impl(const Model& m, const Tokenizer* t, const KernelTable& k, const EngineOptions& o, int32_t n_blocks, KvType kt,
       const ModelRunnerFactory& make_runner)
      : model(m),
        tok(t),
        kernels(k),
        opts(o),
        pool(o.threads),
        runner(make_runner ? make_runner(pool) : MakeModelRunner(m, k, pool, o.max_model_len)),
        kv(m.config.KvHeadsPerLayer(), n_blocks * o.kv_block_size, m.config.head_dim, kt),
        blocks(n_blocks, o.kv_block_size, o.prefix_caching),
        sched(SchedulerConfig{o.max_num_seqs, o.max_batched_tokens, o.max_model_len, o.guaranteed_admission,
                              o.context_shift, o.free_outside_window ? UniformSlidingWindow(m.config) : 0},
              &blocks),
        lora(o) {
    for (int32_t id = 0; id < m.config.n_vocab; ++id) {
      if (IsEog(id)) eog_ids.push_back(id);
    }
    if (o.spec == "draft") {
      drafter = std::make_unique<DraftModelProposer>(*o.draft_model, k, pool, n_blocks * o.kv_block_size,
                                                     o.kv_block_size, o.max_model_len, o.spec_draft_context);
    }
  }

  bool IsEog(int32_t id) const {
    if (tok != nullptr && tok->vocab().IsEog(id)) return true;
    return std::find(model.extra_eog_ids.begin(), model.extra_eog_ids.end(), id) != model.extra_eog_ids.end();
  }

  // The counters and timing of request `id` into o.
  void Describe(uint64_t id, const EngineRequest& r, RequestOutput* o) const {
    o->id = id;
    o->prompt_tokens = r.prompt_len;
    o->completion_tokens = r.generated;
    o->cached_tokens = sched.Has(id) ? sched.CachedTokens(id) : 0;
    r.Timing(o);
  }

  // Ends request `id`, completing `o` (which may already carry this step's
  // token and text). stopped_by_string: the text after the stop string is
  // dropped, not flushed.
  RequestOutput Finish(uint64_t id, FinishReason why, std::string error = {}, bool stopped_by_string = false,
                       RequestOutput o = {}) {
    EngineRequest& r = *reqs.at(id);
    o.finished = true;
    o.finish_reason = why;
    o.error = std::move(error);
    if (r.decoder && !stopped_by_string) {
      bool stopped = false;
      o.text += r.stops.Push(r.decoder->Flush(), &stopped);
      if (!stopped) o.text += r.stops.Flush();
    }
    if (why == FinishReason::kStop) o.stop_string = r.stops.matched();
    if (stopped_by_string && r.params.include_stop_str_in_output) o.text += o.stop_string;
    Describe(id, r, &o);
    if (offload && !r.params.session_id.empty() && why != FinishReason::kError && sched.Has(id)) {
      if (sessions.size() >= kMaxSessions && !sessions.count(r.params.session_id)) sessions.erase(sessions.begin());
      std::vector<int32_t>& t = sessions[r.params.session_id];
      t = sched.Tokens(id);
      offload->PinSession(r.params.session_id, t, opts.kv_offload.ttl_seconds);
    }
    sched.Finish(id);  // blocks back to the pool now
    Unpin(r);
    if (offload && r.fetching) offload->Forget(id);
    if (drafter) drafter->Forget(id);
    reqs.erase(id);
    return o;
  }

  void Unpin(EngineRequest& r) {
    for (int32_t b : r.pinned) blocks.Unpin(b);
    r.pinned.clear();
  }

  // KV offload: requests whose prefix lookup finished join the scheduler,
  // with the blocks found loaded and pinned. Waits a little for a lookup
  // when there is nothing else to do.
  void TakeFetched(std::vector<RequestOutput>* outs) {
    if (!offload || !offload->fetching()) return;
    const auto wait = std::chrono::milliseconds(sched.HasWork() ? 0 : 5);
    const int32_t reserve = sched.num_running() + 1;
    for (KvOffloader::Ready& ready : offload->Install(blocks, kv, wait, reserve)) {
      auto it = reqs.find(ready.id);
      if (it == reqs.end()) {
        for (int32_t b : ready.pinned) blocks.Unpin(b);
        continue;
      }
      EngineRequest& r = *it->second;
      r.fetching = false;
      r.pinned = std::move(ready.pinned);
      pinned_reqs.push_back(ready.id);
      Status st = sched.Add(ready.id, std::move(r.held_prompt), r.max_tokens, r.params.priority, r.max_cached);
      if (!st.ok()) outs->push_back(Finish(ready.id, FinishReason::kError, st.message()));
    }
  }

  // Speculative decoding: drafts for every sequence about to decode, while
  // few sequences run.
  void Draft() {
    if (opts.spec == "none" || sched.num_running() > opts.spec_max_seqs) return;
    std::vector<DraftModelProposer::Want> wants;
    for (auto& [id, r] : reqs) {
      if (r->cancel || !sched.IsDecoding(id)) continue;
      // The token sampled from the last draft's row is extra: no draft past
      // max_tokens.
      int32_t k = std::min(opts.spec_draft_max, r->max_tokens - r->generated - 1);
      if (k < std::max(1, opts.spec_draft_min)) continue;
      if (drafter) {  // as many as pay, drafted below for all sequences at once
        if (opts.spec_adaptive) {
          k = r->probes.Next(ChooseDraftLength(r->acceptance.alpha(), step_cost.position_cost(), k));
        }
        if (k >= std::max(1, opts.spec_draft_min)) {
          // A probe catches the draft model up on the recent tokens only.
          wants.push_back({id, &sched.Tokens(id), k, r->probes.probing() ? kSpecProbeCatchUp : 0});
        }
        continue;
      }
      std::vector<int32_t> d = NgramDraft(sched.Tokens(id), opts.spec_ngram_min, opts.spec_ngram_max, k);
      // As many as pay for their verification (spec_policy.h).
      if (opts.spec_adaptive && !d.empty()) {
        d.resize(r->probes.Next(
            ChooseDraftLength(r->acceptance.alpha(), step_cost.position_cost(), static_cast<int32_t>(d.size()))));
      }
      if (static_cast<int32_t>(d.size()) >= std::max(1, opts.spec_draft_min)) sched.SetDraft(id, std::move(d));
    }
    if (wants.empty()) return;
    const auto t_draft = EngineRequest::Clock::now();
    std::vector<std::vector<int32_t>> drafts = drafter->Propose(wants, opts.spec_p_min);
    if (wants.size() == 1) {  // the draft model's cost, as the step cost is measured: one sequence
      step_cost.ObserveDraft(wants[0].max_draft,
                             std::chrono::duration<double>(EngineRequest::Clock::now() - t_draft).count());
    }
    for (size_t i = 0; i < wants.size(); ++i) {
      if (static_cast<int32_t>(drafts[i].size()) >= std::max(1, opts.spec_draft_min)) {
        sched.SetDraft(wants[i].id, std::move(drafts[i]));
      } else if (opts.spec_adaptive) {
        // Asked for and paid, but nothing to verify (the draft model was not
        // confident enough, --draft-p-min): for the policy a position that
        // yielded no token, as a rejected one, so a draft model that rarely
        // drafts stops being asked (then probed: ProbeSchedule).
        reqs.at(wants[i].id)->acceptance.Verified(1, 0);
      }
    }
  }

  // Samples request `id`'s next token from logits row `lg` [n_vocab] (changed
  // in place), appends it to the sequence (kv_computed: a verified draft,
  // whose K/V is in the cache) and into `o`. Returns the finish reason
  // (kNone: goes on) and sets *stopped_by_string.
  FinishReason SampleNext(uint64_t id, EngineRequest& r, float* lg, RequestOutput& o, int32_t* token,
                          const int32_t* draft, bool* stopped) {
    const int32_t V = model.config.n_vocab;
    if (r.params.logprobs >= 0 && !r.params.logprobs_processed) raw.assign(lg, lg + V);
    for (const auto& [t, bias] : r.params.logit_bias) lg[t] += bias;
    if (r.generated < r.params.min_tokens) {
      if (!r.params.ignore_eos) {
        for (int32_t t : eog_ids) lg[t] = -std::numeric_limits<float>::infinity();
      }
      for (int32_t t : r.params.stop_token_ids) lg[t] = -std::numeric_limits<float>::infinity();
    }
    *stopped = false;
    if (r.constraint && r.constraint->Mask(lg, V) == 0) return FinishReason::kStop;  // nothing may follow
    const int32_t next = r.sampler.Sample(lg, V, sched.Tokens(id));
    *token = next;
    if (!r.params.ignore_eos && IsEog(next)) return FinishReason::kStop;
    if (std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(), next) !=
        r.params.stop_token_ids.end()) {
      o.stop_token = next;
      return FinishReason::kStop;
    }
    if (r.constraint && !r.constraint->Advance(next)) {
      return FinishReason::kStop;  // (cannot happen: the token was allowed)
    }
    const bool accepted = draft != nullptr && *draft == next;
    sched.Append(id, next, accepted);
    spec_accepted += accepted ? 1 : 0;
    ++r.generated;
    if (!r.has_first) {
      r.has_first = true;
      r.t_first = EngineRequest::Clock::now();
    }
    o.tokens.push_back(next);
    if (r.params.logprobs >= 0 && r.params.logprobs_processed) {
      TokenLogprob lp;
      lp.token = next;
      r.sampler.LastDistribution(next, r.params.logprobs, &lp.logprob, &lp.top, &lp.rank);
      o.logprobs.push_back(std::move(lp));
    } else if (r.params.logprobs >= 0) {
      o.logprobs.push_back(LogprobsOf(raw.data(), V, next, r.params.logprobs));
    }
    if (r.decoder) o.text += r.stops.Push(r.decoder->Push(next), stopped);
    if (*stopped) return FinishReason::kStop;
    if (r.constraint && r.constraint->MustEnd()) return FinishReason::kStop;  // the sentence is complete
    if (r.generated >= r.max_tokens) return FinishReason::kLength;
    return FinishReason::kNone;
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const Tokenizer* tokenizer,
                                                 const KernelTable& kernels, const EngineOptions& opts) {
  return Create(model, tokenizer, kernels, opts, nullptr);
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const Tokenizer* tokenizer,
                                                 const KernelTable& kernels, const EngineOptions& given,
                                                 const ModelRunnerFactory& make_runner) {
  EngineOptions o = given;
  const ModelConfig& c = model.config;
  RETURN_IF_ERROR(CheckEngineOptions(c, &o));
  RETURN_IF_ERROR(CheckLoraAdapters(o, static_cast<bool>(make_runner), model.shard.split()));
  KvType kt;
  if (!ParseKvType(o.kv_cache_type, &kt)) return InvalidArgument("--kv-cache-type must be f32, bf16 or q8");
  if (kt == KvType::kBF16 && std::string_view(kernels.flash_bf16_variant) != "avx512bf16-tiled") {
    LOG_WARN("--kv-cache-type bf16 without AVX512-BF16: emulated ({}), slower than f32", kernels.flash_bf16_variant);
  }
  const uint64_t per_token = KvStorage::BytesFor(c.KvHeadsPerLayer(), 1, c.head_dim, kt);
  ASSIGN_OR_RETURN(const int64_t n_blocks, KvCacheBlocks(o, per_token));
  auto impl = std::make_unique<Impl>(model, tokenizer, kernels, o, static_cast<int32_t>(n_blocks), kt, make_runner);
  if (const int32_t w = UniformSlidingWindow(c); w > 0 && o.free_outside_window) {
    LOG_INFO("engine: every layer attends within {} positions: KV blocks behind the window are released "
             "(at most {} blocks per sequence)", w, (w + o.kv_block_size - 1) / o.kv_block_size + 2);
  }
  if (o.kv_offload.enabled()) {
    ASSIGN_OR_RETURN(impl->offload,
                     KvOffloader::Create(model, kt, o.kv_block_size, o.max_model_len, o.kv_offload, kernels));
    impl->blocks.set_record_commits(true);
  }
  LOG_INFO("engine: KV cache {:.1f} MiB ({}) = {} blocks of {} tokens ({} tokens), context {}, max {} seqs, {} tokens/step",
           per_token * n_blocks * o.kv_block_size / 1048576.0,
           o.kv_cache_type, n_blocks, o.kv_block_size, n_blocks * o.kv_block_size, o.max_model_len, o.max_num_seqs,
           o.max_batched_tokens);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

int32_t Engine::ResolveMaxTokens(size_t prompt_len, int32_t max_tokens) const {
  if (max_tokens >= 0) return max_tokens;
  // Without a limit: to the context end (with context shift: without end; a
  // large cap keeps the count finite).
  const Impl& m = *impl_;
  return m.opts.context_shift ? (1 << 30) : std::max(1, m.opts.max_model_len - static_cast<int32_t>(prompt_len));
}

Status Engine::Check(const std::vector<int32_t>& prompt, const RequestParams& params) const {
  const Impl& m = *impl_;
  RETURN_IF_ERROR(ValidateSamplingParams(params.sampling));
  for (int32_t t : prompt) {
    if (t < 0 || t >= m.model.config.n_vocab) {
      return InvalidArgument(fmt::format("token id {} is out of range [0, {})", t, m.model.config.n_vocab));
    }
  }
  if (params.grammar && m.tok == nullptr) return InvalidArgument("a grammar needs the model's tokenizer");
  if (params.grammar && params.pooling != Pooling::kNone) return InvalidArgument("embeddings take no grammar");
  if (params.pooling != Pooling::kNone) {
    if (params.max_tokens != 0 || FirstPromptRow(params) >= 0 || params.logprobs >= 0) {
      return InvalidArgument("an embedding request generates and scores nothing: max_tokens must be 0");
    }
    if (m.model.shard.pp_size > 1) {
      return Unimplemented("embeddings of a pipeline-split model (--pp) are not supported; use --tp");
    }
    if (prompt.empty()) return InvalidArgument("the input is empty");
  }
  if (params.max_tokens < -1 || (params.max_tokens == 0 && FirstPromptRow(params) < 0 && params.pooling == Pooling::kNone)) {
    return InvalidArgument("max_tokens must be positive");
  }
  if (params.prompt_logprobs > kMaxTopLogprobs) {
    return InvalidArgument(fmt::format("prompt logprobs must be at most {}", kMaxTopLogprobs));
  }
  if (params.prompt_logits_from >= static_cast<int64_t>(prompt.size())) {
    return InvalidArgument(fmt::format("prompt_logits_from {} is past the prompt's {} tokens", params.prompt_logits_from,
                                       prompt.size()));
  }
  if (params.min_tokens < 0) return InvalidArgument("min_tokens must be >= 0");
  RETURN_IF_ERROR(CheckLoraScales(params, m.opts.lora_adapters.size() + m.opts.max_runtime_loras));
  if (!params.detokenize && !params.stop.empty()) return InvalidArgument("stop strings need detokenize");
  if (params.logprobs > kMaxTopLogprobs) {
    return InvalidArgument(fmt::format("logprobs must be at most {}", kMaxTopLogprobs));
  }
  for (int32_t t : params.stop_token_ids) {
    if (t < 0 || t >= m.model.config.n_vocab) {
      return InvalidArgument(fmt::format("stop token id {} is out of range [0, {})", t, m.model.config.n_vocab));
    }
  }
  for (const auto& [t, bias] : params.logit_bias) {
    if (t < 0 || t >= m.model.config.n_vocab) {
      return InvalidArgument(fmt::format("logit_bias token id {} is out of range [0, {})", t, m.model.config.n_vocab));
    }
    if (!std::isfinite(bias)) return InvalidArgument("logit_bias values must be finite");
  }
  return m.sched.Check(prompt.size(), ResolveMaxTokens(prompt.size(), params.max_tokens));
}

StatusOr<uint64_t> Engine::Add(std::vector<int32_t> prompt, const RequestParams& params) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(Check(prompt, params));
  const int32_t len = static_cast<int32_t>(prompt.size());
  const int32_t max_tokens = ResolveMaxTokens(prompt.size(), params.max_tokens);
  const uint64_t id = m.next_id++;
  // Rows wanted from there on are never served by the prefix cache.
  int32_t first_row = FirstPromptRow(params);
  if (const int32_t h = FirstHiddenRow(params, len); h >= 0) first_row = first_row >= 0 ? std::min(first_row, h) : h;
  const int32_t max_cached = first_row >= 0 ? first_row : INT32_MAX;
  auto r = std::make_unique<EngineRequest>(params, m.tok);
  if (params.grammar) {
    r->constraint = std::make_unique<GrammarConstraint>(
        params.grammar, m.VocabForGrammars(), params.ignore_eos ? std::vector<int32_t>{} : m.eog_ids,
        /*strip_first_space=*/params.text_starts_output && m.tok->vocab().add_space_prefix);
  }
  r->prompt_len = len;
  r->max_tokens = max_tokens;
  r->max_cached = max_cached;
  ASSIGN_OR_RETURN(LoraSelection lora, m.lora.Select(params));
  r->lora = std::move(lora.scales);
  r->cache_root = lora.cache_root;
  if (!r->lora.empty() && !params.session_id.empty()) {
    return InvalidArgument("sessions (session_id) cannot be used with LoRA adapters");
  }
  // (The offload tiers hold the plain model's K/V only.)
  if (r->lora.empty() && m.offload && m.offload->StartFetch(id, prompt, std::min(len - 1, max_cached), m.blocks)) {
    r->fetching = true;  // joins the scheduler when the lookup is done
    r->held_prompt = std::move(prompt);
  } else {
    RETURN_IF_ERROR(m.sched.Add(id, std::move(prompt), max_tokens, params.priority, max_cached, r->cache_root));
  }
  m.reqs.emplace(id, std::move(r));
  return id;
}

void Engine::Cancel(uint64_t id) {
  auto it = impl_->reqs.find(id);
  if (it != impl_->reqs.end()) it->second->cancel = true;
}

bool Engine::HasWork() const { return !impl_->reqs.empty(); }

int32_t Engine::max_model_len() const { return impl_->opts.max_model_len; }
int32_t Engine::n_vocab() const { return impl_->model.config.n_vocab; }
int32_t Engine::max_num_seqs() const { return impl_->opts.max_num_seqs; }

EngineStats Engine::Stats() const {
  const Impl& m = *impl_;
  EngineStats s;
  s.num_running = m.sched.num_running();
  s.num_waiting = m.sched.num_waiting();
  s.num_preempted = m.sched.num_preempted_waiting();
  s.last_step_tokens = m.last_step_tokens;
  s.kv_blocks_total = m.blocks.num_blocks();
  s.kv_blocks_used = m.blocks.pool().num_used();
  s.kv_block_size = m.blocks.block_size();
  s.prefix_cache_queries = m.blocks.prefix_queries();
  s.prefix_cache_hits = m.blocks.prefix_hits();
  s.num_preemptions = m.sched.num_preemptions();
  s.prefill_tokens_computed = m.sched.prefill_tokens_computed();
  s.steps = m.steps;
  s.kv_cache_bytes = m.kv.bytes();
  s.kv_tokens_held = m.sched.TokensHeld();
  s.spec_draft_tokens = m.spec_drafted;
  s.spec_accepted_tokens = m.spec_accepted;
  s.spec_token_cost_ratio = m.step_cost.marginal_ratio();
  OffloadStats(&s);
  return s;
}

StatusOr<SessionInfo> Engine::SaveSession(const std::string& id) {
  Impl& m = *impl_;
  if (!m.offload) return InvalidArgument("sessions need a KV offload tier (--kv-offload-dir or --kv-offload-redis)");
  std::vector<int32_t> tokens;
  if (auto it = m.sessions.find(id); it != m.sessions.end()) {
    tokens = it->second;
  } else {
    ASSIGN_OR_RETURN(tokens, m.offload->SessionTokens(id));
  }
  auto [blocks, written] = m.offload->SaveSession(id, tokens, m.opts.kv_offload.ttl_seconds, m.blocks, m.kv,
                                                  std::chrono::seconds(5));
  return SessionInfo{id, static_cast<int64_t>(tokens.size()), blocks, written};
}

StatusOr<SessionInfo> Engine::DeleteSession(const std::string& id) {
  Impl& m = *impl_;
  if (!m.offload) return InvalidArgument("sessions need a KV offload tier (--kv-offload-dir or --kv-offload-redis)");
  std::vector<int32_t> tokens;
  if (auto it = m.sessions.find(id); it != m.sessions.end()) {
    tokens = std::move(it->second);
    m.sessions.erase(it);
  } else {
    ASSIGN_OR_RETURN(tokens, m.offload->SessionTokens(id));
  }
  RETURN_IF_ERROR(m.offload->DeleteSession(id, tokens));
  return SessionInfo{id, static_cast<int64_t>(tokens.size()),
                     static_cast<int64_t>(tokens.size()) / m.blocks.block_size(), 0};
}

StatusOr<int32_t> Engine::LoadLoraAdapter(std::shared_ptr<const LoraAdapter> adapter, bool replace) {
  impl_->FreeDrainedLora();
  if (replace) return impl_->lora.Replace(std::move(adapter), impl_->LoraInUse());
  return impl_->lora.Load(std::move(adapter));
}

StatusOr<int32_t> Engine::UnloadLoraAdapter(const std::string& name) {
  ASSIGN_OR_RETURN(const int32_t slot, impl_->lora.Unload(name));
  impl_->FreeDrainedLora();
  return slot;
}

void Engine::OffloadStats(EngineStats* s) const {
  const Impl& m = *impl_;
  if (!m.offload) return;
  const kv_offload::OffloadCounters c = m.offload->Counters();
  s->kv_offload_tiers.clear();
  for (const kv_offload::TierCounters& t : c.tiers) {
    s->kv_offload_tiers.push_back({t.tier, t.hits, t.misses, t.errors, t.corrupt, t.read_bytes, t.written_bytes,
                                   t.writes, t.skipped, t.gets, t.get_seconds, t.healthy});
  }
  s->kv_offload_dropped_writes = c.dropped_writes;
  s->kv_offload_loaded_blocks = m.offload->loaded_blocks();
}

std::vector<RequestOutput> Engine::Step() {
  Impl& m = *impl_;
  std::vector<RequestOutput> outs;
  // Cancelled requests leave first: their blocks are free for this step.
  for (auto it = m.reqs.begin(); it != m.reqs.end();) {
    const uint64_t id = it->first;
    const bool cancel = it->second->cancel;
    ++it;
    if (cancel) outs.push_back(m.Finish(id, FinishReason::kCancelled));
  }
  m.FreeDrainedLora();
  m.TakeFetched(&outs);
  // Blocks registered by the last step are written through before any block
  // can be reused.
  if (m.offload) m.offload->WriteThrough(m.blocks, m.kv);
  m.Draft();
  SchedulerOutput so = m.sched.Schedule();
  m.last_step_tokens = 0;
  // Loaded blocks stay pinned until their request is admitted (it holds them
  // then), so that other requests' allocations cannot evict them while it
  // waits. A step that schedules nothing releases every pin: pinned blocks
  // of waiting requests must never be what keeps all of them from running.
  for (const ScheduledChunk& c : so.chunks) m.Unpin(*m.reqs.at(c.id));
  if (so.empty()) {
    for (uint64_t id : m.pinned_reqs) {
      if (auto it = m.reqs.find(id); it != m.reqs.end()) m.Unpin(*it->second);
    }
  }
  std::erase_if(m.pinned_reqs, [&](uint64_t id) {
    auto it = m.reqs.find(id);
    return it == m.reqs.end() || it->second->pinned.empty();
  });
  if (so.empty()) return outs;
  ++m.steps;
  m.last_step_tokens = so.num_tokens;
  const auto now = EngineRequest::Clock::now();
  for (const ScheduledChunk& c : so.chunks) {
    EngineRequest& r = *m.reqs.at(c.id);
    if (!r.scheduled) {
      r.scheduled = true;
      r.t_sched = now;
    }
  }
  // Execute: one flat batch of every scheduled chunk.
  m.batch.Clear();
  m.batch.lora_adapters = m.lora.adapters();
  m.rows.assign(so.chunks.size(), ChunkRows{});
  int32_t n_rows = 0;
  for (size_t s = 0; s < so.chunks.size(); ++s) {
    const ScheduledChunk& c = so.chunks[s];
    const EngineRequest& r = *m.reqs.at(c.id);
    const std::vector<int32_t>& toks = m.sched.Tokens(c.id);
    ChunkRows& cr = m.rows[s];
    cr.first = n_rows;
    m.batch.seq_slots.push_back(&m.blocks.Slots(c.id));
    if (m.lora.n_slots() > 0) m.batch.seq_lora.push_back(r.lora.empty() ? nullptr : r.lora.data());
    const bool embed = r.params.pooling != Pooling::kNone;
    cr.prompt_done = c.start + c.n >= r.prompt_len;
    for (int32_t i = c.start; i < c.start + c.n; ++i) {
      const bool sample = !embed && c.want_logits && i == c.start + c.n - 1;
      const bool owed = r.OwesPromptLogits(i);
      if (owed && cr.n_prompt++ == 0) cr.prompt_pos = i;
      if (sample) cr.sample = n_rows;
      if (r.WantsHidden(i)) {
        if (cr.n_hidden++ == 0) {
          cr.hidden_first = static_cast<int32_t>(m.batch.hidden_rows.size());
          cr.hidden_pos = i;
        }
        m.batch.hidden_rows.push_back(m.batch.size());
      }
      m.batch.Add(toks[i], i, static_cast<int32_t>(s), sample || owed);
      n_rows += sample || owed ? 1 : 0;
    }
    cr.n_draft = static_cast<int32_t>(c.draft.size());
    for (int32_t i = 0; i < cr.n_draft; ++i) m.batch.Add(c.draft[i], c.start + c.n + i, static_cast<int32_t>(s), true);
    n_rows += cr.n_draft;
  }
  const auto t_forward = EngineRequest::Clock::now();
  Status st = m.runner->Forward(m.batch, m.kv, &m.logits);
  if (m.opts.spec != "none" && so.chunks.size() == 1 && so.chunks[0].n == 1 && m.sched.IsDecoding(so.chunks[0].id)) {
    m.step_cost.Observe(so.num_tokens,
                        std::chrono::duration<double>(EngineRequest::Clock::now() - t_forward).count());
  }
  if (!st.ok()) {
    // One failed batch fails its requests, never the loop.
    LOG_ERROR("forward pass failed: {}", st.ToString());
    for (const ScheduledChunk& c : so.chunks) {
      if (m.reqs.count(c.id)) {
        RequestOutput o;
        o.error_code = st.code() == StatusCode::kUnavailable ? StatusCode::kUnavailable : StatusCode::kInternal;
        outs.push_back(m.Finish(c.id, FinishReason::kError, st.message(), false, std::move(o)));
      }
    }
    return outs;
  }
  m.sched.Computed(so);
  // Update: sample every sequence whose newest token was computed.
  const int32_t V = m.model.config.n_vocab;
  for (size_t s = 0; s < so.chunks.size(); ++s) {
    const ScheduledChunk& c = so.chunks[s];
    const ChunkRows& cr = m.rows[s];
    EngineRequest& r = *m.reqs.at(c.id);
    if (r.params.pooling != Pooling::kNone) {
      const int d = m.model.config.n_embd;
      const std::vector<float>& hidden = m.runner->hidden();
      if (hidden.size() < m.batch.hidden_rows.size() * size_t(d)) {
        outs.push_back(m.Finish(c.id, FinishReason::kError, "this runner computes no hidden states (embeddings)"));
        continue;
      }
      for (int32_t i = 0; i < cr.n_hidden; ++i) {
        r.TakeHidden(cr.hidden_pos + i, hidden.data() + size_t(cr.hidden_first + i) * d, d);
      }
      if (cr.prompt_done) {
        RequestOutput o;
        o.embedding = r.Embedding();
        outs.push_back(m.Finish(c.id, FinishReason::kLength, {}, false, std::move(o)));
      }
      continue;
    }
    RequestOutput o;
    if (cr.n_prompt > 0) {
      const std::vector<int32_t>& toks = m.sched.Tokens(c.id);
      for (int32_t i = 0; i < cr.n_prompt; ++i) {
        const int32_t pos = cr.prompt_pos + i;
        const float* row = m.logits.data() + static_cast<size_t>(cr.first + i) * V;
        if (r.params.prompt_logits_from >= 0 && pos >= r.params.prompt_logits_from) {
          if (o.prompt_logits.empty()) o.prompt_logits_pos = pos;
          o.prompt_logits.insert(o.prompt_logits.end(), row, row + V);
        }
        if (r.params.prompt_logprobs >= 0 && pos + 1 < r.prompt_len) {
          o.prompt_logprobs.push_back(LogprobsOf(row, V, toks[pos + 1], r.params.prompt_logprobs));
        }
      }
      r.prompt_logits_next = cr.prompt_pos + cr.n_prompt;
    }
    if (cr.sample < 0) {
      if (cr.n_prompt > 0) {
        m.Describe(c.id, r, &o);
        outs.push_back(std::move(o));
      }
      continue;
    }
    if (r.max_tokens == 0) {  // prompt scoring only
      outs.push_back(m.Finish(c.id, FinishReason::kLength, {}, false, std::move(o)));
      continue;
    }
    // The token after the newest one, then, while it equals the drafted token
    // there (whose K/V is then valid, and whose row's logits follow from the
    // same tokens as plain decoding would see), the next one. Sampling each
    // from the model's own distribution and keeping a deterministic draft
    // only where it matches is speculative sampling's rule for a point-mass
    // draft: the outputs are distributed exactly as without drafts.
    m.spec_drafted += cr.n_draft;
    const uint64_t accepted_before = m.spec_accepted;
    FinishReason why = FinishReason::kNone;
    bool stopped = false;
    for (int32_t i = 0; i <= cr.n_draft; ++i) {
      float* lg = m.logits.data() + static_cast<size_t>(cr.sample + i) * V;
      const int32_t* draft = i < cr.n_draft ? &c.draft[i] : nullptr;
      int32_t next = -1;
      why = m.SampleNext(c.id, r, lg, o, &next, draft, &stopped);
      if (why != FinishReason::kNone) break;
      if (static_cast<int32_t>(m.sched.Tokens(c.id).size()) >= m.opts.max_model_len) {
        if (!m.opts.context_shift) {
          why = FinishReason::kLength;
          break;
        }
        m.sched.Shift(c.id, m.opts.context_keep);
        if (m.drafter) m.drafter->Forget(c.id);  // its tokens changed
        break;
      }
      if (draft == nullptr || *draft != next) break;
    }
    const int32_t accepted = static_cast<int32_t>(m.spec_accepted - accepted_before);
    if (cr.n_draft > 0) {
      r.acceptance.Verified(cr.n_draft, accepted);
    } else {
      r.acceptance.Forget();
    }
    // The draft model's cache holds what it drafted past the sequence's
    // tokens then; only the accepted part stays valid.
    if (m.drafter && why == FinishReason::kNone) m.drafter->Keep(c.id, c.start + c.n + accepted);
    if (why != FinishReason::kNone) {
      outs.push_back(m.Finish(c.id, why, {}, stopped, std::move(o)));
    } else {
      m.Describe(c.id, r, &o);
      outs.push_back(std::move(o));
    }
  }
  if (m.offload) m.offload->WriteThrough(m.blocks, m.kv);
  return outs;
}

}  // namespace infera
