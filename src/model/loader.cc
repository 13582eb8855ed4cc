#include "model/loader.h"

#include <cstring>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "base/file_util.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"

namespace infera {
namespace {

std::string HfNameFor(const std::string& gguf) {
  static const std::map<std::string, std::string> kGlobal = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  if (auto it = kGlobal.find(gguf); it != kGlobal.end()) return it->second;
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"}, {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"}, {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"}, {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (gguf.rfind("blk.", 0) == 0) {
    auto dot = gguf.find('.', 4);
    if (dot != std::string::npos) {
      auto it = kLayer.find(gguf.substr(dot + 1));
      if (it != kLayer.end()) return "model.layers." + gguf.substr(4, dot - 4) + "." + it->second;
    }
  }
  return "";
}

std::string SummarizeTypes(const ModelWeights& w) {
  std::map<std::string, int> counts;
  auto add = [&](const WeightMatrix& m) { counts[DTypeName(m.type)]++; };
  add(w.tok_embd);
  for (const auto& l : w.layers) {
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) add(*m);
  }
  std::string best;
  int n = -1;
  for (const auto& [k, v] : counts) if (v > n) { best = k; n = v; }
  return counts.size() == 1 ? best : best + " (mostly)";
}

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  std::shared_ptr<const GgufFile> file(std::move(f));
  ASSIGN_OR_RETURN(ModelConfig c, ConfigFromGguf(*file));
  if (file->tensors().empty()) return InvalidArgument(path + ": file has no tensors (vocab-only GGUF?)");
  TensorLookup lookup = [&](const std::string& n) { return file->FindTensor(n); };
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, {}, path));
  auto m = std::make_unique<Model>();
  m->config = c;
  m->weights = std::move(w);
  m->format = ModelFormat::kGguf;
  m->path = path;
  m->gguf = file;
  m->weight_type_summary = SummarizeTypes(*m->weights);
  return m;
}

StatusOr<std::unique_ptr<Model>> LoadHfFolder(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  if (!FileExists(cfg_path)) return NotFound(dir + ": folder has no config.json (not a Hugging Face model folder)");
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(cfg_path));
  ASSIGN_OR_RETURN(ModelConfig c, ConfigFromHfJson(text, cfg_path));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> st, SafetensorsSet::OpenDir(dir));
  std::shared_ptr<const SafetensorsSet> set(std::move(st));
  if (!c.tied_embeddings && set->Find("lm_head.weight") == nullptr) c.tied_embeddings = true;
  TensorLookup lookup = [&](const std::string& n) -> const TensorView* {
    const std::string hf = HfNameFor(n);
    return hf.empty() ? nullptr : set->Find(hf);
  };
  WeightLoadOptions opts;
  opts.permute_qk_from_hf = true;
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, opts, dir));
  auto m = std::make_unique<Model>();
  m->config = c;
  m->weights = std::move(w);
  m->format = ModelFormat::kSafetensors;
  m->path = dir;
  m->keep_alive.push_back(set);
  m->weight_type_summary = SummarizeTypes(*m->weights);
  return m;
}

StatusOr<std::unique_ptr<Model>> LoadLlama2c(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Llama2cCheckpoint> ck, Llama2cCheckpoint::Open(path));
  std::shared_ptr<const Llama2cCheckpoint> ckpt(std::move(ck));
  ModelConfig c = ConfigFromLlama2c(ckpt->header());
  RETURN_IF_ERROR(c.Validate(path));
  TensorLookup lookup = [&](const std::string& n) -> const TensorView* {
    for (const auto& t : ckpt->tensors()) if (t.name == n) return &t;
    return nullptr;
  };
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, {}, path));
  auto m = std::make_unique<Model>();
  m->config = c;
  m->weights = std::move(w);
  m->format = ModelFormat::kLlama2c;
  m->path = path;
  m->keep_alive.push_back(ckpt);
  m->weight_type_summary = "f32";
  return m;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path) {
  if (path.empty()) return InvalidArgument("empty model path");
  if (IsDirectory(path)) return LoadHfFolder(path);
  if (!FileExists(path)) return NotFound(path + ": no such file or directory");
  char magic[4] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return InvalidArgument(path + ": cannot open");
    in.read(magic, 4);
  }
  if (std::memcmp(magic, "GGUF", 4) == 0) return LoadGguf(path);
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    auto slash = path.rfind('/');
    return LoadHfFolder(slash == std::string::npos ? "." : path.substr(0, slash));
  }
  if (path.size() > 4 && path.substr(path.size() - 4) == ".bin") return LoadLlama2c(path);
  return InvalidArgument(path + ": unrecognized model format (expected a GGUF file, a Hugging Face folder or a llama2.c .bin)");
}

}  // namespace infera
