// The engine's side of LoRA adapters (model/lora.h): the options' checks,
// the adapter slots (those given at creation, then empty ones for adapters
// loaded while the engine runs), a request's scales and the prefix-cache
// key root they give.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_request.h"
#include "infera/engine.h"

namespace infera {

// EngineOptions::lora_adapters and max_runtime_loras are usable: none null,
// at most kMaxRuntimeLoras runtime slots, and the engine runs the local
// decoder (`custom_runner`: a runner factory was given; `split`: the model
// is split over ranks). Logs each adapter once checked.
Status CheckLoraAdapters(const EngineOptions& o, bool custom_runner, bool split);

// RequestParams::lora_scales (empty, or one finite scale per slot) and
// lora_adapter (not with lora_scales; needs some slot).
Status CheckLoraScales(const RequestParams& p, size_t n_slots);

// A request's scales: empty when every adapter is off; then the root of its
// prefix-cache key chain (a hash of the adapters' identities and non-zero
// scales; 0 when empty).
struct LoraSelection {
  std::vector<float> scales;
  uint64_t cache_root = 0;
};

// The slots: EngineOptions::lora_adapters (0..k-1; never unloaded), then
// max_runtime_loras slots that LoadLoraAdapter fills and UnloadLoraAdapter
// empties. Each adapter placed in a slot gets an identity of its own, so a
// slot refilled with another adapter never meets the K/V cached for the old
// one. Used on the engine's loop thread only (n_slots(): constant).
class LoraSlots {
 public:
  explicit LoraSlots(const EngineOptions& o);

  size_t n_slots() const { return slots_.size(); }
  // Per slot: the adapter, or null (empty). ForwardBatch::lora_adapters.
  const std::vector<const LoraAdapter*>& adapters() const { return adapters_; }

  // Puts `a` in the first empty runtime slot and returns the slot.
  // InvalidArgument: no runtime slots, or an adapter of that name is
  // loaded; ResourceExhausted: every runtime slot is taken (a slot being
  // unloaded is taken until its requests finish).
  StatusOr<int32_t> Load(std::shared_ptr<const LoraAdapter> a);
  // New requests can no longer select the runtime adapter `name`; its slot
  // empties once no request uses it (FreeDrained). NotFound: no adapter of
  // that name was loaded at run time (those given at creation stay).
  StatusOr<int32_t> Unload(const std::string& name);
  // vLLM's load_inplace: `a` takes the place of the runtime adapter of its
  // name. In that adapter's slot, under a new identity, when no request
  // uses it (`in_use[slot]`, as FreeDrained's); else in a free slot while
  // the old one drains (ResourceExhausted, nothing changed, if none is
  // free). A name not loaded is Load's; one given at creation is
  // InvalidArgument.
  StatusOr<int32_t> Replace(std::shared_ptr<const LoraAdapter> a, const std::vector<uint8_t>& in_use);
  // Slots unloaded but still used by some request.
  bool draining() const { return draining_ > 0; }
  // Empties the unloaded slots no live request uses (`in_use[slot]`: some
  // request has a non-zero scale there).
  void FreeDrained(const std::vector<uint8_t>& in_use);

  // A request's selection: RequestParams::lora_adapter (that adapter alone
  // at scale 1; NotFound if none of that name is loaded), else
  // lora_scales (NotFound for a non-zero scale on an empty or unloaded
  // slot), else each slot's default (the creation adapters'
  // default_scale; 0 for runtime ones).
  StatusOr<LoraSelection> Select(const RequestParams& p) const;

 private:
  struct Slot {
    std::shared_ptr<const LoraAdapter> owned;  // runtime adapters
    uint64_t identity = 0;                     // 0: empty
    bool runtime = false;
    bool unloading = false;
  };
  std::vector<Slot> slots_;
  std::vector<const LoraAdapter*> adapters_;  // [n_slots]
  uint64_t next_identity_ = 1;
  int32_t draining_ = 0;
};

// Per slot of n_slots: some request of `reqs` has a non-zero scale there
// (LoraSlots::FreeDrained's and Replace's in_use).
std::vector<uint8_t> LoraSlotsInUse(size_t n_slots, const std::map<uint64_t, std::unique_ptr<EngineRequest>>& reqs);

}  // namespace infera
