// The engine's side of LoRA adapters (model/lora.h): the options' checks,
// a request's scales and the prefix-cache key root they give. Pure
// functions of the options and the request.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/engine.h"

namespace infera {

// EngineOptions::lora_adapters are usable: none null, and the engine runs
// the local decoder (`custom_runner`: a runner factory was given; `split`:
// the model is split over ranks). Logs each adapter once checked.
Status CheckLoraAdapters(const EngineOptions& o, bool custom_runner, bool split);

// RequestParams::lora_scales: empty, or one finite scale per adapter.
Status CheckLoraScales(const RequestParams& p, size_t n_adapters);

// A request's scales (RequestParams::lora_scales, else each adapter's
// default_scale): empty when every adapter is off; then the root of its
// prefix-cache key chain (a hash of the non-zero scales; 0 when empty).
struct LoraSelection {
  std::vector<float> scales;
  uint64_t cache_root = 0;
};
LoraSelection SelectLora(const EngineOptions& o, const RequestParams& p);

}  // namespace infera
