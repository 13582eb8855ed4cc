#include "tools/quantize_mix.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "prune/model_pruning.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"
#include "tools/prune_calibration.h"

namespace infera::cli {
namespace {

// Candidates, cheapest first: K-quants for rows of whole 256-blocks, else
// the 32-block types.
std::vector<DType> Ladder(int64_t n_in) {
  if (n_in % 256 == 0) return {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0};
  if (n_in % 32 == 0) return {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};
  return {DType::kF16};
}

double BitsPerWeight(DType t) {
  const DTypeInfo& i = GetDTypeInfo(t);
  return 8.0 * i.type_size / i.block_size;
}

double MeanKld(const std::vector<float>& base, const std::vector<float>& q, int32_t n_vocab) {
  const size_t rows = base.size() / n_vocab;
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* b = &base[r * n_vocab];
    const float* c = &q[r * n_vocab];
    double k = 0;
    for (int32_t i = 0; i < n_vocab; ++i) k += std::exp(static_cast<double>(b[i])) * (b[i] - c[i]);
    total += k;
  }
  return total / static_cast<double>(rows);
}

// The first block whose output a layer tensor changes (see ResidualTap): 2 l
// for layer l's attention matrices, 2 l + 1 for its FFN's (dense, router,
// experts, shared expert); 0 (a whole pass) for a name of another form.
int FirstBlockOf(const std::string& name) {
  int layer = -1, used = 0;
  if (std::sscanf(name.c_str(), "blk.%d.%n", &layer, &used) != 1 || layer < 0 || used == 0) return 0;
  const std::string rest = name.substr(static_cast<size_t>(used));
  if (rest.rfind("attn_", 0) == 0) return 2 * layer;
  if (rest.rfind("ffn_", 0) == 0) return 2 * layer + 1;
  return 0;
}

struct TensorParts {
  std::vector<WeightMatrix*> parts;
  int64_t elements = 0;
  int64_t n_in = 0;
};

}  // namespace

StatusOr<std::map<std::string, DType>> PlanMixedPrecision(LoadedModel* lm, const MixOptions& o, const Imatrix* im,
                                                          const RuntimeOptions& rt) {
  Model& model = *lm->model;
  std::map<std::string, TensorParts> tensors;
  for (const auto& lmx : prune::LayerMatrices(&model)) {
    TensorParts& t = tensors[lmx.name.substr(0, lmx.name.find('['))];
    t.parts.push_back(lmx.m);
    t.elements += lmx.m->n_out * lmx.m->n_in;
    t.n_in = lmx.m->n_in;
  }
  // The cheapest plan, every tensor at its ladder's first type, needs no
  // measurement: a budget below it is refused before any calibration pass.
  // (StartCalibration makes these matrices F32 in place: `parts` stay valid.)
  double total_elems = 0, cheapest_bits = 0;
  for (auto& [name, t] : tensors) {
    total_elems += static_cast<double>(t.elements);
    cheapest_bits += static_cast<double>(t.elements) * BitsPerWeight(Ladder(t.n_in)[0]);
  }
  const double budget = o.target_bpw * total_elems;
  if (cheapest_bits > budget) {
    return InvalidArgument(fmt::format("--target-bpw {:.3f} is below the cheapest plan ({:.3f} bits per weight)",
                                       o.target_bpw, cheapest_bits / total_elems));
  }

  auto session = StartCalibration(lm, o.calib, o.calib_tokens, o.calib_ctx, o.threads, rt);
  if (!session.ok()) return session.status();
  const auto& chunks = (*session)->chunks;
  Calibrator* cal = (*session)->calibrator.get();
  // The F32 model's rows, keeping the residual stream at every block's input:
  // each candidate's pass then starts at its tensor's block (the blocks
  // before it are the F32 model's), computing the same rows as a whole pass.
  auto base = cal->LogProbRowsKeepingBlockInputs(chunks);
  if (!base.ok()) return base.status();
  std::fprintf(stderr, "target-bpw: kept the residual stream at every block's input (%.1f MiB)\n",
               static_cast<double>(cal->block_inputs().bytes()) / (1 << 20));

  // kld[name][k]: the KLD with only this tensor in Ladder(n_in)[k].
  std::map<std::string, std::vector<double>> kld;
  int done = 0;
  for (auto& [name, t] : tensors) {
    const std::vector<DType> ladder = Ladder(t.n_in);
    std::vector<float> importance = im ? im->Importance(name) : std::vector<float>{};
    std::vector<std::vector<float>> saved;
    for (WeightMatrix* m : t.parts) {
      const float* w = reinterpret_cast<const float*>(m->data);
      saved.emplace_back(w, w + m->n_out * m->n_in);
    }
    for (DType type : ladder) {
      for (size_t p = 0; p < t.parts.size(); ++p) {
        WeightMatrix* m = t.parts[p];
        auto* w = const_cast<float*>(reinterpret_cast<const float*>(m->data));
        std::vector<uint8_t> q(*RowBytes(type, m->n_in));
        const bool per_part = importance.size() == static_cast<size_t>(m->n_in * t.parts.size());
        const float* qw = importance.empty() ? nullptr
                        : importance.data() + (per_part ? static_cast<int64_t>(p) * m->n_in : 0);
        if (importance.size() != static_cast<size_t>(m->n_in) && !per_part) qw = nullptr;
        for (int64_t r = 0; r < m->n_out; ++r) {
          QuantizeRow(type, saved[p].data() + r * m->n_in, q.data(), m->n_in, qw);
          DequantizeRow(type, q.data(), w + r * m->n_in, m->n_in);
        }
      }
      auto rows = cal->LogProbRowsFromBlock(chunks, FirstBlockOf(name));
      if (!rows.ok()) return rows.status();
      if (cal->block_inputs().unmatched() > 0) {  // the same rows, only slower
        std::fprintf(stderr, "target-bpw: warning: %d calibration passes for %s ran whole (no kept pass matched)\n",
                     cal->block_inputs().unmatched(), name.c_str());
      }
      kld[name].push_back(MeanKld(*base, *rows, cal->n_vocab()));
    }
    for (size_t p = 0; p < t.parts.size(); ++p) {
      std::copy(saved[p].begin(), saved[p].end(), const_cast<float*>(reinterpret_cast<const float*>(t.parts[p]->data)));
    }
    std::fprintf(stderr, "target-bpw: sensitivity %d/%zu tensors\n", ++done, tensors.size());
  }

  // Greedy allocation under the budget, from the cheapest plan.
  double bits = cheapest_bits;
  std::map<std::string, size_t> at;
  for (auto& [name, t] : tensors) at[name] = 0;
  for (;;) {
    std::string best;
    size_t best_k = 0;
    double best_ratio = 0, best_cost = 0;
    for (auto& [name, t] : tensors) {
      const auto ladder = Ladder(t.n_in);
      const size_t cur = at[name];
      for (size_t k = cur + 1; k < ladder.size(); ++k) {
        const double cost = static_cast<double>(t.elements) * (BitsPerWeight(ladder[k]) - BitsPerWeight(ladder[cur]));
        const double gain = kld[name][cur] - kld[name][k];
        if (cost <= 0 || gain <= 0 || bits + cost > budget) continue;
        if (gain / cost > best_ratio) {
          best_ratio = gain / cost;
          best = name;
          best_k = k;
          best_cost = cost;
        }
      }
    }
    if (best.empty()) break;
    at[best] = best_k;
    bits += best_cost;
  }
  std::map<std::string, DType> plan;
  double predicted = 0;
  std::fprintf(stderr, "target-bpw plan (%.3f bits per weight of the layer tensors; KLD when quantized alone):\n",
               bits / total_elems);
  for (auto& [name, t] : tensors) {
    const DType type = Ladder(t.n_in)[at[name]];
    plan[name] = type;
    predicted += kld[name][at[name]];
    std::fprintf(stderr, "  %-32s %-6s %.6f\n", name.c_str(), DTypeName(type), kld[name][at[name]]);
  }
  std::fprintf(stderr, "  sum of the tensors' KLDs: %.6f\n", predicted);
  return plan;
}

}  // namespace infera::cli
