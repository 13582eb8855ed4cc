#include "engine/lora_selection.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "base/logging.h"
#include "model/lora.h"

namespace infera {

Status CheckLoraAdapters(const EngineOptions& o, bool custom_runner, bool split) {
  if (o.lora_adapters.empty()) return Status::Ok();
  if (custom_runner || split) {
    return InvalidArgument("LoRA adapters run on the local decoder only (not on a model split over ranks)");
  }
  for (size_t i = 0; i < o.lora_adapters.size(); ++i) {
    const LoraAdapter* a = o.lora_adapters[i];
    if (a == nullptr) return InvalidArgument("a LoRA adapter is null");
    LOG_INFO(
        "engine: LoRA adapter {} '{}' ({}): rank up to {}, alpha {:g}, {:.2f} M parameters ({:.1f} MiB), "
        "default scale {:g}",
        i, a->name, a->path, a->max_rank, a->alpha, a->n_params / 1e6, a->bytes / 1048576.0, a->default_scale);
  }
  return Status::Ok();
}

Status CheckLoraScales(const RequestParams& p, size_t n_adapters) {
  if (p.lora_scales.empty()) return Status::Ok();
  if (p.lora_scales.size() != n_adapters) {
    return InvalidArgument(
        fmt::format("lora_scales has {} entries; the engine has {} LoRA adapters", p.lora_scales.size(), n_adapters));
  }
  for (float v : p.lora_scales) {
    if (!std::isfinite(v)) return InvalidArgument("LoRA scales must be finite");
  }
  return Status::Ok();
}

LoraSelection SelectLora(const EngineOptions& o, const RequestParams& p) {
  LoraSelection out;
  const size_t n = o.lora_adapters.size();
  if (n == 0) return out;
  std::vector<float> scales(n);
  uint64_t root = 0x6C6F7261ull;  // "lora"
  bool any = false;
  for (size_t a = 0; a < n; ++a) {
    scales[a] = p.lora_scales.empty() ? o.lora_adapters[a]->default_scale : p.lora_scales[a];
    if (scales[a] == 0.0f) continue;
    any = true;
    uint32_t bits;
    std::memcpy(&bits, &scales[a], sizeof(bits));
    root ^= (static_cast<uint64_t>(a) << 32) | bits;
    root *= 0x9E3779B97F4A7C15ull;
    root ^= root >> 29;
  }
  if (!any) return out;
  out.scales = std::move(scales);
  out.cache_root = root == 0 ? 1 : root;
  return out;
}

}  // namespace infera
