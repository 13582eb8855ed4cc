#include "engine/engine_options_check.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/file_util.h"
#include "model/model.h"

namespace infera {

Status CheckModelFreeEngineOptions(const EngineOptions& o) {
  if (o.kv_block_size < 1 || o.kv_block_size > 1024) return InvalidArgument("--kv-block-size must be in 1..1024");
  if (o.max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be at least 1");
  if (o.max_batched_tokens < 1) return InvalidArgument("--max-batched-tokens must be at least 1");
  if (o.spec != "none" && o.spec != "ngram" && o.spec != "draft") {
    return InvalidArgument("--spec must be none, ngram or draft");
  }
  if (!(o.spec_p_min >= 0.0f && o.spec_p_min <= 1.0f)) return InvalidArgument("--draft-p-min must be in [0, 1]");
  if (o.spec_draft_max < 1 || o.spec_draft_max > 64) return InvalidArgument("--draft-max must be in 1..64");
  if (o.spec_draft_context < 0) return InvalidArgument("--draft-ctx must be 0 (the whole sequence) or more");
  if (o.spec_draft_min < 0 || o.spec_draft_min > o.spec_draft_max) {
    return InvalidArgument("--draft-min must be in 0..--draft-max");
  }
  if (o.spec_ngram_min < 1 || o.spec_ngram_max < o.spec_ngram_min || o.spec_ngram_max > 64) {
    return InvalidArgument("--spec-ngram-min and --spec-ngram-max must satisfy 1 <= min <= max <= 64");
  }
  if (o.spec_max_seqs < 1) return InvalidArgument("--spec-max-seqs must be at least 1");
  return Status::Ok();
}

Status CheckEngineOptions(const ModelConfig& c, EngineOptions* opts) {
  EngineOptions& o = *opts;
  RETURN_IF_ERROR(CheckModelFreeEngineOptions(o));
  if ((o.spec == "draft") != (o.draft_model != nullptr)) {
    return InvalidArgument("--spec draft and --draft-model go together");
  }
  if (o.draft_model != nullptr && o.draft_model->config.n_vocab != c.n_vocab) {
    return InvalidArgument(fmt::format("the draft model's vocabulary ({} tokens) is not the model's ({} tokens)",
                                       o.draft_model->config.n_vocab, c.n_vocab));
  }
  if (o.max_model_len <= 0) o.max_model_len = c.n_ctx_train > 0 ? c.n_ctx_train : 2048;
  if (c.n_ctx_train > 0 && o.max_model_len > c.n_ctx_train) {
    // Positions past the trained context were never trained: the output
    // degrades silently. Refuse until RoPE scaling can be asked for.
    return InvalidArgument(fmt::format("a context of {} tokens is beyond the model's trained context of {} tokens "
                                       "(--max-model-len at most {})", o.max_model_len, c.n_ctx_train, c.n_ctx_train));
  }
  if (o.kv_offload.enabled() && !o.prefix_caching) {
    return InvalidArgument("--kv-offload-dir / --kv-offload-redis need prefix caching (drop --no-prefix-cache)");
  }
  return Status::Ok();
}

StatusOr<int64_t> KvCacheBlocks(const EngineOptions& o, uint64_t per_token) {
  uint64_t bytes;
  if (o.kv_cache_mb > 0) {
    bytes = static_cast<uint64_t>(o.kv_cache_mb) << 20;
  } else {
    const uint64_t useful = per_token * static_cast<uint64_t>(o.max_model_len) * std::min(o.max_num_seqs, 16);
    // At least one full context, in whole blocks.
    const uint64_t one_context = per_token * o.kv_block_size * ((o.max_model_len + o.kv_block_size - 1) / o.kv_block_size);
    bytes = std::min(AvailableMemoryBytes() / 4, std::max<uint64_t>(useful, one_context));
  }
  const int64_t n_blocks = static_cast<int64_t>(bytes / (per_token * o.kv_block_size));
  if (n_blocks < 1) return InvalidArgument("--kv-cache-mb is too small for one KV block");
  if (n_blocks * o.kv_block_size > (1ll << 31) - 1) return InvalidArgument("--kv-cache-mb is too large");
  return n_blocks;
}

int32_t UniformSlidingWindow(const ModelConfig& c) {
  int32_t w = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const int32_t lw = c.Layer(l).sliding_window;
    if (lw <= 0) return 0;
    w = std::max(w, lw);
  }
  return w;
}

}  // namespace infera
