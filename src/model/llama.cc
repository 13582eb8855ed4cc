#include "model/llama.h"

#include "kernels/flash_generic.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "attention/naive_attention.h"
#include "tensor/quant_blocks.h"

namespace infera {

const char* ModelFormatName(ModelFormat f) {
  switch (f) {
    case ModelFormat::kGguf: return "gguf";
    case ModelFormat::kSafetensors: return "safetensors";
    case ModelFormat::kLlama2c: return "llama2.c";
  }
  return "?";
}

LlamaRunner::LlamaRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool)
    : model_(model), c_(model.config), k_(kernels), pool_(pool) {
  const int half = c_.rope_dim / 2;
  inv_freq_.resize(half);
  const auto& ff = model.weights->rope_freq_factors;
  for (int i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(c_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c_.rope_dim));
    if (!ff.empty()) f /= ff[i];
    if (c_.rope_scaling.type == RopeScaling::Type::kLinear) f /= c_.rope_scaling.factor;
    inv_freq_[i] = f;
  }
  scores_.resize(pool.size());
}

Status LlamaRunner::Validate(const ForwardBatch& b, const KvStorage& kv) const {
  const int32_t T = b.size();
  if (T == 0) return InvalidArgument("empty batch");
  if (b.positions.size() != b.tokens.size() || b.seq.size() != b.tokens.size()) {
    return Internal("batch arrays differ in length");
  }
  for (int32_t t = 0; t < T; ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= c_.n_vocab) {
      return InvalidArgument(fmt::format("token id {} out of range [0, {})", b.tokens[t], c_.n_vocab));
    }
    if (b.seq[t] < 0 || b.seq[t] >= static_cast<int32_t>(b.seq_slots.size())) return Internal("bad sequence index");
    const auto& slots = *b.seq_slots[b.seq[t]];
    if (b.positions[t] < 0 || b.positions[t] >= static_cast<int32_t>(slots.size())) {
      return Internal(fmt::format("position {} has no KV slot", b.positions[t]));
    }
    // Earlier slots were checked when their tokens were written.
    const int32_t slot = slots[b.positions[t]];
    if (slot < 0 || slot >= kv.n_slots()) return Internal("KV slot out of range");
    if (kv.type() == KvType::kQ8 && (kv.n_heads() != c_.n_head_kv || c_.head_dim > 512)) {
      return Internal("int8 KV storage does not match the model's KV heads");
    }
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= T) return Internal("logit row out of range");
  }
  return Status::Ok();
}

void LlamaRunner::Rope(float* x, int n_heads, int pos) const {
  const int hd = c_.head_dim, half = c_.rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float val = static_cast<float>(pos) * inv_freq_[i];
    const float cs = std::cos(val), sn = std::sin(val);
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + h * hd;
      const int a = c_.rope_style == RopeStyle::kNorm ? 2 * i : i;
      const int b = c_.rope_style == RopeStyle::kNorm ? 2 * i + 1 : i + half;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * cs - x1 * sn;
      xh[b] = x0 * sn + x1 * cs;
    }
  }
}

void LlamaRunner::EmbedTokens(const ForwardBatch& b) {
  const auto& e = model_.weights->tok_embd;
  const int d = c_.n_embd;
  for (int32_t t = 0; t < b.size(); ++t) {
    const uint8_t* row = e.data + static_cast<size_t>(b.tokens[t]) * e.row_bytes;
    float* out = x_.data() + static_cast<size_t>(t) * d;
    DequantizeRow(e.type, row, out, d);
    if (c_.embedding_scale != 1.0f) {
      for (int i = 0; i < d; ++i) out[i] *= c_.embedding_scale;
    }
  }
}

Status LlamaRunner::Forward(const ForwardBatch& b, KvStorage& kv, std::vector<float>* logits) {
  RETURN_IF_ERROR(Validate(b, kv));
  const int32_t T = b.size();
  const int d = c_.n_embd, qd = c_.q_dim(), kvd = c_.kv_dim(), ff = c_.n_ff, hd = c_.head_dim;
  auto grow = [](std::vector<float>& v, size_t n) { if (v.size() < n) v.resize(n); };
  grow(x_, size_t(T) * d); grow(xn_, size_t(T) * d); grow(q_, size_t(T) * qd); grow(kk_, size_t(T) * kvd);
  grow(vv_, size_t(T) * kvd); grow(att_, size_t(T) * qd); grow(tmp_, size_t(T) * d);
  grow(gate_, size_t(T) * ff); grow(up_, size_t(T) * ff);
  int32_t max_pos = 0;
  for (int32_t p : b.positions) max_pos = std::max(max_pos, p);
  const size_t flash_scratch = size_t(c_.n_head / c_.n_head_kv) * (kFlashTile + 2);
  for (auto& s : scores_) grow(s, std::max(size_t(max_pos) + 1, flash_scratch));

  EmbedTokens(b);
  const float scale = c_.attention_scale > 0 ? c_.attention_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const auto& W = *model_.weights;
  // Per-token work split over the pool (inline for a single token).
  auto for_tokens = [&](FunctionRef<void(int64_t, int64_t)> fn) {
    if (T > 1) pool_.ParallelFor(T, 1, fn);
    else fn(0, T);
  };
  const float rs = c_.residual_scale;
  auto add_residual = [&](int64_t t0, int64_t t1) {
    if (rs == 1.0f) {
      for (size_t i = size_t(t0) * d; i < size_t(t1) * d; ++i) x_[i] += tmp_[i];
    } else {
      for (size_t i = size_t(t0) * d; i < size_t(t1) * d; ++i) x_[i] += rs * tmp_[i];
    }
  };
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerWeights& L = W.layers[l];
    for_tokens([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) RmsNorm(&x_[size_t(t) * d], L.attn_norm.data(), &xn_[size_t(t) * d], d, c_.rms_eps);
    });
    Matmul(k_, pool_, L.wq, xn_.data(), T, q_.data());
    Matmul(k_, pool_, L.wk, xn_.data(), T, kk_.data());
    Matmul(k_, pool_, L.wv, xn_.data(), T, vv_.data());
    const bool q8 = kv.type() == KvType::kQ8;
    float* kc = q8 ? nullptr : kv.k(l);
    float* vc = q8 ? nullptr : kv.v(l);
    int8_t* kc8 = q8 ? kv.k8(l) : nullptr;
    int8_t* vc8 = q8 ? kv.v8(l) : nullptr;
    float* ks = q8 ? kv.k_scale(l) : nullptr;
    float* vs = q8 ? kv.v_scale(l) : nullptr;
    const int n_kv = c_.n_head_kv;
    for_tokens([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* q = &q_[size_t(t) * qd];
        float* k = &kk_[size_t(t) * kvd];
        float* v = &vv_[size_t(t) * kvd];
        if (c_.qkv_bias) {
          for (int i = 0; i < qd; ++i) q[i] += L.bq[i];
          for (int i = 0; i < kvd; ++i) { k[i] += L.bk[i]; v[i] += L.bv[i]; }
        }
        if (c_.qk_norm) {  // qwen3: each head of Q and K normalized before RoPE
          for (int h = 0; h < c_.n_head; ++h) RmsNorm(q + h * hd, L.q_norm.data(), q + h * hd, hd, c_.rms_eps);
          for (int h = 0; h < n_kv; ++h) RmsNorm(k + h * hd, L.k_norm.data(), k + h * hd, hd, c_.rms_eps);
        }
        Rope(q, c_.n_head, b.positions[t]);
        Rope(k, c_.n_head_kv, b.positions[t]);
        const int32_t slot = (*b.seq_slots[b.seq[t]])[b.positions[t]];
        if (q8) {
          for (int h = 0; h < n_kv; ++h) {
            ks[size_t(slot) * n_kv + h] = QuantizeKvRow(k + h * hd, hd, kc8 + size_t(slot) * kvd + h * hd);
            vs[size_t(slot) * n_kv + h] = QuantizeKvRow(v + h * hd, hd, vc8 + size_t(slot) * kvd + h * hd);
          }
        } else {
          std::memcpy(kc + size_t(slot) * kvd, k, sizeof(float) * kvd);
          std::memcpy(vc + size_t(slot) * kvd, v, sizeof(float) * kvd);
        }
      }
    });
    // Attention: one work item per (token, KV head group), dealt round-robin
    // so the long causal rows of late tokens spread over all threads. The
    // tiled kernel reads each K/V row once per group and keeps O(tile) state.
    const int group = c_.n_head / c_.n_head_kv;
    const int64_t items = int64_t(T) * c_.n_head_kv;
    pool_.Run([&](int thread, int n_threads) {
      for (int64_t it = thread; it < items; it += n_threads) {
        const int32_t t = static_cast<int32_t>(it / c_.n_head_kv);
        const int kvh = static_cast<int>(it % c_.n_head_kv);
        const int32_t p = b.positions[t];
        const int32_t first = c_.sliding_window > 0 ? std::max(0, p - c_.sliding_window + 1) : 0;
        const size_t q_off = size_t(t) * qd + size_t(kvh) * group * hd;
        const int32_t* slots = b.seq_slots[b.seq[t]]->data();
        if (q8) {
          k_.flash_attend_group_q8(&q_[q_off], group, kc8 + kvh * hd, ks + kvh, vc8 + kvh * hd, vs + kvh, kvd, n_kv, hd,
                                   scale, slots, first, p, &att_[q_off], scores_[thread].data());
        } else if (naive_attention_) {
          for (int i = 0; i < group; ++i) {
            AttendHead(k_, &q_[q_off + size_t(i) * hd], kc + kvh * hd, vc + kvh * hd, kvd, hd, scale, slots, first, p,
                       scores_[thread].data(), &att_[q_off + size_t(i) * hd]);
          }
        } else {
          k_.flash_attend_group(&q_[q_off], group, kc + kvh * hd, vc + kvh * hd, kvd, hd, scale, slots, first, p,
                                &att_[q_off], scores_[thread].data());
        }
      }
    });
    Matmul(k_, pool_, L.wo, att_.data(), T, tmp_.data());
    for_tokens([&](int64_t t0, int64_t t1) {
      add_residual(t0, t1);
      for (int64_t t = t0; t < t1; ++t) RmsNorm(&x_[size_t(t) * d], L.ffn_norm.data(), &xn_[size_t(t) * d], d, c_.rms_eps);
    });
    Matmul(k_, pool_, L.w_gate, xn_.data(), T, gate_.data());
    Matmul(k_, pool_, L.w_up, xn_.data(), T, up_.data());
    for_tokens([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) SiluMul(&gate_[size_t(t) * ff], &up_[size_t(t) * ff], ff);
    });
    Matmul(k_, pool_, L.w_down, gate_.data(), T, tmp_.data());
    for_tokens(add_residual);
  }

  const int32_t R = static_cast<int32_t>(b.logit_rows.size());
  if (R == 0) {
    logits->clear();
    return Status::Ok();
  }
  for (int32_t r = 0; r < R; ++r) {
    RmsNorm(&x_[size_t(b.logit_rows[r]) * d], W.output_norm.data(), &xn_[size_t(r) * d], d, c_.rms_eps);
  }
  logits->resize(size_t(R) * c_.n_vocab);
  Matmul(k_, pool_, W.output, xn_.data(), R, logits->data());
  if (c_.logit_scale != 1.0f) {
    const float inv = 1.0f / c_.logit_scale;
    for (float& v : *logits) v *= inv;
  }
  return Status::Ok();
}

}  // namespace infera
