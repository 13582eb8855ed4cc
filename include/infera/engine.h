// The serving engine: many requests share one model and one pool of paged KV
// memory; each Step() runs one continuous-batching iteration
// (schedule -> execute -> update) and reports what every request produced.
// Used by `infera generate` (offline batch), `infera bench --parallel` and the
// HTTP server.
//
// Thread-safety: an Engine is driven from one thread (the engine loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infera/request.h"
#include "infera/sampling_params.h"
#include "infera/status.h"

namespace infera {

struct Model;
class Tokenizer;
struct KernelTable;
class ModelRunner;
class ThreadPool;

// Makes the runner an engine steps with, on the engine's thread pool.
using ModelRunnerFactory = std::function<std::unique_ptr<ModelRunner>(ThreadPool& pool)>;

// Lower tiers of the prefix cache (docs/operations.md, "KV offload tiers"):
// full KV blocks are written through to a local directory and/or Redis, and
// a prompt whose prefix is no longer in RAM (evicted, another process, a
// restart) loads it from there instead of recomputing it.
struct KvOffloadOptions {
  std::string dir;              // "" : no disk tier
  double dir_gb = 10;           // disk tier budget; least recently used blocks go beyond it
  std::string redis_url;        // redis://[:password@]host[:port][/db]; "" : no Redis tier
  int64_t ttl_seconds = 86400;  // Redis expiry of a block (0: none)
  std::string type = "auto";    // stored payload: auto (as the KV cache), f32, or q8 (int8 rows, ~1/4)
  int timeout_ms = 500;         // Redis connect / read / write timeout
  int64_t max_queue_mb = 256;   // write-through queue; blocks beyond it are dropped (counted)
  bool enabled() const { return !dir.empty() || !redis_url.empty(); }
};

// Cumulative counters of one offload tier.
struct KvTierStats {
  std::string tier;  // "disk" or "redis"
  uint64_t hits = 0, misses = 0;  // blocks looked up
  uint64_t errors = 0;            // failed calls (timeouts, lost connections, full)
  uint64_t corrupt = 0;           // blocks that failed verification (recomputed)
  uint64_t read_bytes = 0, written_bytes = 0, writes = 0;
  uint64_t skipped = 0;           // calls skipped while the tier backs off after a failure
  uint64_t gets = 0;              // lookups
  double get_seconds = 0;         // their total time
  bool healthy = true;            // not backing off now
};

struct LoraAdapter;  // model/lora.h

struct EngineOptions {
  int threads = 0;                  // 0: all cores
  int64_t kv_cache_mb = 0;          // 0: a quarter of free RAM, at most what the limits below can use
  int32_t kv_block_size = 16;       // tokens per KV block
  int32_t max_num_seqs = 64;        // sequences in one batch
  int32_t max_batched_tokens = 512; // tokens in one batch (prompt chunks + decodes)
  int32_t max_model_len = 0;        // context per sequence; 0: the model's trained context
  bool prefix_caching = true;
  std::string kv_cache_type = "f32";  // or "q8": int8 with a scale per token and KV head
  bool guaranteed_admission = false;  // reserve prompt + max_tokens at admission; never preempt
  // Long generations: at the context end keep the first context_keep tokens
  // and the newer half of the rest, and go on (instead of finishing).
  bool context_shift = false;
  int32_t context_keep = 4;
  // Speculative decoding, for single-stream latency; the outputs stay exactly
  // those of plain decoding (greedy and seeded sampling alike). "none",
  // "draft" (a draft model, below), or "ngram": prompt lookup — the tokens that followed the latest earlier
  // occurrence of the sequence's last n tokens (n = spec_ngram_max down to
  // spec_ngram_min) are verified in the same forward pass as its next token.
  std::string spec = "none";
  // "draft": drafts come from this second model (same vocabulary, much
  // smaller; greedy, stopping where its top probability < spec_p_min). It
  // must outlive the engine.
  const Model* draft_model = nullptr;
  float spec_p_min = 0.75f;
  int32_t spec_draft_max = 8;  // drafted tokens per sequence and step, at most
  // The draft model's context (`--draft-ctx`, llama.cpp's --ctx-size-draft):
  // where it starts on a sequence, or has fallen more than this many tokens
  // behind it (drafting paused by the policy), it starts again on the last
  // spec_draft_context tokens only, instead of catching up on all of them. A
  // long prompt then costs the draft this many tokens, not the prompt's
  // length. 0: the whole sequence.
  int32_t spec_draft_context = 0;
  // Draft only as many tokens as pay for their verification, by the
  // sequence's recent acceptance rate and the measured cost of a step's extra
  // tokens (engine/spec_policy.h); false: always spec_draft_max when found.
  bool spec_adaptive = true;
  int32_t spec_draft_min = 1;  // fewer found: no draft that step
  int32_t spec_ngram_min = 2;
  int32_t spec_ngram_max = 4;
  // Drafts only while at most this many sequences run: verifying them turns a
  // memory-bound decode step into a compute-bound one, which costs throughput
  // once the batch itself fills the step.
  int32_t spec_max_seqs = 2;
  KvOffloadOptions kv_offload;
  // Models whose every layer uses a sliding window: release a sequence's KV
  // blocks that fall out of the window (memory per sequence bounded by the
  // window). False keeps them (tests compare both).
  bool free_outside_window = true;
  // LoRA adapters (model/lora.h) applied on top of the model's weights, each
  // request with its own scales (RequestParams::lora_scales). They must
  // outlive the engine. Not with a model split over ranks.
  std::vector<const LoraAdapter*> lora_adapters;
  // Slots after lora_adapters for adapters loaded while the engine runs
  // (Engine::LoadLoraAdapter; vLLM's runtime LoRA updating), at most
  // kMaxRuntimeLoras. A request's lora_scales has one entry per slot of both
  // kinds.
  int32_t max_runtime_loras = 0;
};

// The most runtime LoRA slots an engine takes (EngineOptions::max_runtime_loras).
inline constexpr int32_t kMaxRuntimeLoras = 64;

class Grammar;  // sampling/grammar.h

// How an embedding request pools its prompt's final hidden states (after the
// final norm): their mean, the first token's (CLS), or the last token's.
enum class Pooling { kNone, kMean, kCls, kLast };

struct RequestParams {
  SamplingParams sampling;
  // -1: until a stop condition or the context end. 0 (only with
  // prompt_logits_from or prompt_logprobs): score the prompt, generate nothing.
  int32_t max_tokens = -1;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;  // the matched stop string ends the text (vLLM's)
  bool ignore_eos = false;
  int32_t priority = 0;     // lower first (then arrival order)
  int32_t min_tokens = 0;   // end-of-generation tokens are masked until this many were generated
  // Tokens that end generation as end-of-generation ones do (vLLM's
  // stop_token_ids): not part of the output, masked before min_tokens; not
  // affected by ignore_eos.
  std::vector<int32_t> stop_token_ids;
  // Added to a token's logit before sampling (OpenAI's logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // -1: no log-probabilities; k >= 0 (at most 1000): the log-probability of
  // every generated token (under the model's raw distribution) and the k most
  // likely tokens.
  int32_t logprobs = -1;
  // With logprobs: those of the distribution each token was drawn from
  // instead (after logit bias, penalties, the grammar, top-k / top-p / min-p
  // and temperature; greedy: the chosen token with log-probability 0), its
  // tokens of probability 0 not listed (llama.cpp's post_sampling_probs,
  // vLLM's processed_logprobs).
  bool logprobs_processed = false;
  // The text is shown on its own, not after the prompt: the first piece's
  // leading space (a tokenizer's dummy prefix) is dropped.
  bool text_starts_output = false;
  // false: token ids only, RequestOutput::text stays empty (vLLM's
  // detokenize=False); stop strings then cannot match, so none may be given.
  bool detokenize = true;
  // false: control tokens in the output are written into the text (vLLM's
  // skip_special_tokens=False); the end-of-generation token that ends it never is.
  bool skip_special_tokens = true;
  // -1: none. n >= 0: the raw logits (before bias and sampling) at every
  // prompt position from n on (perplexity, prompt scoring), delivered in
  // RequestOutput::prompt_logits as steps compute them, each position once.
  // Those positions are always computed, never served by the prefix cache.
  int32_t prompt_logits_from = -1;
  // -1: none. k >= 0: the log-probability of every prompt token after the
  // first given the tokens before it, and the k most likely tokens there
  // (OpenAI's echo with logprobs; lm-eval's log-likelihoods), in
  // RequestOutput::prompt_logprobs. Also never served by the prefix cache.
  int32_t prompt_logprobs = -1;
  // A conversation's id (OpenAI-style clients send it as `session_id` or the
  // X-Session-Id header): with KV offload tiers, the blocks of every turn are
  // pinned there for the tiers' TTL, and the session can be saved or deleted
  // by id (Engine::SaveSession). Empty: none.
  std::string session_id;
  // The scale of each LoRA slot for this request (EngineOptions::lora_adapters,
  // then the max_runtime_loras slots; 0: that adapter is off); empty: every
  // adapter given at creation at its default_scale, runtime ones off. The
  // prefix cache keeps the K/V of different scale sets apart.
  std::vector<float> lora_scales;
  // The adapter of this name alone, at scale 1 (vLLM's model = adapter
  // name): looked up when the engine takes the request in (Add: NotFound if
  // none of that name is loaded then). Not with lora_scales.
  std::string lora_adapter;
  // Not kNone: an embedding request. The prompt runs (batched with other
  // requests), nothing is generated (max_tokens must be 0) and the last
  // output carries the pooled hidden state in RequestOutput::embedding,
  // L2-normalized if normalize_embedding. Mean and CLS pooling compute every
  // prompt position (never served by the prefix cache).
  Pooling pooling = Pooling::kNone;
  bool normalize_embedding = true;
  // Constrained decoding: the generated text is kept a prefix of a sentence
  // of this grammar (tokens that would leave it are masked before sampling;
  // end-of-generation only where the sentence may end) and the request
  // finishes with kStop once the sentence is complete and nothing may follow.
  // Null: unconstrained. Shared, immutable.
  std::shared_ptr<const Grammar> grammar;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  int32_t rank = 1;                            // 1 + how many tokens are more likely than `token` (vLLM's rank)
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first

  // The rank of top[i], as `rank` counts: every token more likely than one of
  // the top is in the top too, so ties share a rank.
  int32_t TopRank(size_t i) const {
    int32_t r = 1;
    for (size_t j = 0; j < i; ++j) r += top[j].second > top[i].second ? 1 : 0;
    return r;
  }
};

// What one request produced in one step (incremental).
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // new tokens
  std::string text;             // new text (stop strings cut off)
  std::vector<TokenLogprob> logprobs;  // one per entry of `tokens`, when requested
  // With RequestParams::prompt_logits_from: logits [rows, n_vocab] of prompt
  // positions prompt_logits_pos, prompt_logits_pos + 1, ... (this step's).
  std::vector<float> prompt_logits;
  int32_t prompt_logits_pos = 0;
  // With RequestParams::prompt_logprobs: entries for prompt tokens 1, 2, ...
  // in order, as steps compute them (this step's).
  std::vector<TokenLogprob> prompt_logprobs;
  // With RequestParams::pooling: the embedding [n_embd] (on the last output).
  std::vector<float> embedding;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // On the last output of a request ended by a stop string: that string
  // (empty when an end-of-generation token or a grammar ended it).
  std::string stop_string;
  // ... or by one of RequestParams::stop_token_ids: that token (else -1).
  int32_t stop_token = -1;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;    // prompt tokens served from the prefix cache
  std::string error;            // with FinishReason::kError
  // With kError: kUnavailable when the server cannot serve now (a split
  // model's group failed; HTTP 503); NotFound when the request named what
  // is gone by the time the engine took it in (a LoRA adapter unloaded;
  // 404); else the engine's own error.
  StatusCode error_code = StatusCode::kOk;
  // Timing (seconds): queue = Add to first scheduled; ttft = first scheduled
  // to first token (set from the first token on); e2e = Add to finish.
  double queue_seconds = 0, ttft_seconds = 0, e2e_seconds = 0;
};

struct EngineStats {
  int32_t num_running = 0, num_waiting = 0;
  int32_t num_preempted = 0;     // of the waiting: preempted, to be recomputed
  int32_t last_step_tokens = 0;  // tokens computed by the last step
  int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_block_size = 0;
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // tokens
  uint64_t num_preemptions = 0;
  uint64_t prefill_tokens_computed = 0;
  uint64_t steps = 0;
  uint64_t kv_cache_bytes = 0;
  // Tokens whose K/V the running sequences hold (for the memory-waste ratio:
  // 1 - kv_tokens_held / (kv_blocks_used * kv_block_size), with the prefix
  // cache off).
  uint64_t kv_tokens_held = 0;
  // Speculative decoding: drafted tokens verified, and those accepted.
  uint64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // The measured cost of one more token in a decode step, relative to the step.
  double spec_token_cost_ratio = 0;
  // KV offload tiers (empty without them).
  std::vector<KvTierStats> kv_offload_tiers;
  uint64_t kv_offload_dropped_writes = 0;  // write-through queue full
  uint64_t kv_offload_loaded_blocks = 0;   // blocks loaded from the tiers into RAM
};

// A session's state in the KV offload tiers.
struct SessionInfo {
  std::string id;
  int64_t tokens = 0;          // of its latest turn (prompt + output)
  int64_t blocks = 0;          // full KV blocks of those tokens
  int64_t written_blocks = 0;  // written to the tiers by this call (save)
};

// The options that need no model (block size, batch limits, speculative
// decoding's); Engine::Create checks them too. Lets a front end refuse a
// bad flag before loading a model.
Status CheckModelFreeEngineOptions(const EngineOptions& o);

class Engine {
 public:
  // `model`, `tokenizer` (may be null: token ids only) and `kernels` must
  // outlive the engine.
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const Tokenizer* tokenizer,
                                                  const KernelTable& kernels, const EngineOptions& opts);
  // The same with another runner than the model's decoder (tests: fakes;
  // later: a parallel rank's runner). `model` still gives the config.
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const Tokenizer* tokenizer,
                                                  const KernelTable& kernels, const EngineOptions& opts,
                                                  const ModelRunnerFactory& make_runner);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; InvalidArgument if it could never run (see Scheduler).
  StatusOr<uint64_t> Add(std::vector<int32_t> prompt, const RequestParams& params);
  // Add's checks without adding: what Add would refuse. Reads only what never
  // changes after Create, so any thread may call it while another steps.
  Status Check(const std::vector<int32_t>& prompt, const RequestParams& params) const;
  // Ends a request at the next step (its blocks are freed then) with
  // FinishReason::kCancelled. Unknown ids are ignored.
  void Cancel(uint64_t id);
  // One iteration; returns an output for every request that produced tokens
  // or finished.
  std::vector<RequestOutput> Step();
  bool HasWork() const;
  EngineStats Stats() const;
  // Sessions (with KV offload tiers; InvalidArgument without). Save: writes
  // every block of the session's latest turn still in RAM to the tiers,
  // pins them for the TTL and waits for the writes (a few seconds at most).
  // Delete: removes the session's blocks and record from the tiers.
  // NotFound for a session neither this engine nor the tiers know.
  StatusOr<SessionInfo> SaveSession(const std::string& id);
  StatusOr<SessionInfo> DeleteSession(const std::string& id);
  // LoRA adapters loaded while the engine runs, into the
  // EngineOptions::max_runtime_loras slots. Load: `adapter` (loaded for this
  // engine's model) goes into the first free slot, returned; InvalidArgument
  // if an adapter of that name is loaded or there are no such slots,
  // ResourceExhausted if every slot is taken. Unload: requests added from
  // now on cannot select it (by name or scale); its slot frees once the
  // requests that use it have finished, which run to their end with it.
  // NotFound for a name not loaded; InvalidArgument for an adapter given at
  // creation. `replace` (vLLM's load_inplace): an adapter of that name
  // loaded at run time is replaced; requests running with the old one
  // finish with it. Both on the stepping thread (AsyncEngine::Post).
  StatusOr<int32_t> LoadLoraAdapter(std::shared_ptr<const LoraAdapter> adapter, bool replace = false);
  StatusOr<int32_t> UnloadLoraAdapter(const std::string& name);
  // Only the KV offload counters of Stats(), current; any thread may call it
  // while another steps.
  void OffloadStats(EngineStats* s) const;
  int32_t max_model_len() const;
  int32_t n_vocab() const;
  int32_t max_num_seqs() const;  // sequences in one batch (EngineOptions::max_num_seqs)

 private:
  int32_t ResolveMaxTokens(size_t prompt_len, int32_t max_tokens) const;
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera
