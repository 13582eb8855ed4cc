#include "model/shard.h"

#include <algorithm>
#include <numeric>

#include "model/weights.h"

#include <fmt/format.h>

namespace infera {
namespace {

// The role filling `member` of a layer (null if none).
const TensorRole* LayerRole(WeightMatrix LayerWeights::*member) {
  for (const TensorRole& r : DecoderTensorRoles()) {
    if (r.layer_matrix == member) return &r;
  }
  return nullptr;
}
const TensorRole* ExpertRole(std::vector<WeightMatrix> LayerWeights::*member) {
  for (const TensorRole& r : DecoderTensorRoles()) {
    if (r.layer_experts == member) return &r;
  }
  return nullptr;
}

// Elements per quantization block of a role's tensor in `layer` (1 when it
// is absent: nothing to align to).
int64_t BlockOf(const TensorLookup& lookup, const TensorRole* r, int layer) {
  if (r == nullptr) return 1;
  const TensorView* t = lookup(GgufTensorName(*r, layer));
  if (t == nullptr && r->gguf_per_expert != nullptr) t = lookup(GgufExpertTensorName(*r, layer, 0));
  return t == nullptr ? 1 : GetDTypeInfo(t->type).block_size;
}

// Rank r's part of n items split as evenly as possible over `parts` ranks.
IndexRange EvenPart(int64_t n, int parts, int r) { return {n * r / parts, n * (r + 1) / parts}; }

// Rank r's columns of a width-n dimension whose columns go in whole blocks
// of `block` elements (uneven by at most a block when they do not divide).
StatusOr<IndexRange> BlockPart(int64_t n, int64_t block, int parts, int r, const std::string& what) {
  const int64_t units = n / block;
  if (units < parts) {
    return InvalidArgument(fmt::format("{} is {} wide ({} quantization blocks of {}): too narrow to split over {} "
                                       "tensor-parallel ranks",
                                       what, n, units, block, parts));
  }
  const IndexRange u = EvenPart(units, parts, r);
  return IndexRange{u.begin * block, u.end * block};
}

// Layers per stage so that the stages hold about equal weight bytes, the
// output matrix counted on the last stage (where the logits are computed).
std::vector<int> BalancedStages(const ModelConfig& c, const TensorLookup& lookup, int P) {
  std::vector<double> bytes(c.n_layer, 0.0);
  double tail = 0;
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    const TensorView* t = lookup(GgufTensorName(r, layer));
    if (t == nullptr) return;
    if (layer >= 0) {
      bytes[layer] += static_cast<double>(t->nbytes);
    } else if (r.model_matrix == &ModelWeights::output ||
               (c.tied_embeddings && r.model_matrix == &ModelWeights::tok_embd)) {
      tail += static_cast<double>(t->nbytes);
    }
  });
  double left = tail;
  for (double b : bytes) left += b;
  std::vector<int> out;
  int l = 0;
  for (int p = 0; p < P - 1; ++p) {
    const double target = left / (P - p);
    double acc = 0;
    int n = 0;
    // At least one layer, and one left for every later stage; stop where
    // one more layer would overshoot the target by more than it undershoots.
    while (l + n < c.n_layer - (P - 1 - p) && (n == 0 || acc + bytes[l + n] / 2 <= target)) {
      acc += bytes[l + n++];
    }
    out.push_back(n);
    l += n;
    left -= acc;
  }
  out.push_back(c.n_layer - l);
  return out;
}

}  // namespace

IndexRange ShardSpec::DimRange(const ModelConfig& c, Dim d, int layer) const {
  const IndexRange whole{0, DimSize(c, d, layer)};
  if (tp_size == 1 || layer < 0 || q_heads.empty()) return whole;
  const int64_t hd = c.head_dim;
  switch (d) {
    case Dim::kQ: return {q_heads[layer].begin * hd, q_heads[layer].end * hd};
    case Dim::kKv: return {kv_heads[layer].begin * hd, kv_heads[layer].end * hd};
    case Dim::kFf: return ff[layer];
    case Dim::kFfExp: return ff_exp[layer];
    case Dim::kFfShexp: return ff_shexp[layer];
    default: return whole;
  }
}

StatusOr<ShardSpec> PlanShard(const ModelConfig& c, const TensorLookup& lookup, const ParallelLayout& layout,
                              int rank) {
  const int T = layout.tp, P = layout.pp;
  if (T < 1 || P < 1) return InvalidArgument("--tp and --pp must be at least 1");
  if (rank < 0 || rank >= T * P) return Internal("rank outside the parallel layout");
  if (P > c.n_layer) {
    return InvalidArgument(fmt::format("--pp {} exceeds the model's {} layers", P, c.n_layer));
  }
  ShardSpec s;
  s.tp_size = T;
  s.pp_size = P;
  s.tp_rank = rank % T;
  s.pp_rank = rank / T;
  // Stage boundaries.
  std::vector<int> per_stage = layout.pp_layers;
  if (per_stage.empty()) per_stage = BalancedStages(c, lookup, P);
  if (static_cast<int>(per_stage.size()) != P) {
    return InvalidArgument(fmt::format("--pp-layers names {} stages but --pp is {}", per_stage.size(), P));
  }
  if (std::any_of(per_stage.begin(), per_stage.end(), [](int n) { return n < 1; }) ||
      std::accumulate(per_stage.begin(), per_stage.end(), 0) != c.n_layer) {
    return InvalidArgument(fmt::format("--pp-layers must give every stage at least one layer and {} in all", c.n_layer));
  }
  s.stage_begin.push_back(0);
  for (int n : per_stage) s.stage_begin.push_back(s.stage_begin.back() + n);
  // Tensor-parallel ranges, layer by layer.
  const TensorRole* wo = LayerRole(&LayerWeights::wo);
  const TensorRole* down = LayerRole(&LayerWeights::w_down);
  const TensorRole* exp_down = ExpertRole(&LayerWeights::exp_down);
  const TensorRole* sh_down = LayerRole(&LayerWeights::sh_down);
  const int r = s.tp_rank;
  for (int l = 0; l < c.n_layer; ++l) {
    const int qh = c.n_head_at(l), kvh = c.n_head_kv_at(l);
    if (kvh % T != 0 || qh % T != 0) {
      return InvalidArgument(fmt::format(
          "layer {} has {} KV heads ({} query heads), which {} tensor-parallel ranks cannot share evenly (a GQA group "
          "never straddles ranks); choose a --tp that divides {}",
          l, kvh, qh, T, std::gcd(kvh, qh)));
    }
    s.q_heads.push_back(EvenPart(qh, T, r));
    s.kv_heads.push_back(EvenPart(kvh, T, r));
    const int64_t wo_block = T > 1 ? BlockOf(lookup, wo, l) : 1;
    s.wo_whole.push_back(static_cast<int64_t>(qh / T) * c.head_dim % wo_block != 0);
    const std::string where = fmt::format("layer {}'s ", l);
    if (c.moe()) {
      s.ff.push_back({0, 0});
      ASSIGN_OR_RETURN(IndexRange fe, BlockPart(c.n_ff_exp, T > 1 ? BlockOf(lookup, exp_down, l) : 1, T, r,
                                                where + "expert FFN"));
      s.ff_exp.push_back(fe);
      if (c.n_ff_shexp > 0) {
        ASSIGN_OR_RETURN(IndexRange fs, BlockPart(c.n_ff_shexp, T > 1 ? BlockOf(lookup, sh_down, l) : 1, T, r,
                                                  where + "shared-expert FFN"));
        s.ff_shexp.push_back(fs);
      } else {
        s.ff_shexp.push_back({0, 0});
      }
    } else {
      ASSIGN_OR_RETURN(IndexRange f, BlockPart(c.n_ff_at(l), T > 1 ? BlockOf(lookup, down, l) : 1, T, r,
                                               where + "FFN"));
      s.ff.push_back(f);
      s.ff_exp.push_back({0, 0});
      s.ff_shexp.push_back({0, 0});
    }
  }
  s.vocab = EvenPart(c.n_vocab, T, r);
  return s;
}

ModelConfig ShardConfig(const ModelConfig& c, const ShardSpec& s) {
  if (!s.split()) return c;
  ModelConfig out = c;
  out.layer_n_head.assign(c.n_layer, 0);
  out.layer_n_head_kv.assign(c.n_layer, 0);
  out.layer_n_ff.assign(c.n_layer, 0);
  out.n_head = out.n_head_kv = out.n_ff = 0;
  for (int l = s.layer_begin(); l < s.layer_end(); ++l) {
    out.layer_n_head[l] = static_cast<int>(s.q_heads[l].size());
    out.layer_n_head_kv[l] = static_cast<int>(s.kv_heads[l].size());
    out.layer_n_ff[l] = static_cast<int>(s.ff[l].size());
    out.n_head = std::max(out.n_head, out.layer_n_head[l]);
    out.n_head_kv = std::max(out.n_head_kv, out.layer_n_head_kv[l]);
    out.n_ff = std::max(out.n_ff, out.layer_n_ff[l]);
  }
  if (c.moe()) {
    const int l = s.layer_begin();
    out.n_ff_exp = static_cast<int>(s.ff_exp[l].size());
    out.n_ff_shexp = static_cast<int>(s.ff_shexp[l].size());
  }
  return out;
}

std::string DescribeShard(const ModelConfig& c, const ShardSpec& s) {
  const int l0 = s.layer_begin(), l1 = s.layer_end();
  std::string out = fmt::format("rank {} = stage {} (layers {}-{}) x tp rank {}", s.world_rank(), s.pp_rank, l0,
                                l1 - 1, s.tp_rank);
  if (s.tp_size > 1 && l1 > l0) {
    const IndexRange f = c.moe() ? s.ff_exp[l0] : s.ff[l0];
    out += fmt::format(": heads {}-{}, kv heads {}-{}, {}ffn columns {}-{}", s.q_heads[l0].begin,
                       s.q_heads[l0].end - 1, s.kv_heads[l0].begin, s.kv_heads[l0].end - 1, c.moe() ? "expert " : "",
                       f.begin, f.end - 1);
    if (s.wo_whole[l0]) out += ", attention output whole";
  }
  if (s.last_stage()) out += fmt::format(", vocab {}-{}", s.vocab.begin, s.vocab.end - 1);
  return out;
}

}  // namespace infera
