// Validation of EngineOptions against a model, and the KV cache's size.
// Internal to the engine library; pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "attention/kv_storage.h"
#include "infera/engine.h"
#include "infera/status.h"
#include "model/config.h"

namespace infera {

struct KernelTable;

// Checks every option of `o` that does not depend on the KV cache, and
// resolves o->max_model_len (0: the model's trained context, else 2048).
Status CheckEngineOptions(const ModelConfig& c, EngineOptions* o);

// The KV cache in whole blocks: --kv-cache-mb if given, else enough for
// min(max_num_seqs, 16) full contexts (at least one), capped at a quarter of
// the available memory. `per_token` = bytes of K and V per token, all layers.
StatusOr<int64_t> KvCacheBlocks(const EngineOptions& o, uint64_t per_token);

// The window every layer attends within (the largest, if they differ), or 0
// when some layer attends globally (then no block can be released).
int32_t UniformSlidingWindow(const ModelConfig& c);

}  // namespace infera
