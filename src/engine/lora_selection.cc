#include "engine/lora_selection.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "base/logging.h"
#include "model/lora.h"

namespace infera {

Status CheckLoraAdapters(const EngineOptions& o, bool custom_runner, bool split) {
  if (o.max_runtime_loras < 0 || o.max_runtime_loras > kMaxRuntimeLoras) {
    return InvalidArgument(fmt::format("max_runtime_loras must be in [0, {}]", kMaxRuntimeLoras));
  }
  if (o.lora_adapters.empty() && o.max_runtime_loras == 0) return Status::Ok();
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
  if (o.max_runtime_loras > 0) {
    LOG_INFO("engine: {} LoRA slots for adapters loaded at run time (ids {}..{})", o.max_runtime_loras,
             o.lora_adapters.size(), o.lora_adapters.size() + o.max_runtime_loras - 1);
  }
  return Status::Ok();
}

Status CheckLoraScales(const RequestParams& p, size_t n_slots) {
  if (!p.lora_adapter.empty()) {
    if (n_slots == 0) return InvalidArgument("this engine has no LoRA adapters");
    if (!p.lora_scales.empty()) return InvalidArgument("give lora_adapter or lora_scales, not both");
  }
  if (p.lora_scales.empty()) return Status::Ok();
  if (p.lora_scales.size() != n_slots) {
    return InvalidArgument(
        fmt::format("lora_scales has {} entries; the engine has {} LoRA adapter slots", p.lora_scales.size(), n_slots));
  }
  for (float v : p.lora_scales) {
    if (!std::isfinite(v)) return InvalidArgument("LoRA scales must be finite");
  }
  return Status::Ok();
}

LoraSlots::LoraSlots(const EngineOptions& o) {
  for (const LoraAdapter* a : o.lora_adapters) {
    slots_.push_back(Slot{nullptr, next_identity_++, false, false});
    adapters_.push_back(a);
  }
  for (int32_t i = 0; i < o.max_runtime_loras; ++i) {
    slots_.push_back(Slot{nullptr, 0, true, false});
    adapters_.push_back(nullptr);
  }
}

StatusOr<int32_t> LoraSlots::Load(std::shared_ptr<const LoraAdapter> a) {
  if (a == nullptr) return InvalidArgument("a LoRA adapter is null");
  int32_t free_slot = -1, runtime = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.runtime) ++runtime;
    if (s.identity != 0 && !s.unloading && adapters_[i]->name == a->name) {
      return InvalidArgument(fmt::format("a LoRA adapter named '{}' is already loaded", a->name));
    }
    if (s.runtime && s.identity == 0 && free_slot < 0) free_slot = static_cast<int32_t>(i);
  }
  if (runtime == 0) return InvalidArgument("this engine has no slots for LoRA adapters loaded at run time");
  if (free_slot < 0) {
    return ResourceExhausted(fmt::format("all {} runtime LoRA slots are taken{}", runtime,
                                         draining() ? " (one being unloaded waits for its requests)" : ""));
  }
  Slot& s = slots_[static_cast<size_t>(free_slot)];
  adapters_[static_cast<size_t>(free_slot)] = a.get();
  s.owned = std::move(a);
  s.identity = next_identity_++;
  LOG_INFO("engine: LoRA adapter '{}' ({}) loaded into slot {}: rank up to {}, {:.2f} M parameters ({:.1f} MiB)",
           s.owned->name, s.owned->path, free_slot, s.owned->max_rank, s.owned->n_params / 1e6,
           s.owned->bytes / 1048576.0);
  return free_slot;
}

StatusOr<int32_t> LoraSlots::Unload(const std::string& name) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.identity == 0 || s.unloading || adapters_[i]->name != name) continue;
    if (!s.runtime) return InvalidArgument(fmt::format("LoRA adapter '{}' was given at start: it stays", name));
    s.unloading = true;
    ++draining_;
    return static_cast<int32_t>(i);
  }
  return NotFound(fmt::format("no LoRA adapter named '{}' is loaded", name));
}

StatusOr<int32_t> LoraSlots::Replace(std::shared_ptr<const LoraAdapter> a, const std::vector<uint8_t>& in_use) {
  if (a == nullptr) return InvalidArgument("a LoRA adapter is null");
  size_t old = 0;
  while (old < slots_.size() &&
         !(slots_[old].identity != 0 && !slots_[old].unloading && adapters_[old]->name == a->name)) {
    ++old;
  }
  if (old == slots_.size()) return Load(std::move(a));
  if (!slots_[old].runtime) {
    return InvalidArgument(fmt::format("LoRA adapter '{}' was given at start: it cannot be replaced", a->name));
  }
  if (old < in_use.size() && in_use[old]) {
    // Its requests run on with it: the new one needs a slot of its own.
    RETURN_IF_ERROR(Unload(a->name).status());
    StatusOr<int32_t> slot = Load(std::move(a));
    if (!slot.ok()) {  // (undone: the old one stays)
      slots_[old].unloading = false;
      --draining_;
    }
    return slot;
  }
  Slot& s = slots_[old];
  LOG_INFO("engine: LoRA adapter '{}' replaced in slot {} ({} -> {})", a->name, old, s.owned->path, a->path);
  adapters_[old] = a.get();
  s.owned = std::move(a);
  s.identity = next_identity_++;  // (the old adapter's cached K/V is never found for it)
  return static_cast<int32_t>(old);
}

void LoraSlots::FreeDrained(const std::vector<uint8_t>& in_use) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.unloading || (i < in_use.size() && in_use[i])) continue;
    LOG_INFO("engine: LoRA adapter '{}' unloaded from slot {}", s.owned->name, i);
    adapters_[i] = nullptr;
    s = Slot{nullptr, 0, true, false};
    --draining_;
  }
}

StatusOr<LoraSelection> LoraSlots::Select(const RequestParams& p) const {
  LoraSelection out;
  const size_t n = slots_.size();
  if (n == 0) return out;
  auto usable = [&](size_t i) { return slots_[i].identity != 0 && !slots_[i].unloading; };
  std::vector<float> scales(n, 0.0f);
  if (!p.lora_adapter.empty()) {
    size_t i = 0;
    while (i < n && !(usable(i) && adapters_[i]->name == p.lora_adapter)) ++i;
    if (i == n) return NotFound(fmt::format("no LoRA adapter named '{}' is loaded", p.lora_adapter));
    scales[i] = 1.0f;
  } else {
    for (size_t i = 0; i < n; ++i) {
      scales[i] = !p.lora_scales.empty() ? p.lora_scales[i] : slots_[i].runtime ? 0.0f : adapters_[i]->default_scale;
      if (scales[i] != 0.0f && !usable(i)) return NotFound(fmt::format("LoRA adapter slot {} is empty", i));
    }
  }
  uint64_t root = 0x6C6F7261ull;  // "lora"
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (scales[i] == 0.0f) continue;
    any = true;
    uint32_t bits;
    std::memcpy(&bits, &scales[i], sizeof(bits));
    root ^= (slots_[i].identity << 32) | bits;
    root *= 0x9E3779B97F4A7C15ull;
    root ^= root >> 29;
  }
  if (!any) return out;
  out.scales = std::move(scales);
  out.cache_root = root == 0 ? 1 : root;
  return out;
}

std::vector<uint8_t> LoraSlotsInUse(size_t n_slots, const std::map<uint64_t, std::unique_ptr<EngineRequest>>& reqs) {
  std::vector<uint8_t> in_use(n_slots, 0);
  for (const auto& [id, r] : reqs) {
    for (size_t i = 0; i < r->lora.size() && i < n_slots; ++i) in_use[i] |= r->lora[i] != 0.0f ? 1 : 0;
  }
  return in_use;
}

}  // namespace infera
