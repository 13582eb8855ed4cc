// infera info: architecture, hyper-parameters, tensor types and memory.
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "attention/kv_storage.h"
#include "base/file_util.h"
#include "base/json.h"
#include "formats/gguf_reader.h"
#include "formats/safetensors.h"
#include "model/loader.h"
#include "prune/model_pruning.h"
#include "tensor/quant_blocks.h"
#include "tools/commands.h"

namespace infera::cli {
namespace {

struct InfoArgs {
  std::string model;
  int32_t ctx = 0;
  bool sparsity = false;
};

// Each layer matrix: type, shape and fraction of exact zeros (dequantized).
void PrintSparsity(Model* m) {
  std::printf("%-34s %-7s %-13s %s\n", "tensor", "type", "shape", "zeros");
  std::vector<float> row;
  uint64_t zeros = 0, total = 0;
  for (const prune::LayerMatrix& lm : prune::LayerMatrices(m)) {
    const WeightMatrix& w = *lm.m;
    if (w.data == nullptr) continue;
    row.resize(w.n_in);
    uint64_t z = 0;
    for (int64_t r = 0; r < w.n_out; ++r) {
      DequantizeRow(w.type, w.data + r * w.row_bytes, row.data(), w.n_in);
      for (float x : row) z += x == 0.0f;
    }
    const uint64_t n = static_cast<uint64_t>(w.n_in) * w.n_out;
    zeros += z;
    total += n;
    std::printf("%-34s %-7s %-13s %.1f %%\n", lm.name.c_str(), DTypeName(w.type),
                fmt::format("{}x{}", w.n_out, w.n_in).c_str(), 100.0 * z / n);
  }
  std::printf("%-34s %-7s %-13s %.1f %%\n", "all layer matrices", "", "", total ? 100.0 * zeros / total : 0.0);
}

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) { bytes /= 1024; ++u; }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

uint64_t PathSize(const std::string& path) {
  if (!IsDirectory(path)) {
    auto s = FileSize(path);
    return s.ok() ? *s : 0;
  }
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// A LoRA adapter's tensors, counted: the layers and targets updated, the
// ranks of the A matrices, the tensor types, parameters and bytes.
struct AdapterCounts {
  std::map<std::string, int> targets, types;
  std::map<int64_t, int> ranks;
  std::map<int64_t, bool> layers;
  uint64_t params = 0, bytes = 0;
  void Add(const TensorView& t) {
    params += static_cast<uint64_t>(t.NumElements());
    bytes += t.nbytes;
    types[DTypeName(t.type)]++;
  }
  // The A matrix of `layer`'s `target`, with `rank` rows.
  void AddA(int64_t layer, const std::string& target, int64_t rank) {
    layers[layer] = true;
    targets[target]++;
    ranks[rank]++;
  }
};

void PrintAdapterCounts(const AdapterCounts& c) {
  auto list = [](const auto& m, const char* unit) {
    std::string out;
    for (const auto& [k, n] : m) out += fmt::format("{}{} ({} {})", out.empty() ? "" : ", ", k, n, unit);
    return out;
  };
  std::printf("layers updated:    %zu\n", c.layers.size());
  std::printf("targets:           %s\n", list(c.targets, "layers").c_str());
  std::printf("ranks:             %s\n", list(c.ranks, "matrices").c_str());
  std::printf("tensor types:      %s\n", list(c.types, "tensors").c_str());
  std::printf("parameters:        %.2f M (%s)\n", c.params / 1e6, Human(static_cast<double>(c.bytes)).c_str());
}

// A PEFT LoRA folder (adapter_config.json + adapter_model.safetensors, no
// model config.json). Returns false when `path` is not one.
bool PrintPeftAdapterInfo(const std::string& path, int* exit_code) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || !fs::exists(fs::path(path) / "adapter_config.json", ec) ||
      fs::exists(fs::path(path) / "config.json", ec)) {
    return false;
  }
  StatusOr<std::string> text = ReadFileToString((fs::path(path) / "adapter_config.json").string());
  if (!text.ok()) {
    *exit_code = ReportError(text.status());
    return true;
  }
  const nlohmann::json cfg = ParseJson(*text);
  if (!cfg.is_object()) {
    *exit_code = ReportError(path + "/adapter_config.json: not a JSON object");
    return true;
  }
  auto set = SafetensorsSet::OpenFile((fs::path(path) / "adapter_model.safetensors").string());
  if (!set.ok()) {
    *exit_code = ReportError(set.status());
    return true;
  }
  AdapterCounts c;
  for (const auto& [name, t] : (*set)->tensors()) {
    c.Add(t);
    // base_model.model.model.layers.N.<module>.<proj>.lora_A.weight: A [r, n_in] (ne = {n_in, r}).
    const std::string prefix = "base_model.model.model.layers.", suffix = ".lora_A.weight";
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string rest = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || t.ne.size() != 2) continue;
    c.AddA(std::strtoll(rest.c_str(), nullptr, 10), rest.substr(dot + 1), t.ne[1]);
  }
  auto str = [&](const char* key) {
    return cfg.contains(key) && cfg[key].is_string() ? cfg[key].get<std::string>() : std::string("?");
  };
  std::printf("path:              %s\n", path.c_str());
  std::printf("format:            PEFT folder (a %s adapter, not a model: give it with --lora)\n",
              cfg.contains("peft_type") ? str("peft_type").c_str() : "LORA");
  std::printf("base model:        %s\n", str("base_model_name_or_path").c_str());
  const bool rslora = cfg.contains("use_rslora") && cfg["use_rslora"] == true;
  const std::string alpha = cfg.contains("lora_alpha") && cfg["lora_alpha"].is_number()
                                ? fmt::format("{:g}", cfg["lora_alpha"].get<double>())
                                : std::string("?");
  std::printf("alpha:             %s%s\n", alpha.c_str(), rslora ? " (rsLoRA: alpha / sqrt(r))" : "");
  PrintAdapterCounts(c);
  *exit_code = kExitOk;
  return true;
}

// A GGUF LoRA adapter (general.type "adapter"): what it holds, read from the
// file alone (its shapes are checked against a model when --lora loads it).
// Returns false when `path` is not a GGUF adapter.
bool PrintAdapterInfo(const std::string& path, int* exit_code) {
  if (PrintPeftAdapterInfo(path, exit_code)) return true;
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".gguf") != 0) return false;
  auto f = GgufFile::Open(path);
  if (!f.ok() || (*f)->GetString("general.type").value_or("") != "adapter") return false;
  const GgufFile& g = **f;
  AdapterCounts c;
  for (const TensorView& t : g.tensors()) {
    c.Add(t);
    // blk.N.<target>.weight.lora_a: A [r, n_in] (ne = {n_in, r}).
    const std::string suffix = ".weight.lora_a";
    if (t.name.rfind("blk.", 0) != 0 || t.name.size() <= suffix.size() ||
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const size_t dot = t.name.find('.', 4);
    if (dot == std::string::npos || t.ne.size() != 2) continue;
    c.AddA(std::strtoll(t.name.c_str() + 4, nullptr, 10),
           t.name.substr(dot + 1, t.name.size() - suffix.size() - dot - 1), t.ne[1]);
  }
  std::printf("path:              %s\n", path.c_str());
  std::printf("format:            GGUF v%u (a %s adapter, not a model: give it with --lora)\n", g.version(),
              g.GetString("adapter.type").value_or("?").c_str());
  std::printf("architecture:      %s\n", g.GetString("general.architecture").value_or("?").c_str());
  const double alpha = g.GetFloat("adapter.lora.alpha").value_or(0.0);
  std::printf("alpha:             %s\n",
              alpha > 0 ? fmt::format("{:g}", alpha).c_str() : "none (alpha / r taken as 1)");
  PrintAdapterCounts(c);
  *exit_code = kExitOk;
  return true;
}

int Info(const InfoArgs& a) {
  if (a.ctx < 0) return ReportError("--ctx-size must be >= 0");
  if (int code = 0; PrintAdapterInfo(a.model, &code)) return code;
  auto lm = LoadModelAndTokenizer(a.model, "", false);
  if (!lm.ok()) return ReportError(lm.status());
  const Model& m = *lm->model;
  const ModelConfig& c = m.config;
  const auto& w = *m.weights;
  std::map<std::string, int> types;
  uint64_t params = 0;
  auto count = [&](const WeightMatrix& x) {
    types[DTypeName(x.type)]++;
    params += static_cast<uint64_t>(x.n_in) * x.n_out;
  };
  count(w.tok_embd);
  if (!c.tied_embeddings) count(w.output);
  params += w.output_norm.size();
  for (const auto& l : w.layers) {
    for (const auto* x : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) count(*x);
    params += l.attn_norm.size() + l.ffn_norm.size() + l.bq.size() + l.bk.size() + l.bv.size();
  }
  types["f32"] += 1 + 2 * c.n_layer;  // norms
  const int32_t n_ctx = ChooseContextSize(c, a.ctx);
  const uint64_t kv = KvStorage::BytesFor(c.KvHeadsPerLayer(), n_ctx, c.head_dim);
  const RopeScaling& rs = c.rope_scaling;
  std::string scaling = "none";
  if (rs.type == RopeScaling::Type::kLinear) scaling = fmt::format("linear x{:g}", rs.factor);
  else if (rs.type == RopeScaling::Type::kYarn) {
    scaling = fmt::format("yarn x{:g} of {} (attention factor {:.4g})", rs.factor, rs.original_max_position, rs.mscale);
  } else if (rs.type == RopeScaling::Type::kLongRope) {
    scaling = fmt::format("longrope, long factors past {} (attention factor {:.4g})", rs.original_max_position,
                          rs.mscale);
  } else if (!w.rope_freq_factors.empty()) {
    scaling = "llama3 (freq factors)";
  }
  const char* rope_scaling = scaling.c_str();
  std::printf("path:              %s\n", m.path.c_str());
  std::printf("format:            %s%s\n", ModelFormatName(m.format),
              m.gguf ? fmt::format(" v{}", m.gguf->version()).c_str() : "");
  std::printf("architecture:      %s\n", ArchName(c.arch));
  std::printf("name:              %s\n", c.name.c_str());
  std::printf("vocab size:        %d\n", c.n_vocab);
  std::printf("embedding length:  %d\n", c.n_embd);
  std::printf("layers:            %d\n", c.n_layer);
  std::printf("heads:             %d (kv heads %d, head dim %d)\n", c.n_head, c.n_head_kv, c.head_dim);
  if (c.moe()) {
    std::printf("experts:           %d, %d used per token, feed-forward %d%s%s\n", c.n_expert, c.n_expert_used,
                c.n_ff_exp, c.n_ff_shexp > 0 ? fmt::format(", shared expert {}", c.n_ff_shexp).c_str() : "",
                c.expert_weights_norm ? "" : ", weights not renormalized");
  } else {
    std::printf("feed-forward:      %d\n", c.n_ff);
  }
  if (c.variable_widths()) {  // pruned: layers differ
    std::string per;
    for (int l = 0; l < c.n_layer; ++l) {
      per += fmt::format("{}{}/{}/{}", l == 0 ? "" : " ", c.n_head_at(l), c.n_head_kv_at(l), c.n_ff_at(l));
    }
    std::printf("per layer:         %s (heads/kv heads/feed-forward)\n", per.c_str());
  }
  std::printf("context (trained): %d\n", c.n_ctx_train);
  std::printf("rms eps:           %g\n", c.rms_eps);
  std::printf("rope:              theta %g, dims %d, %s layout, scaling %s\n", c.rope_theta, c.rope_dim,
              c.rope_style == RopeStyle::kNorm ? "pairwise" : "neox", rope_scaling);
  std::string window = c.sliding_window > 0 ? std::to_string(c.sliding_window) : "none";
  if (c.sliding_window > 0 && c.swa_period > 0) {
    window += fmt::format(" on {} of every {} layers", c.swa_period - 1, c.swa_period);
  }
  if (c.rope_theta_swa > 0 && c.sliding_window > 0) window += fmt::format(" (rope theta {:g})", c.rope_theta_swa);
  std::printf("sliding window:    %s\n", window.c_str());
  if (c.attn_softcap > 0 || c.final_softcap > 0) {
    std::printf("soft-capping:      attention %g, final logits %g\n", c.attn_softcap, c.final_softcap);
  }
  std::printf("qkv bias:          %s\n", c.qkv_bias ? "yes" : "no");
  std::printf("tied embeddings:   %s\n", c.tied_embeddings ? "yes" : "no");
  std::string ts;
  for (const auto& [t, n] : types) ts += fmt::format("{}{}: {}", ts.empty() ? "" : ", ", t, n);
  std::printf("tensor types:      %s\n", ts.c_str());
  std::printf("parameters:        %llu (%.1f M)\n", static_cast<unsigned long long>(params), params / 1e6);
  std::printf("file size:         %s\n", Human(static_cast<double>(PathSize(m.path))).c_str());
  std::printf("weights in memory: %s (%.3fx the tensors' %s in the file; %s repacked for the integer kernels)\n",
              Human(static_cast<double>(w.resident_bytes())).c_str(), w.resident_ratio(),
              Human(static_cast<double>(w.total_bytes)).c_str(), Human(static_cast<double>(w.packed_bytes)).c_str());
  std::printf("kv cache:          %s for %d tokens (f32)\n", Human(static_cast<double>(kv)).c_str(), n_ctx);
  std::printf("memory needed:     %s\n", Human(static_cast<double>(w.resident_bytes() + kv)).c_str());
  if (!m.extra_eog_ids.empty()) {
    std::string ids;
    for (int32_t id : m.extra_eog_ids) ids += (ids.empty() ? "" : " ") + std::to_string(id);
    std::printf("eos ids (config):  %s\n", ids.c_str());
  }
  if (m.gguf) {
    if (auto method = m.gguf->GetString("infera.pruning.method")) {
      std::string how = *method;
      if (auto p = m.gguf->GetString("infera.pruning.pattern")) how += ", " + *p;
      if (auto sp = m.gguf->GetFloat("infera.pruning.sparsity")) how += fmt::format(", sparsity {:.3f}", *sp);
      std::printf("pruning:           %s\n", how.c_str());
    }
  }
  if (lm->tokenizer) std::printf("tokenizer:         %d tokens, bos %d, eos %d\n", lm->tokenizer->n_vocab(),
                                 lm->tokenizer->vocab().bos, lm->tokenizer->vocab().eos);
  if (a.sparsity) PrintSparsity(lm->model.get());
  return kExitOk;
}

}  // namespace

CommandFn RegisterInfo(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<InfoArgs>();
  app.add_option("model", a->model, "GGUF file, Hugging Face folder or llama2.c .bin (default: the bundled model)");
  app.add_option("-c,--ctx-size", a->ctx, "context size for the memory estimate (0: default)");
  app.add_flag("--sparsity", a->sparsity, "list every layer matrix with its type, shape and fraction of zeros");
  return [a]() { return Info(*a); };
}

}  // namespace infera::cli
