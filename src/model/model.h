// A loaded model: config + weights + whatever keeps their memory alive
// (memory maps). Immutable after loading; safe to share across threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/gguf_reader.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/weights.h"

namespace infera {

enum class ModelFormat { kGguf, kSafetensors, kLlama2c };
const char* ModelFormatName(ModelFormat f);

struct Model {
  // The config the forward pass runs: the whole model's, or for a shard of
  // a split model (ShardConfig) this rank's heads and widths.
  ModelConfig config;
  // A split model's shard: which part this rank holds (unsplit by default),
  // and the whole model's config.
  ShardSpec shard;
  ModelConfig whole_config;
  std::unique_ptr<ModelWeights> weights;
  ModelFormat format = ModelFormat::kGguf;
  std::string path;
  std::string weight_type_summary;   // e.g. "f32" or "f16 (mostly)"
  // End-of-generation ids beyond the tokenizer's own: eos_token_id of an HF
  // folder's config.json and generation_config.json (int or list).
  std::vector<int32_t> extra_eog_ids;
  std::shared_ptr<const GgufFile> gguf;  // set for GGUF models (tokenizer metadata)
  std::vector<std::shared_ptr<const void>> keep_alive;  // mmaps backing weights

  // The whole model's config (== config unless split).
  const ModelConfig& whole() const { return shard.split() ? whole_config : config; }
};

}  // namespace infera
