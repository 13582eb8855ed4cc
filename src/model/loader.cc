#include "model/loader.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"
#include "base/logging.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "model/arch/registry.h"
#include "model/bf16_weights.h"
#include "model/tensor_schema.h"

namespace infera {

const char* ModelFormatName(ModelFormat f) {
  switch (f) {
    case ModelFormat::kGguf: return "gguf";
    case ModelFormat::kSafetensors: return "safetensors";
    case ModelFormat::kLlama2c: return "llama2.c";
  }
  return "?";
}

namespace {

std::string SummarizeTypes(const ModelConfig& c, const ModelWeights& w) {
  // The embedding and the layers' matrices (not the output, whose type
  // llama.cpp's mixtures choose apart).
  std::map<std::string, int> counts;
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (!r.matrix || r.model_matrix == &ModelWeights::output) return;
    const auto ms = r.per_layer ? RoleLayerMatrices(r, w.layers[layer]) : std::vector<const WeightMatrix*>{};
    if (r.per_layer && ms.empty()) return;  // another stage's experts
    const WeightMatrix* m = r.per_layer ? ms[0] : RoleMatrix(r, layer, w);
    if (m->data == nullptr && m->packed == nullptr) return;  // another stage's layer
    counts[DTypeName(m->type)]++;
  });
  std::string best;
  int n = -1;
  for (const auto& [k, v] : counts) if (v > n) { best = k; n = v; }
  return counts.size() == 1 ? best : best + " (mostly)";
}

// Plans the shard of a split load into *shard and points opts at it; passes
// the kernel ISA on.
Status PlanLoad(const ModelConfig& c, const TensorLookup& lookup, const ModelLoadOptions& lo, ShardSpec* shard,
                WeightLoadOptions* opts) {
  opts->kernel_isa = lo.kernel_isa;
  if (lo.layout.world_size() == 1) return Status::Ok();
  ASSIGN_OR_RETURN(*shard, PlanShard(c, lookup, lo.layout, lo.rank));
  opts->shard = shard;
  return Status::Ok();
}

// The model's config (the shard's when split) and shard.
void SetConfig(const ModelConfig& c, const ShardSpec& shard, Model* m) {
  m->whole_config = c;
  m->shard = shard;
  m->config = ShardConfig(c, shard);
}

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path, const ModelLoadOptions& lo) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  std::shared_ptr<const GgufFile> file(std::move(f));
  ASSIGN_OR_RETURN(ModelConfig c, ConfigFromGguf(*file));
  if (file->tensors().empty()) return InvalidArgument(path + ": file has no tensors (vocab-only GGUF?)");
  TensorLookup lookup = [&](const std::string& n) { return file->FindTensor(n); };
  WeightLoadOptions opts;
  opts.release_source = [&](const uint8_t* p, size_t n) { file->ReleasePages(p, n); };
  ShardSpec shard;
  RETURN_IF_ERROR(PlanLoad(c, lookup, lo, &shard, &opts));
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, opts, path));
  auto m = std::make_unique<Model>();
  SetConfig(c, shard, m.get());
  m->weights = std::move(w);
  m->format = ModelFormat::kGguf;
  m->path = path;
  m->gguf = file;
  m->weight_type_summary = SummarizeTypes(m->config, *m->weights);
  return m;
}

// HF checkpoints keep each MoE expert in its own tensors; the schema's
// stacked tensor (ne = {n_in, n_out, n_expert}) is built by copying them
// into one buffer. Views and buffers live as long as the model.
class ExpertStacker {
 public:
  explicit ExpertStacker(const SafetensorsSet& set) : set_(set) {}
  // `pattern` names expert e with "{e}"; null if an expert is missing or the
  // experts differ in type or shape (BuildWeights then reports the tensor).
  const TensorView* Stack(const std::string& pattern, int n_expert) {
    const size_t at = pattern.find("{e}");
    std::vector<const TensorView*> parts;
    for (int e = 0; e < n_expert; ++e) {
      const std::string name = pattern.substr(0, at) + std::to_string(e) + pattern.substr(at + 3);
      const TensorView* t = set_.Find(name);
      if (t == nullptr || t->ne.size() != 2 || (!parts.empty() && (t->type != parts[0]->type || t->ne != parts[0]->ne))) {
        return nullptr;
      }
      parts.push_back(t);
    }
    Stacked& s = stacked_.emplace_back();
    for (const TensorView* t : parts) s.bytes.insert(s.bytes.end(), t->data, t->data + t->nbytes);
    s.view.name = pattern;
    s.view.type = parts[0]->type;
    s.view.ne = {parts[0]->ne[0], parts[0]->ne[1], n_expert};
    s.view.data = s.bytes.data();
    s.view.nbytes = s.bytes.size();
    return &s.view;
  }

 private:
  struct Stacked {
    std::vector<uint8_t> bytes;
    TensorView view;
  };
  const SafetensorsSet& set_;
  std::deque<Stacked> stacked_;  // stable addresses
};

// eos_token_id of a JSON file (an int or a list of ints); missing files and
// keys are fine, a malformed file is reported.
Status ReadEosIds(const std::string& path, int32_t n_vocab, std::vector<int32_t>* out) {
  if (!FileExists(path)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto j = ParseJson(text);
  if (j.is_discarded() || !j.is_object()) return DataLoss(path + ": not a JSON object");
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return Status::Ok();
  std::vector<nlohmann::json> ids;
  if (it->is_array()) ids.assign(it->begin(), it->end());
  else ids.push_back(*it);
  for (const auto& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab) {
      return DataLoss(path + ": eos_token_id must be token ids below the vocab size");
    }
    const int32_t v = id.get<int32_t>();
    if (std::find(out->begin(), out->end(), v) == out->end()) out->push_back(v);
  }
  return Status::Ok();
}

// Where a checkpoint keeps the language model's tensors: at the top
// ("model.layers.0...", "lm_head.weight"), or inside a multimodal model —
// "language_model.model..." / "language_model.lm_head..." (transformers
// before 4.52) or "model.language_model..." / "lm_head..." (after). Maps the
// schema's HF names onto the checkpoint's.
class HfNameMap {
 public:
  explicit HfNameMap(const SafetensorsSet& set) {
    if (set.Find("model.embed_tokens.weight") != nullptr) return;
    if (set.Find("language_model.model.embed_tokens.weight") != nullptr) {
      model_ = "language_model.model.";
      head_ = "language_model.lm_head.";
    } else if (set.Find("model.language_model.embed_tokens.weight") != nullptr) {
      model_ = "model.language_model.";
    }
  }
  std::string operator()(const std::string& hf) const {
    if (hf.compare(0, 6, "model.") == 0) return model_ + hf.substr(6);
    if (hf.compare(0, 8, "lm_head.") == 0) return head_ + hf.substr(8);
    return hf;
  }

 private:
  std::string model_ = "model.", head_ = "lm_head.";
};

StatusOr<std::unique_ptr<Model>> LoadHfFolder(const std::string& dir, const ModelLoadOptions& lo) {
  const std::string cfg_path = dir + "/config.json";
  if (!FileExists(cfg_path)) return NotFound(dir + ": folder has no config.json (not a Hugging Face model folder)");
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(cfg_path));
  ASSIGN_OR_RETURN(ModelConfig c, ConfigFromHfJson(text, cfg_path));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> st, SafetensorsSet::OpenDir(dir));
  std::shared_ptr<const SafetensorsSet> set(std::move(st));
  const HfNameMap hf_name(*set);
  if (!c.tied_embeddings && set->Find(hf_name(HfNameForGguf(GlobalTensorName(&ModelWeights::output), c))) == nullptr) {
    c.tied_embeddings = true;
  }
  auto experts = std::make_shared<ExpertStacker>(*set);
  TensorLookup lookup = [&](const std::string& n) -> const TensorView* {
    const std::string hf = hf_name(HfNameForGguf(n, c));
    if (hf.find("{e}") != std::string::npos) return experts->Stack(hf, c.n_expert);
    return hf.empty() ? nullptr : set->Find(hf);
  };
  WeightLoadOptions opts;
  opts.permute_qk_from_hf = true;
  opts.norm_plus_one = GetArch(c.arch).hf_norm_plus_one;
  ShardSpec shard;
  RETURN_IF_ERROR(PlanLoad(c, lookup, lo, &shard, &opts));
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, opts, dir));
  auto m = std::make_unique<Model>();
  SetConfig(c, shard, m.get());
  m->weights = std::move(w);
  m->format = ModelFormat::kSafetensors;
  m->path = dir;
  RETURN_IF_ERROR(ReadEosIds(cfg_path, c.n_vocab, &m->extra_eog_ids));
  RETURN_IF_ERROR(ReadEosIds(dir + "/generation_config.json", c.n_vocab, &m->extra_eog_ids));
  m->keep_alive.push_back(set);
  m->keep_alive.push_back(experts);
  m->weight_type_summary = SummarizeTypes(m->config, *m->weights);
  return m;
}

StatusOr<std::unique_ptr<Model>> LoadLlama2c(const std::string& path, const ModelLoadOptions& lo) {
  ASSIGN_OR_RETURN(std::unique_ptr<Llama2cCheckpoint> ck, Llama2cCheckpoint::Open(path));
  std::shared_ptr<const Llama2cCheckpoint> ckpt(std::move(ck));
  ModelConfig c = ConfigFromLlama2c(ckpt->header());
  RETURN_IF_ERROR(c.Validate(path));
  TensorLookup lookup = [&](const std::string& n) -> const TensorView* {
    for (const auto& t : ckpt->tensors()) if (t.name == n) return &t;
    return nullptr;
  };
  WeightLoadOptions opts;
  ShardSpec shard;
  RETURN_IF_ERROR(PlanLoad(c, lookup, lo, &shard, &opts));
  ASSIGN_OR_RETURN(auto w, BuildWeights(c, lookup, opts, path));
  auto m = std::make_unique<Model>();
  SetConfig(c, shard, m.get());
  m->weights = std::move(w);
  m->format = ModelFormat::kLlama2c;
  m->path = path;
  m->keep_alive.push_back(ckpt);
  m->weight_type_summary = "f32";
  return m;
}

// The one *.gguf file of a folder without config.json; "" when the folder
// has a config.json or no GGUF (then it is read as a Hugging Face folder).
StatusOr<std::string> SingleGgufInFolder(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec)) return std::string();
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".gguf" && e.is_regular_file(ec)) found.push_back(e.path().string());
  }
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    return InvalidArgument(fmt::format("{}: folder holds {} GGUF files ({}, ...): name one", dir, found.size(),
                                       found[0]));
  }
  return found.empty() ? std::string() : found[0];
}

// The model at path, its weights as each format stores them.
StatusOr<std::unique_ptr<Model>> LoadModelOfFormat(const std::string& path, const ModelLoadOptions& lo) {
  if (path.empty()) return InvalidArgument("empty model path");
  if (IsDirectory(path)) {
    // A folder with one GGUF and no config.json (a mounted volume, KServe's
    // /mnt/models) stands for that file.
    ASSIGN_OR_RETURN(std::string gguf, SingleGgufInFolder(path));
    if (gguf.empty()) return LoadHfFolder(path, lo);
    return LoadModelOfFormat(gguf, lo);
  }
  if (!FileExists(path)) return NotFound(path + ": no such file or directory");
  char magic[4] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return InvalidArgument(path + ": cannot open");
    in.read(magic, 4);
  }
  if (std::memcmp(magic, "GGUF", 4) == 0) return LoadGguf(path, lo);
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    auto slash = path.rfind('/');
    return LoadHfFolder(slash == std::string::npos ? "." : path.substr(0, slash), lo);
  }
  if (path.size() > 4 && path.substr(path.size() - 4) == ".bin") return LoadLlama2c(path, lo);
  return InvalidArgument(path + ": unrecognized model format (expected a GGUF file, a Hugging Face folder or a llama2.c .bin)");
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path, const ModelLoadOptions& lo) {
  ASSIGN_OR_RETURN(std::unique_ptr<Model> m, LoadModelOfFormat(path, lo));
  if (lo.float_weights_bf16) {
    const KernelTable k = MakeKernelTable(lo.kernel_isa);
    std::function<void(const uint8_t*, size_t)> release;
    if (m->gguf != nullptr) release = [g = m->gguf](const uint8_t* p, size_t n) { g->ReleasePages(p, n); };
    const int n = StoreFloatMatricesAsBf16(m->config, k.row_to_bf16, release, m->weights.get());
    if (n > 0) LOG_INFO("{} float matrices stored as bf16 for the bf16 products", n);
  }
  return m;
}

}  // namespace infera
