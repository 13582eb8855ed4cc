#include "prune/model_pruning.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "base/check.h"
#include "model/tensor_schema.h"
#include "tensor/quant_blocks.h"

namespace infera::prune {
namespace {

// What `m` (a matrix of layer L) multiplies; false for the router (not pruned).
bool InputOf(const LayerWeights& L, const WeightMatrix* m, LinearInput* in, int* expert) {
  *expert = -1;
  if (m == &L.router) return false;
  if (m == &L.wq || m == &L.wk || m == &L.wv) *in = LinearInput::kAttnIn;
  else if (m == &L.wo) *in = LinearInput::kAttnOut;
  else if (m == &L.w_down) *in = LinearInput::kFfnMid;
  else if (m == &L.sh_down) *in = LinearInput::kSharedMid;
  else *in = LinearInput::kFfnIn;
  auto find = [&](const std::vector<WeightMatrix>& v, LinearInput kind) {
    for (size_t e = 0; e < v.size(); ++e) {
      if (m == &v[e]) {
        *in = kind;
        *expert = static_cast<int>(e);
      }
    }
  };
  find(L.exp_gate, LinearInput::kExpertIn);
  find(L.exp_up, LinearInput::kExpertIn);
  find(L.exp_down, LinearInput::kExpertMid);
  return true;
}

// A new f32 buffer [rows, cols] owned by the weights.
float* NewF32(ModelWeights* w, int64_t rows, int64_t cols) {
  w->owned.emplace_back(static_cast<size_t>(rows * cols) * sizeof(float));
  return reinterpret_cast<float*>(w->owned.back().data());
}

WeightMatrix F32View(const float* data, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.type = DType::kF32;
  m.n_in = cols;
  m.n_out = rows;
  m.data = reinterpret_cast<const uint8_t*>(data);
  m.row_bytes = static_cast<size_t>(cols) * sizeof(float);
  return m;
}

const float* F32(const WeightMatrix& m) {
  CHECK(m.type == DType::kF32 && m.data != nullptr);
  return reinterpret_cast<const float*>(m.data);
}

// m's rows `rows` (each of `block` consecutive rows starting at rows[i] * block).
void KeepRows(ModelWeights* w, WeightMatrix* m, const std::vector<int>& idx, int block) {
  const int64_t n_rows = static_cast<int64_t>(idx.size()) * block;
  float* out = NewF32(w, n_rows, m->n_in);
  for (size_t i = 0; i < idx.size(); ++i) {
    std::memcpy(out + i * block * m->n_in, F32(*m) + static_cast<int64_t>(idx[i]) * block * m->n_in,
                sizeof(float) * block * m->n_in);
  }
  *m = F32View(out, n_rows, m->n_in);
}

void KeepCols(ModelWeights* w, WeightMatrix* m, const std::vector<int>& idx, int block) {
  const int64_t n_cols = static_cast<int64_t>(idx.size()) * block;
  float* out = NewF32(w, m->n_out, n_cols);
  for (int64_t r = 0; r < m->n_out; ++r) {
    for (size_t i = 0; i < idx.size(); ++i) {
      std::memcpy(out + r * n_cols + i * block, F32(*m) + r * m->n_in + static_cast<int64_t>(idx[i]) * block,
                  sizeof(float) * block);
    }
  }
  *m = F32View(out, m->n_out, n_cols);
}

void KeepVector(std::vector<float>* v, const std::vector<int>& idx, int block) {
  if (v->empty()) return;
  std::vector<float> out;
  for (int i : idx) out.insert(out.end(), v->begin() + i * block, v->begin() + (i + 1) * block);
  *v = std::move(out);
}

// Squared norms of the columns of m.
std::vector<double> ColumnSqNorms(const WeightMatrix& m) {
  std::vector<double> s(m.n_in, 0.0);
  const float* w = F32(m);
  for (int64_t r = 0; r < m.n_out; ++r) {
    for (int64_t c = 0; c < m.n_in; ++c) s[c] += double(w[r * m.n_in + c]) * w[r * m.n_in + c];
  }
  return s;
}

// The indices of the `keep` highest scores, sorted (ties: lower index kept).
std::vector<int> KeepHighest(const std::vector<double>& score, int keep) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

std::vector<LayerMatrix> LayerMatrices(Model* model) {
  std::vector<LayerMatrix> out;
  ModelWeights& w = *model->weights;
  ForEachTensor(model->config, [&](const TensorRole& r, int layer) {
    if (layer < 0 || !r.matrix) return;
    LayerWeights& L = w.layers[layer];
    for (WeightMatrix* m : RoleLayerMatrices(r, &L)) {
      LayerMatrix lm;
      if (!InputOf(L, m, &lm.input, &lm.expert)) continue;
      lm.layer = layer;
      lm.m = m;
      lm.name = GgufTensorName(r, layer);
      if (lm.expert >= 0) lm.name += fmt::format("[{}]", lm.expert);
      out.push_back(lm);
    }
  });
  return out;
}

Status MakeLayerMatricesF32(Model* model) {
  if (model->shard.split()) return InvalidArgument("pruning needs the whole model, not a --tp / --pp shard");
  ModelWeights& w = *model->weights;
  Status st;
  ForEachTensor(model->config, [&](const TensorRole& r, int layer) {
    if (!st.ok() || layer < 0 || !r.matrix) return;
    std::vector<WeightMatrix*> parts = RoleLayerMatrices(r, &w.layers[layer]);
    int64_t rows = 0;
    for (WeightMatrix* p : parts) {
      if (p->data == nullptr) {
        st = Internal(GgufTensorName(r, layer) + ": weights not readable");
        return;
      }
      rows += p->n_out;
    }
    if (parts.empty()) return;
    const int64_t cols = parts[0]->n_in;
    float* buf = NewF32(&w, rows, cols);
    int64_t at = 0;
    for (WeightMatrix* p : parts) {
      std::vector<float> side(p->outliers ? p->outliers->cols.size() : 0);
      for (int64_t i = 0; i < p->n_out; ++i) {
        float* row = buf + (at + i) * cols;
        DequantizeRow(p->type, p->data + i * p->row_bytes, row, cols);
        if (p->outliers != nullptr) {  // W8A8's float columns back in place
          const OutlierColumns& o = *p->outliers;
          DequantizeRow(o.dense.type, o.dense.data + i * o.dense.row_bytes, side.data(), o.dense.n_in);
          for (size_t j = 0; j < side.size(); ++j) row[o.cols[j]] = side[j];
        }
      }
      *p = F32View(buf + at * cols, p->n_out, cols);
      at += p->n_out;
    }
  });
  return st;
}

Status CheckStructuredSupported(const ModelConfig& c, bool heads, bool ffn) {
  if (heads) {
    if (c.fused_qkv) return InvalidArgument("structured head pruning does not support a fused attn_qkv tensor (phi3)");
    if (c.qk_norm == QkNorm::kFull) {
      return InvalidArgument("structured head pruning would change the whole-projection Q/K norm of this architecture");
    }
    for (int l = 0; l < c.n_layer; ++l) {
      if (c.n_head_at(l) < 2) {
        return InvalidArgument(fmt::format("layer {} has {} attention head: no heads to remove", l, c.n_head_at(l)));
      }
    }
  }
  if (ffn) {
    if (c.moe()) return InvalidArgument("structured FFN pruning needs a dense FFN; this model's FFN is mixture-of-experts");
    if (c.fused_gate_up) return InvalidArgument("structured FFN pruning does not support a fused gate/up tensor (phi3)");
  }
  return Status::Ok();
}

StatusOr<StructuredPlan> PlanStructured(const Model& model, const std::vector<std::vector<double>>& ss_attn_out,
                                        const std::vector<std::vector<double>>& ss_ffn_mid, double head_ratio,
                                        double ff_ratio) {
  const ModelConfig& c = model.config;
  StructuredPlan plan;
  plan.kv_heads.resize(c.n_layer);
  plan.q_heads.resize(c.n_layer);
  plan.ff.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = model.weights->layers[l];
    if (!ss_attn_out.empty() && head_ratio > 0) {
      const int kv = c.n_head_kv_at(l), group = c.n_head_at(l) / kv, hd = c.head_dim;
      const std::vector<double>& ss = ss_attn_out[l];
      if (static_cast<int64_t>(ss.size()) != L.wo.n_in) return Internal("attention statistics of the wrong width");
      const std::vector<double> col = ColumnSqNorms(L.wo);
      // Squared importance of each query head; a KV group's is their sum.
      std::vector<double> head(kv * group, 0.0), grp(kv, 0.0);
      for (int h = 0; h < kv * group; ++h) {
        for (int d = h * hd; d < (h + 1) * hd; ++d) head[h] += ss[d] * col[d];
        grp[h / group] += head[h];
      }
      // The shape (KV groups kept x query heads kept per group) with the
      // most heads not above the target; ties keep more KV groups.
      const int target = std::max(1, kv * group - static_cast<int>(std::lround(head_ratio * kv * group)));
      int best_kv = 1, best_q = 1;
      for (int k = 1; k <= kv; ++k) {
        for (int q = 1; q <= group; ++q) {
          const int n = k * q, best = best_kv * best_q;
          if (n <= target && (n > best || (n == best && k > best_kv))) {
            best_kv = k;
            best_q = q;
          }
        }
      }
      plan.kv_heads[l] = KeepHighest(grp, best_kv);
      for (int g : plan.kv_heads[l]) {
        std::vector<double> in_group(head.begin() + g * group, head.begin() + (g + 1) * group);
        for (int i : KeepHighest(in_group, best_q)) plan.q_heads[l].push_back(g * group + i);
      }
    }
    if (!ss_ffn_mid.empty() && ff_ratio > 0) {
      const int ff = c.n_ff_at(l);
      const std::vector<double>& ss = ss_ffn_mid[l];
      if (static_cast<int>(ss.size()) != ff) return Internal("FFN statistics of the wrong width");
      const std::vector<double> col = ColumnSqNorms(L.w_down);
      std::vector<double> score(ff);
      for (int j = 0; j < ff; ++j) score[j] = std::sqrt(ss[j]) * std::sqrt(col[j]);
      int keep = ff - static_cast<int>(std::lround(ff_ratio * ff));
      if (ff % 32 == 0) keep = static_cast<int>(std::lround(keep / 32.0)) * 32;
      keep = std::clamp(keep, 1, ff);
      if (ff % 32 == 0) keep = std::max(keep, std::min(ff, 32));
      plan.ff[l] = KeepHighest(score, keep);
    }
  }
  return plan;
}

Status ApplyStructured(Model* model, const StructuredPlan& plan) {
  ModelConfig& c = model->config;
  ModelWeights& w = *model->weights;
  std::vector<int> n_head(c.n_layer), n_kv(c.n_layer), n_ff(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[l];
    n_head[l] = c.n_head_at(l);
    n_kv[l] = c.n_head_kv_at(l);
    n_ff[l] = c.n_ff_at(l);
    const int hd = c.head_dim;
    if (!plan.kv_heads[l].empty()) {
      const std::vector<int>& kv = plan.kv_heads[l];
      const std::vector<int>& q = plan.q_heads[l];
      KeepRows(&w, &L.wq, q, hd);
      KeepRows(&w, &L.wk, kv, hd);
      KeepRows(&w, &L.wv, kv, hd);
      KeepCols(&w, &L.wo, q, hd);
      KeepVector(&L.bq, q, hd);
      KeepVector(&L.bk, kv, hd);
      KeepVector(&L.bv, kv, hd);
      n_head[l] = static_cast<int>(q.size());
      n_kv[l] = static_cast<int>(kv.size());
    }
    if (!plan.ff[l].empty()) {
      KeepRows(&w, &L.w_gate, plan.ff[l], 1);
      KeepRows(&w, &L.w_up, plan.ff[l], 1);
      KeepCols(&w, &L.w_down, plan.ff[l], 1);
      n_ff[l] = static_cast<int>(plan.ff[l].size());
    }
  }
  c.layer_n_head = n_head;
  c.layer_n_head_kv = n_kv;
  c.layer_n_ff = n_ff;
  c.n_head = *std::max_element(n_head.begin(), n_head.end());
  c.n_head_kv = *std::max_element(n_kv.begin(), n_kv.end());
  c.n_ff = *std::max_element(n_ff.begin(), n_ff.end());
  auto uniform = [](std::vector<int>* v) {
    if (std::adjacent_find(v->begin(), v->end(), std::not_equal_to<>()) == v->end()) v->clear();
  };
  uniform(&c.layer_n_head);
  uniform(&c.layer_n_head_kv);
  uniform(&c.layer_n_ff);
  return c.Validate("pruned model");
}

void ZeroStructured(Model* model, const StructuredPlan& plan) {
  const ModelConfig& c = model->config;
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = model->weights->layers[l];
    auto zero_cols = [](WeightMatrix* m, const std::vector<int>& keep, int block) {
      std::vector<bool> kept(m->n_in / block, false);
      for (int k : keep) kept[k] = true;
      float* d = const_cast<float*>(F32(*m));
      for (int64_t r = 0; r < m->n_out; ++r) {
        for (int64_t b = 0; b < m->n_in / block; ++b) {
          if (!kept[b]) std::fill(d + r * m->n_in + b * block, d + r * m->n_in + (b + 1) * block, 0.0f);
        }
      }
    };
    if (!plan.kv_heads[l].empty()) {
      zero_cols(&L.wo, plan.q_heads[l], c.head_dim);
    }
    if (!plan.ff[l].empty()) zero_cols(&L.w_down, plan.ff[l], 1);
  }
}

}  // namespace infera::prune
