#include "model/lora.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/json.h"
#include "formats/gguf_reader.h"
#include "formats/safetensors.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

namespace infera {

namespace {

constexpr const char* kGgufNames[kLoraTargets] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                  "ffn_gate", "ffn_up", "ffn_down"};
// PEFT's module names (Llama-style checkpoints), in LoraTarget order.
constexpr const char* kHfNames[kLoraTargets] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                "mlp.down_proj"};

const WeightMatrix& BaseMatrix(const LayerWeights& L, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
      return L.wq;
    case LoraTarget::kK:
      return L.wk;
    case LoraTarget::kV:
      return L.wv;
    case LoraTarget::kO:
      return L.wo;
    case LoraTarget::kGate:
      return L.w_gate;
    case LoraTarget::kUp:
      return L.w_up;
    case LoraTarget::kDown:
      return L.w_down;
  }
  return L.wq;
}

// A tensor's values as f32 (F32 / F16 / BF16, or any type llama.cpp's
// dequantization covers).
StatusOr<std::vector<float>> Values(const TensorView& t) {
  if (t.type == DType::kF32 || t.type == DType::kF16 || t.type == DType::kBF16) return ToF32(t);
  if (!CanDequantize(t.type) || t.ne.empty()) {
    return InvalidArgument(
        fmt::format("tensor '{}' has type {}, which a LoRA adapter cannot use", t.name, DTypeName(t.type)));
  }
  std::vector<float> out(static_cast<size_t>(t.NumElements()));
  const int64_t row = t.ne[0];
  const int64_t rows = t.NumElements() / row;
  const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(t.type, t.data + r * row_bytes, out.data() + r * row, row);
  return out;
}

// Checks A (GGUF ne {n_in, r}) and B (ne {r, n_out}) against the base
// matrix and makes the pair. `b_permute`: B's rows come in Hugging Face's
// rotary order and are put into GGUF's (Q/K of a PEFT adapter).
StatusOr<std::unique_ptr<LoraPair>> MakePair(const std::string& what, const TensorView& a, const TensorView& b,
                                             const WeightMatrix& base, float alpha, int b_permute_heads, int head_dim,
                                             bool rslora = false) {
  if (base.n_in == 0) {
    return InvalidArgument(
        fmt::format("{}: the model has no such dense matrix (MoE experts and fused "
                    "matrices take no LoRA here)",
                    what));
  }
  if (a.ne.size() != 2 || b.ne.size() != 2 || a.ne[1] != b.ne[0] || a.ne[1] <= 0) {
    return InvalidArgument(
        fmt::format("{}: lora_a {} and lora_b {} do not make a low-rank pair", what, a.ShapeString(), b.ShapeString()));
  }
  if (a.ne[0] != base.n_in || b.ne[1] != base.n_out) {
    return InvalidArgument(fmt::format("{}: the update is [{}, {}], the model's matrix [{}, {}]", what, b.ne[1],
                                       a.ne[0], base.n_out, base.n_in));
  }
  auto p = std::make_unique<LoraPair>();
  const int64_t r = a.ne[1];
  // Each matrix as stored when the kernels read that type (F16 / BF16 /
  // F32), else dequantized to f32.
  auto take = [&](const TensorView& t, const char* which, std::vector<uint8_t>* out, DType* type) -> Status {
    ASSIGN_OR_RETURN(std::vector<float> values, Values(t));
    for (float v : values) {
      if (!std::isfinite(v)) return InvalidArgument(fmt::format("{}: {} holds a non-finite value", what, which));
    }
    if (t.type == DType::kF16 || t.type == DType::kBF16 || t.type == DType::kF32) {
      out->assign(t.data, t.data + t.nbytes);
      *type = t.type;
    } else {
      out->resize(values.size() * sizeof(float));
      std::memcpy(out->data(), values.data(), out->size());
      *type = DType::kF32;
    }
    return Status::Ok();
  };
  DType a_type, b_type;
  RETURN_IF_ERROR(take(a, "lora_a", &p->a_data, &a_type));
  RETURN_IF_ERROR(take(b, "lora_b", &p->b_data, &b_type));
  const size_t b_row = p->b_data.size() / static_cast<size_t>(base.n_out);
  if (b_permute_heads > 0) {
    std::vector<uint8_t> perm(p->b_data.size());
    PermuteRowsHfToGguf(p->b_data.data(), perm.data(), b_permute_heads, head_dim, b_row);
    p->b_data = std::move(perm);
  }
  p->a = WeightMatrix{a_type, base.n_in, r, p->a_data.data(), p->a_data.size() / static_cast<size_t>(r)};
  p->b = WeightMatrix{b_type, r, base.n_out, p->b_data.data(), b_row};
  // (rsLoRA scales by alpha / sqrt(r).)
  const float rank_divisor = rslora ? std::sqrt(static_cast<float>(r)) : static_cast<float>(r);
  p->alpha_over_rank = alpha > 0 ? alpha / rank_divisor : 1.0f;
  return p;
}

Status AddPair(LoraAdapter* ad, int layer, LoraTarget t, std::unique_ptr<LoraPair> p) {
  ad->max_rank = std::max(ad->max_rank, p->rank());
  ad->n_params += p->a.n_in * p->a.n_out + p->b.n_in * p->b.n_out;
  ad->bytes += p->a_data.size() + p->b_data.size();
  ad->layers[layer][static_cast<int>(t)] = std::move(p);
  return Status::Ok();
}

StatusOr<std::unique_ptr<LoraAdapter>> LoadGguf(const std::string& path, const Model& model) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  const std::string type = f->GetString("general.type").value_or("");
  if (type != "adapter" || f->GetString("adapter.type").value_or("") != "lora") {
    return InvalidArgument(fmt::format("{} is not a LoRA adapter (general.type '{}', adapter.type '{}')", path, type,
                                       f->GetString("adapter.type").value_or("")));
  }
  const std::string arch = f->GetString("general.architecture").value_or("");
  const std::string model_arch = model.gguf ? model.gguf->GetString("general.architecture").value_or("") : "";
  if (!model_arch.empty() && arch != model_arch) {
    return InvalidArgument(fmt::format("{} is an adapter for '{}', the model is '{}'", path, arch, model_arch));
  }
  auto ad = std::make_unique<LoraAdapter>();
  ad->path = path;
  ad->alpha = static_cast<float>(f->GetFloat("adapter.lora.alpha").value_or(0.0));
  const ModelConfig& c = model.config;
  ad->layers.resize(c.n_layer);
  for (const TensorView& t : f->tensors()) {
    const std::string& name = t.name;
    const bool is_a = name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_a") == 0;
    const bool is_b = name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_b") == 0;
    if (!is_a && !is_b) return InvalidArgument(fmt::format("{}: tensor '{}' is not a LoRA tensor", path, name));
    if (is_b) continue;                                        // (with its lora_a)
    const std::string stem = name.substr(0, name.size() - 7);  // blk.N.attn_q.weight
    int layer = -1;
    char matrix[64] = {0};
    int consumed = 0;
    if (std::sscanf(stem.c_str(), "blk.%d.%63[a-z_].weight%n", &layer, matrix, &consumed) != 2 ||
        consumed != static_cast<int>(stem.size()) || layer < 0 || layer >= c.n_layer) {
      return InvalidArgument(
          fmt::format("{}: LoRA on '{}' is not supported (layer matrices only: attn_q, attn_k, "
                      "attn_v, attn_output, ffn_gate, ffn_up, ffn_down)",
                      path, stem));
    }
    int target = -1;
    for (int i = 0; i < kLoraTargets; ++i) {
      if (std::string(matrix) == kGgufNames[i]) target = i;
    }
    if (target < 0) {
      return InvalidArgument(
          fmt::format("{}: LoRA on '{}' is not supported (attn_q, attn_k, attn_v, attn_output, "
                      "ffn_gate, ffn_up, ffn_down)",
                      path, stem));
    }
    const TensorView* b = f->FindTensor(stem + ".lora_b");
    if (b == nullptr) return InvalidArgument(fmt::format("{}: '{}' has no lora_b", path, name));
    const std::string what = fmt::format("{}: {}", path, stem);
    ASSIGN_OR_RETURN(auto pair, MakePair(what, t, *b, BaseMatrix(model.weights->layers[layer], LoraTarget(target)),
                                         ad->alpha, 0, 0));
    RETURN_IF_ERROR(AddPair(ad.get(), layer, LoraTarget(target), std::move(pair)));
  }
  for (const TensorView& t : f->tensors()) {
    if (t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_b") == 0 &&
        f->FindTensor(t.name.substr(0, t.name.size() - 7) + ".lora_a") == nullptr) {
      return InvalidArgument(fmt::format("{}: '{}' has no lora_a", path, t.name));
    }
  }
  if (ad->n_params == 0) return InvalidArgument(fmt::format("{}: the adapter holds no LoRA tensors", path));
  return ad;
}

StatusOr<std::unique_ptr<LoraAdapter>> LoadPeft(const std::string& given, const Model& model) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory(given) ? fs::path(given) : fs::path(given).parent_path();
  const fs::path config_path = dir / "adapter_config.json";
  std::ifstream in(config_path);
  if (!in) return NotFound(fmt::format("{}: no adapter_config.json (a PEFT LoRA folder, or a .gguf adapter)", given));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json cfg = ParseJson(text.str());
  if (!cfg.is_object()) return InvalidArgument(fmt::format("{}: not a JSON object", config_path.string()));
  const std::string peft_type =
      cfg.contains("peft_type") && cfg["peft_type"].is_string() ? cfg["peft_type"].get<std::string>() : "LORA";
  if (peft_type != "LORA") {
    return InvalidArgument(fmt::format("{}: peft_type '{}' (only LORA adapters)", config_path.string(), peft_type));
  }
  if (cfg.contains("use_dora") && cfg["use_dora"] == true) {
    return InvalidArgument(fmt::format("{}: DoRA adapters (use_dora) are not supported", config_path.string()));
  }
  const bool rslora = cfg.contains("use_rslora") && cfg["use_rslora"] == true;
  if (cfg.contains("alpha_pattern") && cfg["alpha_pattern"].is_object() && !cfg["alpha_pattern"].empty()) {
    return InvalidArgument(fmt::format("{}: per-module alpha_pattern is not supported", config_path.string()));
  }
  const nlohmann::json alpha = cfg.contains("lora_alpha") ? cfg["lora_alpha"] : nlohmann::json();
  if (!alpha.is_number()) return InvalidArgument(fmt::format("{}: 'lora_alpha' is missing", config_path.string()));
  fs::path weights = dir / "adapter_model.safetensors";
  if (!fs::exists(weights)) {
    return NotFound(
        fmt::format("{}: no adapter_model.safetensors (adapter_model.bin is not read: convert it)", dir.string()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> set, SafetensorsSet::OpenFile(weights.string()));
  auto ad = std::make_unique<LoraAdapter>();
  ad->path = dir.string();
  ad->alpha = alpha.get<float>();
  const ModelConfig& c = model.config;
  ad->layers.resize(c.n_layer);
  const bool permute = c.rope_style == RopeStyle::kNorm;  // as the loader does for HF weights
  for (const auto& [name, view] : set->tensors()) {
    // base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
    const std::string prefix = "base_model.model.model.layers.";
    const size_t a_at = name.rfind(".lora_A.weight");
    const size_t b_at = name.rfind(".lora_B.weight");
    if (b_at != std::string::npos && b_at + 14 == name.size()) continue;  // (with its lora_A)
    if (name.rfind(prefix, 0) != 0 || a_at == std::string::npos || a_at + 14 != name.size()) {
      return InvalidArgument(
          fmt::format("{}: LoRA on '{}' is not supported (the layers' q/k/v/o_proj and "
                      "gate/up/down_proj)",
                      weights.string(), name));
    }
    const std::string rest = name.substr(prefix.size(), a_at - prefix.size());  // N.self_attn.q_proj
    const size_t dot = rest.find('.');
    int layer = -1;
    try {
      layer = dot == std::string::npos ? -1 : std::stoi(rest.substr(0, dot));
    } catch (...) {
      layer = -1;
    }
    int target = -1;
    for (int i = 0; i < kLoraTargets && dot != std::string::npos; ++i) {
      if (rest.substr(dot + 1) == kHfNames[i]) target = i;
    }
    if (layer < 0 || layer >= c.n_layer || target < 0) {
      return InvalidArgument(
          fmt::format("{}: LoRA on '{}' is not supported (the layers' q/k/v/o_proj and "
                      "gate/up/down_proj)",
                      weights.string(), name));
    }
    const std::string b_name = name.substr(0, a_at) + ".lora_B.weight";
    const TensorView* b = set->Find(b_name);
    if (b == nullptr) return InvalidArgument(fmt::format("{}: '{}' has no lora_B", weights.string(), name));
    const LoraTarget t = LoraTarget(target);
    const int heads = t == LoraTarget::kQ ? c.n_head_at(layer) : t == LoraTarget::kK ? c.n_head_kv_at(layer) : 0;
    ASSIGN_OR_RETURN(auto pair, MakePair(fmt::format("{}: {}", weights.string(), name), view, *b,
                                         BaseMatrix(model.weights->layers[layer], t), ad->alpha, permute ? heads : 0,
                                         c.head_dim, rslora));
    RETURN_IF_ERROR(AddPair(ad.get(), layer, t, std::move(pair)));
  }
  if (ad->n_params == 0) return InvalidArgument(fmt::format("{}: the adapter holds no LoRA tensors", dir.string()));
  return ad;
}

}  // namespace

const char* LoraTargetName(LoraTarget t) { return kGgufNames[static_cast<int>(t)]; }

StatusOr<std::unique_ptr<LoraAdapter>> LoadLoraAdapter(const std::string& path, const Model& model) {
  if (model.shard.split()) return InvalidArgument("LoRA adapters are not supported on a model split over ranks");
  if (model.weights == nullptr) return InvalidArgument("the model has no weights");
  const std::string ext = std::filesystem::path(path).extension().string();
  StatusOr<std::unique_ptr<LoraAdapter>> ad = ext == ".gguf" || (!std::filesystem::is_directory(path) && ext != ".json")
                                                  ? LoadGguf(path, model)
                                                  : LoadPeft(path, model);
  if (!ad.ok()) return ad.status();
  std::filesystem::path named(path);
  if (named.filename().empty() || named.filename() == "adapter_config.json") named = named.parent_path();
  (*ad)->name = named.stem().string();
  return ad;
}

}  // namespace infera
