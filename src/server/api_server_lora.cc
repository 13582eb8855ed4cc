// ApiServer's LoRA adapters: llama-server's /lora-adapters (default scales
// by id) and per-request scales, vLLM's adapter names as models and its
// runtime loading (/v1/load_lora_adapter, /v1/unload_lora_adapter).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/json.h"
#include "model/lora.h"
#include "server/api_responses.h"
#include "server/api_server.h"

namespace infera::server {

using nlohmann::json;

namespace {

// Serving order: the base model's name wins over an adapter's.
bool NamesAdapter(const ApiBackend::Lora& l, const std::string& model) { return !l.name.empty() && l.name == model; }

ApiError RuntimeLoraOff() {
  return Error(404, "runtime LoRA loading is off: start the server with --max-runtime-loras N", "invalid_request_error",
               "not_found");
}

// The body's string field `name` (non-empty), else a 400 in *err.
bool StringField(const json& body, const char* name, std::string* out, ApiError* err) {
  auto it = body.find(name);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
    *err = BadValue(name, fmt::format("'{}' must be a non-empty string", name));
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

}  // namespace

bool ApiServer::ServesModel(const std::string& model) const {
  if (model.empty() || model == opts_.served_model_name) return true;
  std::lock_guard<std::mutex> lock(lora_mu_);
  return std::any_of(lora_.begin(), lora_.end(), [&](const ApiBackend::Lora& l) { return NamesAdapter(l, model); });
}

void ApiServer::LoraFor(const std::string& model, std::vector<float>* scales, std::string* adapter) const {
  std::lock_guard<std::mutex> lock(lora_mu_);
  if (model != opts_.served_model_name) {
    for (const ApiBackend::Lora& l : lora_) {
      if (NamesAdapter(l, model)) {
        *adapter = model;  // vLLM: the named adapter alone, at 1 (the engine finds its slot)
        scales->clear();
        return;
      }
    }
  }
  *scales = lora_scales_;
}

void ApiServer::HandleLoraAdapters(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  const size_t n = backend_.lora.size();  // slots (constant)
  if (req.method == "POST") {
    const json body = ParseJson(req.body);
    if (!body.is_array()) {
      return SendError(resp, BadValue("lora", "the body must be a list of {\"id\": adapter index, \"scale\": number}"));
    }
    std::vector<float> scales(n, 0.0f);  // (adapters not named are turned off, as llama-server does)
    for (const json& e : body) {
      const json* id = e.is_object() && e.contains("id") ? &e["id"] : nullptr;
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= static_cast<int64_t>(n)) {
        return SendError(resp, BadValue("id", fmt::format("each entry needs an 'id' in [0, {})", n)));
      }
      const json scale = e.value("scale", json(1.0));
      if (!scale.is_number() || !std::isfinite(scale.get<double>()) || std::fabs(scale.get<double>()) > 1000) {
        return SendError(resp, BadValue("scale", "'scale' must be a number in [-1000, 1000]"));
      }
      scales[static_cast<size_t>(id->get<int64_t>())] = scale.get<float>();
    }
    std::lock_guard<std::mutex> lock(lora_mu_);
    for (size_t i = 0; i < n; ++i) {
      if (scales[i] != 0.0f && lora_[i].name.empty()) {
        return SendError(resp, BadValue("id", fmt::format("LoRA slot {} holds no adapter", i)));
      }
    }
    lora_scales_ = scales;
    return SendJson(resp, 200, {{"success", true}});
  }
  json list = json::array();
  std::lock_guard<std::mutex> lock(lora_mu_);
  for (size_t i = 0; i < n; ++i) {
    if (lora_[i].name.empty()) continue;  // a free runtime slot
    list.push_back({{"id", i}, {"name", lora_[i].name}, {"path", lora_[i].path}, {"scale", lora_scales_[i]}});
  }
  SendJson(resp, 200, list);
}

void ApiServer::HandleLoadLora(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  if (!backend_.load_lora) return SendError(resp, RuntimeLoraOff());
  json body;
  ApiError err;
  std::string name, path;
  if (!ParseJsonBody(req.body, &body, &err) || !StringField(body, "lora_name", &name, &err) ||
      !StringField(body, "lora_path", &path, &err)) {
    return SendError(resp, err);
  }
  // vLLM's load_inplace: replace the runtime adapter of that name (requests
  // running with the old one finish with it).
  const json inplace = body.value("load_inplace", json(false));
  if (!inplace.is_boolean()) return SendError(resp, BadValue("load_inplace", "'load_inplace' must be a boolean"));
  const bool replace = inplace.get<bool>();
  {
    std::lock_guard<std::mutex> lock(lora_mu_);
    auto it = std::find_if(lora_.begin(), lora_.end(), [&](const auto& l) { return NamesAdapter(l, name); });
    std::string why;
    if (name == opts_.served_model_name) {
      why = "is the served model's name";
    } else if (std::find(lora_loading_.begin(), lora_loading_.end(), name) != lora_loading_.end()) {
      why = "is being loaded";
    } else if (it != lora_.end() && !replace) {
      why = "has already been loaded (load_inplace: true replaces it)";
    } else if (it != lora_.end() && !it->runtime) {
      why = "was given at start: it cannot be replaced";
    }
    if (!why.empty())
      return SendError(resp, BadValue("lora_name", fmt::format("The lora adapter '{}' {}.", name, why)));
    lora_loading_.push_back(name);
  }
  auto unreserve = [this, name] {
    std::lock_guard<std::mutex> lock(lora_mu_);
    std::erase(lora_loading_, name);
  };
  // (Read here, on this HTTP thread: the engine's loop only takes it in.)
  StatusOr<std::shared_ptr<const LoraAdapter>> adapter = backend_.load_lora(name, path);
  if (!adapter.ok()) {
    unreserve();
    return SendError(resp, BadValue("lora_path", adapter.status().message()));
  }
  backend_.engine->Post([this, resp, name, path, replace, unreserve,
                         a = std::move(adapter).value()](Engine& e) mutable {
    StatusOr<int32_t> slot = e.LoadLoraAdapter(std::move(a), replace);
    if (!slot.ok()) {
      unreserve();
      const bool full = slot.status().code() == StatusCode::kResourceExhausted;
      return SendError(resp, full ? Error(409, slot.status().message() + "; unload one first", "invalid_request_error",
                                          "lora_slots_full")
                                  : BadValue("lora_name", slot.status().message()));
    }
    {
      std::lock_guard<std::mutex> lock(lora_mu_);
      for (size_t i = 0; i < lora_.size(); ++i) {  // a replaced adapter's slot (draining in the engine)
        if (NamesAdapter(lora_[i], name)) {
          lora_[i] = ApiBackend::Lora{"", "", 0.0f, true};
          lora_scales_[i] = 0.0f;
        }
      }
      lora_[static_cast<size_t>(*slot)] = ApiBackend::Lora{name, path, 0.0f, true};
      lora_scales_[static_cast<size_t>(*slot)] = 0.0f;
      std::erase(lora_loading_, name);
    }
    resp->Respond(200, "text/plain; charset=utf-8",
                  fmt::format("Success: LoRA adapter '{}' added successfully.", name));
  });
}

void ApiServer::HandleUnloadLora(const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
  if (!backend_.load_lora) return SendError(resp, RuntimeLoraOff());
  json body;
  ApiError err;
  std::string name;
  if (!ParseJsonBody(req.body, &body, &err) || !StringField(body, "lora_name", &name, &err)) {
    return SendError(resp, err);
  }
  {
    std::lock_guard<std::mutex> lock(lora_mu_);
    auto it = std::find_if(lora_.begin(), lora_.end(), [&](const auto& l) { return NamesAdapter(l, name); });
    if (it == lora_.end()) {
      return SendError(resp, Error(404, fmt::format("The lora adapter '{}' cannot be found.", name),
                                   "invalid_request_error", "not_found", "lora_name"));
    }
    if (!it->runtime) {
      return SendError(resp, BadValue("lora_name", fmt::format("The lora adapter '{}' was given at start "
                                                               "(--lora / --lora-modules): it stays loaded.",
                                                               name)));
    }
    // From now on requests cannot name it; the engine frees its slot when
    // those already running with it end.
    lora_scales_[static_cast<size_t>(it - lora_.begin())] = 0.0f;
    *it = ApiBackend::Lora{"", "", 0.0f, true};
  }
  backend_.engine->Post([resp, name](Engine& e) {
    StatusOr<int32_t> slot = e.UnloadLoraAdapter(name);
    if (!slot.ok()) return SendError(resp, Error(404, slot.status().message(), "invalid_request_error", "not_found"));
    resp->Respond(200, "text/plain; charset=utf-8",
                  fmt::format("Success: LoRA adapter '{}' removed successfully.", name));
  });
}

}  // namespace infera::server
