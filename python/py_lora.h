// vLLM's LoRARequest for the Python API, and the LLM's runtime LoRA slots:
// adapters named by requests are loaded on first use into the engine's
// max_runtime_loras slots (Engine::LoadLoraAdapter), the least recently
// used one unloaded when a new one needs its slot, as vLLM's LLM(
// enable_lora=True, max_loras=N) caches them.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infera/engine.h"
#include "model/lora.h"
#include "model/model.h"

namespace infera::python {

namespace py = pybind11;

// vLLM's LoRARequest(lora_name, lora_int_id, lora_path): the id (positive)
// names the adapter across calls; the path is a GGUF adapter or PEFT folder.
struct PyLoRARequest {
  std::string lora_name;
  int64_t lora_int_id = 0;
  std::string lora_path;
};

// One LoRA request per prompt from a call's `lora_request` argument: None,
// one LoRARequest for every prompt, or a list of them (None entries: the
// plain model).
inline std::vector<std::optional<PyLoRARequest>> LoraRequestsFor(const py::object& arg, size_t count) {
  std::vector<std::optional<PyLoRARequest>> out(count);
  if (arg.is_none()) return out;
  if (py::isinstance<PyLoRARequest>(arg)) {
    out.assign(count, arg.cast<PyLoRARequest>());
    return out;
  }
  if (!py::isinstance<py::list>(arg) && !py::isinstance<py::tuple>(arg)) {
    throw py::type_error("lora_request must be a LoRARequest, a list of them (one per prompt) or None");
  }
  const py::sequence seq = arg.cast<py::sequence>();
  if (seq.size() != count) throw py::value_error("give one LoRARequest, or one per prompt");
  for (size_t i = 0; i < count; ++i) {
    if (seq[i].is_none()) continue;
    if (!py::isinstance<PyLoRARequest>(seq[i]))
      throw py::type_error("lora_request entries must be LoRARequest or None");
    out[i] = seq[i].cast<PyLoRARequest>();
  }
  return out;
}

// The adapters an LLM has loaded into its engine's runtime slots, by
// lora_int_id. Used under the LLM's engine lock.
class LoraCache {
 public:
  LoraCache(const Model& model, int32_t max_loras) : model_(model), max_loras_(max_loras) {}

  // The engine adapter name (RequestParams::lora_adapter) of each request
  // ("" for none), loading the ones not loaded, unloading the least
  // recently used ones this call does not name when slots run out. Errors
  // as Status (InvalidArgument: misuse; the loader's for a bad file).
  StatusOr<std::vector<std::string>> Resolve(const std::vector<std::optional<PyLoRARequest>>& reqs, Engine& engine) {
    std::vector<std::string> names(reqs.size());
    std::map<int64_t, const PyLoRARequest*> wanted;
    for (const auto& r : reqs) {
      if (!r) continue;
      if (max_loras_ == 0) return InvalidArgument("LoRA requests need LLM(..., enable_lora=True)");
      if (r->lora_int_id < 1) return InvalidArgument("LoRARequest's lora_int_id must be positive");
      if (r->lora_name.empty()) return InvalidArgument("LoRARequest's lora_name must not be empty");
      auto [it, fresh] = wanted.emplace(r->lora_int_id, &*r);
      if (!fresh && (it->second->lora_name != r->lora_name || it->second->lora_path != r->lora_path)) {
        return InvalidArgument("two LoRARequests with lora_int_id " + std::to_string(r->lora_int_id) +
                               " differ in name or path");
      }
    }
    if (static_cast<int32_t>(wanted.size()) > max_loras_) {
      return InvalidArgument("this call names " + std::to_string(wanted.size()) + " LoRA adapters; the LLM holds " +
                             std::to_string(max_loras_) + " at a time (LLM(max_loras=...))");
    }
    ++clock_;
    for (const auto& [id, r] : wanted) {
      auto it = loaded_.find(id);
      if (it != loaded_.end() && (it->second.name != r->lora_name || it->second.path != r->lora_path)) {
        return InvalidArgument("lora_int_id " + std::to_string(id) + " was loaded as '" + it->second.name + "' (" +
                               it->second.path + "); give each adapter its own id");
      }
      if (it == loaded_.end()) {
        for (const auto& [other_id, e] : loaded_) {
          if (e.name == r->lora_name) {
            return InvalidArgument("LoRA adapter name '" + r->lora_name + "' is loaded under lora_int_id " +
                                   std::to_string(other_id));
          }
        }
        RETURN_IF_ERROR(MakeRoom(wanted, engine));
        ASSIGN_OR_RETURN(std::unique_ptr<LoraAdapter> a, LoadLoraAdapter(r->lora_path, model_));
        a->name = r->lora_name;
        a->default_scale = 0.0f;
        ASSIGN_OR_RETURN(const int32_t slot, engine.LoadLoraAdapter(std::shared_ptr<const LoraAdapter>(std::move(a))));
        (void)slot;
        it = loaded_.emplace(id, Entry{r->lora_name, r->lora_path, 0}).first;
      }
      it->second.last_use = clock_;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i]) names[i] = reqs[i]->lora_name;
    }
    return names;
  }

 private:
  struct Entry {
    std::string name, path;
    uint64_t last_use = 0;
  };

  // Unloads least recently used adapters not in `wanted` until a slot is free.
  Status MakeRoom(const std::map<int64_t, const PyLoRARequest*>& wanted, Engine& engine) {
    while (static_cast<int32_t>(loaded_.size()) >= max_loras_) {
      auto victim = loaded_.end();
      for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
        if (wanted.count(it->first) == 0 &&
            (victim == loaded_.end() || it->second.last_use < victim->second.last_use)) {
          victim = it;
        }
      }
      if (victim == loaded_.end()) return Internal("no LoRA adapter to unload");  // (wanted.size() <= max_loras)
      RETURN_IF_ERROR(engine.UnloadLoraAdapter(victim->second.name).status());
      loaded_.erase(victim);
    }
    return Status::Ok();
  }

  const Model& model_;
  const int32_t max_loras_;
  std::map<int64_t, Entry> loaded_;
  uint64_t clock_ = 0;
};

}  // namespace infera::python
