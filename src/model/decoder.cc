#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "model/moe.h"
#include "tensor/quant_blocks.h"

namespace infera {

std::unique_ptr<ModelRunner> MakeModelRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool,
                                             int n_ctx, ParallelComms comms) {
  return std::make_unique<DecoderRunner>(model, kernels, pool, n_ctx, comms);
}

DecoderRunner::DecoderRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool, int n_ctx,
                             ParallelComms comms)
    : model_(model), c_(model.config), kernels_(kernels), pool_(pool), shard_(model.shard), comms_(comms) {
  CHECK(!shard_.split() || (comms_.world != nullptr && comms_.tp != nullptr &&
                            comms_.world->size() == shard_.tp_size * shard_.pp_size &&
                            comms_.world->rank() == shard_.world_rank() && comms_.tp->size() == shard_.tp_size &&
                            comms_.tp->rank() == shard_.tp_rank));
  const ModelWeights& w = *model.weights;
  // Splitting an op over the pool costs a hand-off to another core and a
  // wait for its last piece: 2-4 us per op on a 2-vCPU KVM guest
  // (kernels_bench SmallDecodeSplit_*), about what one thread takes to
  // stream half a MiB of weights from cache. A model that runs from cache
  // (a draft model, a few-M-parameter model) has many ops below that, and
  // runs them faster inline (decode 1.3-2x, docs/performance.md). A larger
  // model streams its weights from memory, where one thread alone reaches
  // only part of the bandwidth: every op splits, as before.
  if (w.resident_bytes() <= kCacheResidentWeightBytes && kernels_.min_split_bytes == 0) {
    kernels_.min_split_bytes = kCacheResidentMinSplitBytes;
  }
  // A LoRA update's GEMMs read a few hundred KiB at most per token: handing
  // them to the pool costs more than it saves (as for a model in cache).
  lora_kernels_ = kernels_;
  lora_kernels_.min_split_bytes = std::max(kernels_.min_split_bytes, kLoraMinSplitBytes);
  const RopeScaling& rs = c_.rope_scaling;
  if (n_ctx <= 0) n_ctx = c_.n_ctx_train;
  // Frequency divisors: llama3's, or LongRoPE's set for this context.
  const std::vector<float>& freq_factors = rs.type != RopeScaling::Type::kLongRope ? w.rope_freq_factors
                                           : n_ctx > rs.original_max_position   ? w.rope_factors_long
                                                                                : w.rope_factors_short;
  const float scale =
      c_.attention_scale > 0 ? c_.attention_scale : 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerConfig lc = c_.Layer(l);
    // llama3 / file frequency divisors belong to the global RoPE, not to
    // gemma3's local one.
    const bool local_rope = c_.LayerIsSliding(l) && c_.rope_theta_swa > 0;
    RopeParams rp;
    rp.rope_dim = c_.rope_dim;
    rp.theta = lc.rope_theta;
    rp.style = c_.rope_style;
    rp.linear_factor = lc.rope_linear_factor;
    if (!local_rope) {
      rp.freq_factors = freq_factors;
      if (rs.type == RopeScaling::Type::kYarn) {
        rp.yarn_factor = rs.factor;
        rp.yarn_original_ctx = rs.original_max_position;
        rp.yarn_beta_fast = rs.yarn_beta_fast;
        rp.yarn_beta_slow = rs.yarn_beta_slow;
      }
      if (rs.type == RopeScaling::Type::kYarn || rs.type == RopeScaling::Type::kLongRope) rp.mscale = rs.mscale;
    }
    rope_.emplace_back(rp);
    AttentionShape s;
    s.n_head = lc.n_head;
    s.n_head_kv = lc.n_head_kv;
    s.head_dim = c_.head_dim;
    s.scale = scale;
    s.softcap = c_.attn_softcap;
    s.sliding_window = lc.sliding_window;
    attn_shape_.push_back(s);
  }
}

Status DecoderRunner::Validate(const ForwardBatch& b, const KvStorage& kv) const {
  const int32_t T = b.size();
  if (T == 0) return InvalidArgument("empty batch");
  if (b.positions.size() != b.tokens.size() || b.seq.size() != b.tokens.size()) {
    return Internal("batch arrays differ in length");
  }
  if (kv.n_layer() != c_.n_layer || (kv.type() == KvType::kQ8 && c_.head_dim > 512)) {
    return Internal("KV storage does not match the model");
  }
  for (int l = 0; l < c_.n_layer; ++l) {
    if (kv.n_heads(l) != attn_shape_[l].n_head_kv || kv.kv_dim(l) != attn_shape_[l].kv_dim()) {
      return Internal(fmt::format("KV storage of layer {} does not match the model's KV heads", l));
    }
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
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= T) return Internal("logit row out of range");
  }
  for (int32_t r : b.hidden_rows) {
    if (r < 0 || r >= T) return Internal("hidden row out of range");
  }
  // Hidden rows live on the last pipeline stage, which sends only logits on.
  if (!b.hidden_rows.empty() && shard_.pp_size > 1) {
    return Unimplemented("hidden states (embeddings) of a pipeline-split model");
  }
  return Status::Ok();
}

void DecoderRunner::HiddenRows(const ForwardBatch& b) {
  const int d = c_.n_embd;
  hidden_.resize(b.hidden_rows.size() * size_t(d));
  for (size_t r = 0; r < b.hidden_rows.size(); ++r) {
    RmsNorm(&x_[size_t(b.hidden_rows[r]) * d], model_.weights->output_norm.data(), &hidden_[r * d], d, c_.rms_eps);
  }
}

void DecoderRunner::GrowScratch(const ForwardBatch& b) {
  const size_t T = b.size();
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x_, T * c_.n_embd);
  grow(normed_, T * c_.n_embd);
  grow(q_, T * c_.q_dim());
  grow(k_, T * c_.kv_dim());
  grow(v_, T * c_.kv_dim());
  grow(attn_out_, T * c_.q_dim());
  grow(block_out_, T * c_.n_embd);
  const size_t ff = std::max({c_.n_ff, c_.n_ff_exp, c_.n_ff_shexp});
  grow(gate_, T * ff);
  grow(up_, T * ff);
  if (c_.moe()) {
    const size_t k = c_.n_expert_used;
    grow(router_logits_, T * c_.n_expert);
    if (route_experts_.size() < T * k) route_experts_.resize(T * k);
    grow(route_weights_, T * k);
    grow(expert_in_, T * c_.n_embd);
    grow(expert_out_, T * c_.n_embd);
    grow(slot_out_, T * k * c_.n_embd);
    expert_rows_.resize(c_.n_expert);
  }
}

void DecoderRunner::ForTokens(int32_t T, int64_t width, FunctionRef<void(int64_t, int64_t)> fn) {
  if (T > 1 && kernels_.ShouldSplit(pool_.size(), T * width * int64_t{sizeof(float)})) pool_.ParallelFor(T, 1, fn);
  else fn(0, T);
}

void DecoderRunner::Embed(const ForwardBatch& b) {
  const auto& e = model_.weights->tok_embd;
  const int d = c_.n_embd;
  const float scale = c_.embedding_scale * (c_.embed_scale_sqrt_dim ? std::sqrt(static_cast<float>(d)) : 1.0f);
  for (int32_t t = 0; t < b.size(); ++t) {
    const uint8_t* row = e.data + static_cast<size_t>(b.tokens[t]) * e.row_bytes;
    float* out = x_.data() + static_cast<size_t>(t) * d;
    DequantizeRow(e.type, row, out, d);
    if (scale != 1.0f) {
      for (int i = 0; i < d; ++i) out[i] *= scale;
    }
  }
}

void DecoderRunner::AddToResidual(const std::vector<float>& post_norm, int64_t t0, int64_t t1) {
  const int d = c_.n_embd;
  if (!post_norm.empty()) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = &block_out_[size_t(t) * d];
      RmsNorm(row, post_norm.data(), row, d, c_.rms_eps);
    }
  }
  const float rs = c_.residual_scale;
  if (rs == 1.0f) {
    for (size_t i = size_t(t0) * d; i < size_t(t1) * d; ++i) x_[i] += block_out_[i];
  } else {
    for (size_t i = size_t(t0) * d; i < size_t(t1) * d; ++i) x_[i] += rs * block_out_[i];
  }
}

Status DecoderRunner::AttentionBlock(int l, const ForwardBatch& b, KvStorage& kv) {
  const LayerWeights& L = model_.weights->layers[l];
  const AttentionShape& s = attn_shape_[l];
  const int32_t T = b.size();
  const int d = c_.n_embd, qd = s.q_dim(), kvd = s.kv_dim(), hd = s.head_dim;
  const float* in = x_.data();
  if (c_.pre_norm) {
    ForTokens(T, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        RmsNorm(&x_[size_t(t) * d], L.attn_norm.data(), &normed_[size_t(t) * d], d, c_.rms_eps);
      }
    });
    in = normed_.data();
  }
  Observe(l, LinearInput::kAttnIn, -1, in, T, d);
  const MatmulTarget qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
  MatmulMany(kernels_, pool_, qkv, 3, in, T);
  AddLora(l, LoraTarget::kQ, in, T, q_.data());
  AddLora(l, LoraTarget::kK, in, T, k_.data());
  AddLora(l, LoraTarget::kV, in, T, v_.data());
  // olmo2's norm over the whole Q (and K) projection spans every rank's
  // heads: the ranks add up their sums of squares first.
  const bool split_full_norm = c_.qk_norm == QkNorm::kFull && shard_.tp_size > 1;
  if (split_full_norm) RETURN_IF_ERROR(SumQkSquaresOverTpRanks(l, T));
  ForTokens(T, qd + 2 * kvd, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* q = &q_[size_t(t) * qd];
      float* k = &k_[size_t(t) * kvd];
      float* v = &v_[size_t(t) * kvd];
      if (!split_full_norm) AddQkvBias(L, q, k, v, qd, kvd);
      if (c_.qk_norm == QkNorm::kPerHead) {
        for (int h = 0; h < s.n_head; ++h) RmsNorm(q + h * hd, L.q_norm.data(), q + h * hd, hd, c_.rms_eps);
        for (int h = 0; h < s.n_head_kv; ++h) RmsNorm(k + h * hd, L.k_norm.data(), k + h * hd, hd, c_.rms_eps);
      } else if (split_full_norm) {  // RmsNorm with the whole width's mean square
        const float n = static_cast<float>(shard_.tp_size);
        const float sq = 1.0f / std::sqrt(qk_ss_[2 * t] / (n * qd) + c_.rms_eps);
        const float sk = 1.0f / std::sqrt(qk_ss_[2 * t + 1] / (n * kvd) + c_.rms_eps);
        for (int i = 0; i < qd; ++i) q[i] = L.q_norm[i] * (q[i] * sq);
        for (int i = 0; i < kvd; ++i) k[i] = L.k_norm[i] * (k[i] * sk);
      } else if (c_.qk_norm == QkNorm::kFull) {
        RmsNorm(q, L.q_norm.data(), q, qd, c_.rms_eps);
        RmsNorm(k, L.k_norm.data(), k, kvd, c_.rms_eps);
      }
      rope_[l].Apply(q, s.n_head, hd, b.positions[t]);
      rope_[l].Apply(k, s.n_head_kv, hd, b.positions[t]);
      const int32_t slot = (*b.seq_slots[b.seq[t]])[b.positions[t]];
      WriteKv(kv, l, slot, k, v, s.n_head_kv, hd);
    }
  });
  const TokenSlots slots{b.positions.data(), b.seq.data(), &b.seq_slots};
  AttendBatch(kernels_, pool_, kv, l, s, slots, T, q_.data(), attn_out_.data(), attn_ws_);
  if (shard_.tp_size > 1 && shard_.wo_whole[l]) {
    // The output matrix is whole here: gather every rank's heads into whole
    // rows [T, q_dim] and multiply them all (no partial sums to add).
    const int R = shard_.tp_size;
    const size_t part = size_t(T) * qd;
    if (attn_parts_.size() < R * part) attn_parts_.resize(R * part);
    if (attn_whole_.size() < R * part) attn_whole_.resize(R * part);
    RETURN_IF_ERROR(comms_.tp->AllGather(attn_out_.data(), part, attn_parts_.data()));
    for (int r = 0; r < R; ++r) {
      for (int32_t t = 0; t < T; ++t) {
        std::memcpy(&attn_whole_[(size_t(t) * R + r) * qd], &attn_parts_[r * part + size_t(t) * qd],
                    sizeof(float) * qd);
      }
    }
    Matmul(kernels_, pool_, L.wo, attn_whole_.data(), T, block_out_.data());
  } else {
    Observe(l, LinearInput::kAttnOut, -1, attn_out_.data(), T, qd);
    Matmul(kernels_, pool_, L.wo, attn_out_.data(), T, block_out_.data());
    AddLora(l, LoraTarget::kO, attn_out_.data(), T, block_out_.data());
    RETURN_IF_ERROR(SumOverTpRanks(T));
  }
  ForTokens(T, d, [&](int64_t t0, int64_t t1) { AddToResidual(L.post_attn_norm, t0, t1); });
  return Status::Ok();
}

void DecoderRunner::AddQkvBias(const LayerWeights& L, float* q, float* k, float* v, int qd, int kvd) const {
  if (!c_.qkv_bias) return;
  for (int i = 0; i < qd; ++i) q[i] += L.bq[i];
  for (int i = 0; i < kvd; ++i) {
    k[i] += L.bk[i];
    v[i] += L.bv[i];
  }
}

Status DecoderRunner::SumQkSquaresOverTpRanks(int l, int32_t T) {
  const LayerWeights& L = model_.weights->layers[l];
  const int qd = attn_shape_[l].q_dim(), kvd = attn_shape_[l].kv_dim();
  if (qk_ss_.size() < size_t(2) * T) qk_ss_.resize(size_t(2) * T);
  ForTokens(T, qd + kvd, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* q = &q_[size_t(t) * qd];
      float* k = &k_[size_t(t) * kvd];
      float* v = &v_[size_t(t) * kvd];
      AddQkvBias(L, q, k, v, qd, kvd);
      double sq = 0, sk = 0;
      for (int i = 0; i < qd; ++i) sq += double(q[i]) * q[i];
      for (int i = 0; i < kvd; ++i) sk += double(k[i]) * k[i];
      qk_ss_[2 * t] = static_cast<float>(sq);
      qk_ss_[2 * t + 1] = static_cast<float>(sk);
    }
  });
  return comms_.tp->AllReduceSum(qk_ss_.data(), size_t(2) * T);
}

Status DecoderRunner::SumOverTpRanks(int32_t T) {
  if (shard_.tp_size == 1) return Status::Ok();
  return comms_.tp->AllReduceSum(block_out_.data(), size_t(T) * c_.n_embd);
}

Status DecoderRunner::FfnBlock(int l, int32_t T) {
  const LayerWeights& L = model_.weights->layers[l];
  const int d = c_.n_embd, ff = c_.n_ff_at(l);
  const float* in = x_.data();
  if (c_.pre_norm) {
    ForTokens(T, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        RmsNorm(&x_[size_t(t) * d], L.ffn_norm.data(), &normed_[size_t(t) * d], d, c_.rms_eps);
      }
    });
    in = normed_.data();
  }
  Observe(l, LinearInput::kFfnIn, -1, in, T, d);
  if (c_.moe()) {
    MoeFfn(l, in, T);
  } else {
    const MatmulTarget gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
    MatmulMany(kernels_, pool_, gate_up, 2, in, T);
    AddLora(l, LoraTarget::kGate, in, T, gate_.data());
    AddLora(l, LoraTarget::kUp, in, T, up_.data());
    GatedActivation(gate_.data(), up_.data(), T, ff);
    Observe(l, LinearInput::kFfnMid, -1, gate_.data(), T, ff);
    Matmul(kernels_, pool_, L.w_down, gate_.data(), T, block_out_.data());
    AddLora(l, LoraTarget::kDown, gate_.data(), T, block_out_.data());
  }
  RETURN_IF_ERROR(SumOverTpRanks(T));
  ForTokens(T, d, [&](int64_t t0, int64_t t1) { AddToResidual(L.post_ffn_norm, t0, t1); });
  return Status::Ok();
}

Status DecoderRunner::PrepareLora(const ForwardBatch& b) {
  lora_ = b.lora_adapters;
  const size_t n = lora_.size(), T = static_cast<size_t>(b.size());
  lora_active_.assign(n, 0);
  if (n == 0 || b.seq_lora.empty()) return Status::Ok();
  if (shard_.split()) return Unimplemented("LoRA adapters on a model split over ranks");
  if (b.seq_lora.size() != b.seq_slots.size()) return Internal("seq_lora does not match the batch's sequences");
  lora_scale_.assign(n * T, 0.0f);
  for (size_t t = 0; t < T; ++t) {
    const float* scales = b.seq_lora[b.seq[t]];
    if (scales == nullptr) continue;
    for (size_t a = 0; a < n; ++a) {
      lora_scale_[a * T + t] = scales[a];
      if (scales[a] == 0.0f) continue;
      if (lora_[a] == nullptr) return Internal("a batch scales an empty LoRA slot");
      lora_active_[a] = 1;
    }
  }
  return Status::Ok();
}

void DecoderRunner::AddLora(int layer, LoraTarget target, const float* x, int32_t T, float* y) {
  for (size_t a = 0; a < lora_.size(); ++a) {
    if (!lora_active_[a]) continue;
    const LoraPair* p = lora_[a]->Find(layer, target);
    if (p == nullptr) continue;
    const int64_t r = p->rank(), n_out = p->b.n_out;
    if (lora_mid_.size() < size_t(T) * r) lora_mid_.resize(size_t(T) * r);
    if (lora_delta_.size() < size_t(T) * n_out) lora_delta_.resize(size_t(T) * n_out);
    Matmul(lora_kernels_, pool_, p->a, x, T, lora_mid_.data());
    const float* scale = &lora_scale_[a * size_t(T)];
    for (int32_t t = 0; t < T; ++t) {
      const float s = scale[t] * p->alpha_over_rank;
      for (int64_t i = 0; i < r; ++i) lora_mid_[size_t(t) * r + i] *= s;
    }
    Matmul(lora_kernels_, pool_, p->b, lora_mid_.data(), T, lora_delta_.data());
    ForTokens(T, n_out, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (scale[t] == 0.0f) continue;
        float* row = y + size_t(t) * n_out;
        const float* delta = &lora_delta_[size_t(t) * n_out];
        for (int64_t i = 0; i < n_out; ++i) row[i] += delta[i];
      }
    });
  }
}

void DecoderRunner::GatedActivation(float* gate, const float* up, int32_t rows, int width) {
  ForTokens(rows, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* g = gate + size_t(r) * width;
      const float* u = up + size_t(r) * width;
      if (c_.activation == Activation::kGeluTanh) kernels_.gelu_tanh_mul(g, u, width);
      else kernels_.silu_mul(g, u, width);
    }
  });
}

// Route every token, group the batch's tokens by expert, run each chosen
// expert once over its tokens (so only the experts in use are read), then
// sum each token's expert outputs in its own routing order: a token's result
// does not depend on which other tokens share its experts.
void DecoderRunner::MoeFfn(int l, const float* in, int32_t T) {
  const LayerWeights& L = model_.weights->layers[l];
  const int d = c_.n_embd, E = c_.n_expert, K = c_.n_expert_used, ff = c_.n_ff_exp;
  Matmul(kernels_, pool_, L.router, in, T, router_logits_.data());
  for (auto& rows : expert_rows_) rows.clear();
  for (int32_t t = 0; t < T; ++t) {
    RouteToken(&router_logits_[size_t(t) * E], E, K, c_.expert_weights_norm, &route_experts_[size_t(t) * K],
               &route_weights_[size_t(t) * K]);
    for (int i = 0; i < K; ++i) expert_rows_[route_experts_[size_t(t) * K + i]].push_back(t * K + i);
  }
  for (int e = 0; e < E; ++e) {
    const auto& rows = expert_rows_[e];
    const int32_t n = static_cast<int32_t>(rows.size());
    if (n == 0) continue;
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(&expert_in_[size_t(i) * d], in + size_t(rows[i] / K) * d, sizeof(float) * d);
    }
    Observe(l, LinearInput::kExpertIn, e, expert_in_.data(), n, d);
    Matmul(kernels_, pool_, L.exp_gate[e], expert_in_.data(), n, gate_.data());
    Matmul(kernels_, pool_, L.exp_up[e], expert_in_.data(), n, up_.data());
    GatedActivation(gate_.data(), up_.data(), n, ff);
    Observe(l, LinearInput::kExpertMid, e, gate_.data(), n, ff);
    Matmul(kernels_, pool_, L.exp_down[e], gate_.data(), n, expert_out_.data());
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(&slot_out_[size_t(rows[i]) * d], &expert_out_[size_t(i) * d], sizeof(float) * d);
    }
  }
  ForTokens(T, int64_t{K} * d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = &block_out_[size_t(t) * d];
      for (int i = 0; i < K; ++i) {
        const float w = route_weights_[size_t(t) * K + i];
        const float* y = &slot_out_[(size_t(t) * K + i) * d];
        if (i == 0) {
          for (int j = 0; j < d; ++j) out[j] = w * y[j];
        } else {
          for (int j = 0; j < d; ++j) out[j] += w * y[j];
        }
      }
    }
  });
  if (c_.n_ff_shexp > 0) {  // qwen2moe: + sigmoid(x · g) * shared_expert(x)
    const int sff = c_.n_ff_shexp;
    Matmul(kernels_, pool_, L.sh_gate, in, T, gate_.data());
    Matmul(kernels_, pool_, L.sh_up, in, T, up_.data());
    GatedActivation(gate_.data(), up_.data(), T, sff);
    Observe(l, LinearInput::kSharedMid, -1, gate_.data(), T, sff);
    Matmul(kernels_, pool_, L.sh_down, gate_.data(), T, expert_out_.data());
    ForTokens(T, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* x = in + size_t(t) * d;
        double dot = 0;
        for (int j = 0; j < d; ++j) dot += double(x[j]) * L.sh_gate_inp[j];
        const float s = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
        float* out = &block_out_[size_t(t) * d];
        const float* y = &expert_out_[size_t(t) * d];
        for (int j = 0; j < d; ++j) out[j] += s * y[j];
      }
    });
  }
}

Status DecoderRunner::Logits(const ForwardBatch& b, std::vector<float>* logits) {
  HiddenRows(b);  // (a tensor-parallel rank holds the whole residual stream)
  const auto& W = *model_.weights;
  const int d = c_.n_embd;
  const int32_t R = static_cast<int32_t>(b.logit_rows.size());
  if (R == 0) {
    logits->clear();
    return Status::Ok();
  }
  for (int32_t r = 0; r < R; ++r) {
    RmsNorm(&x_[size_t(b.logit_rows[r]) * d], W.output_norm.data(), &normed_[size_t(r) * d], d, c_.rms_eps);
  }
  // A split model's rank computes its vocabulary rows (W.output's) only.
  const bool split = shard_.tp_size > 1;
  std::vector<float>& out = split ? logits_part_ : *logits;
  out.resize(size_t(R) * W.output.n_out);
  Matmul(kernels_, pool_, W.output, normed_.data(), R, out.data());
  if (c_.logit_scale != 1.0f) {
    const float inv = 1.0f / c_.logit_scale;
    for (float& v : out) v *= inv;
  }
  if (c_.final_softcap > 0) kernels_.soft_cap(out.data(), static_cast<int64_t>(out.size()), c_.final_softcap);
  if (!split) return Status::Ok();
  // Gather the parts [R, V_r] on TP rank 0 and interleave them by row.
  const int P = shard_.tp_size;
  std::vector<size_t> counts(P);
  std::vector<int64_t> first(P + 1, 0);
  for (int r = 0; r < P; ++r) {
    const int64_t v0 = int64_t(c_.n_vocab) * r / P, v1 = int64_t(c_.n_vocab) * (r + 1) / P;
    counts[r] = size_t(R) * (v1 - v0);
    first[r + 1] = v1;
  }
  if (comms_.tp->rank() == 0) logits_parts_.resize(size_t(R) * c_.n_vocab);
  RETURN_IF_ERROR(comms_.tp->Gather(out.data(), counts, logits_parts_.data(), 0));
  if (comms_.tp->rank() != 0) {
    logits->clear();
    return Status::Ok();
  }
  logits->resize(size_t(R) * c_.n_vocab);
  size_t at = 0;
  for (int r = 0; r < P; ++r) {
    const int64_t w = first[r + 1] - first[r];
    for (int32_t row = 0; row < R; ++row) {
      std::memcpy(logits->data() + size_t(row) * c_.n_vocab + first[r], &logits_parts_[at], sizeof(float) * w);
      at += w;
    }
  }
  return Status::Ok();
}

Status DecoderRunner::ReceiveFromPreviousStage(int32_t T) {
  const int from = (shard_.pp_rank - 1) * shard_.tp_size + shard_.tp_rank;
  return comms_.world->Recv(x_.data(), sizeof(float) * size_t(T) * c_.n_embd, from);
}

// After this stage's layers: hand the residual stream to the next stage, or
// (last stage) compute the logits and bring them to world rank 0.
Status DecoderRunner::FinishStage(const ForwardBatch& b, std::vector<float>* logits) {
  const int T = shard_.tp_size;
  const size_t n_logits = b.logit_rows.size() * size_t(c_.n_vocab);
  const int last_root = (shard_.pp_size - 1) * T;  // TP rank 0 of the last stage
  if (!shard_.last_stage()) {
    const int to = (shard_.pp_rank + 1) * T + shard_.tp_rank;
    RETURN_IF_ERROR(comms_.world->Send(x_.data(), sizeof(float) * size_t(b.size()) * c_.n_embd, to));
    if (comms_.world->rank() == 0 && n_logits > 0) {
      logits->resize(n_logits);
      return comms_.world->Recv(logits->data(), sizeof(float) * n_logits, last_root);
    }
    logits->clear();
    return Status::Ok();
  }
  RETURN_IF_ERROR(Logits(b, logits));
  if (comms_.world->rank() == last_root && last_root != 0 && n_logits > 0) {
    RETURN_IF_ERROR(comms_.world->Send(logits->data(), sizeof(float) * n_logits, 0));
  }
  if (comms_.world->rank() != 0) logits->clear();
  return Status::Ok();
}

Status DecoderRunner::Forward(const ForwardBatch& b, KvStorage& kv, std::vector<float>* logits) {
  // Every rank validates the same batch the same way, so an error returns
  // on all of them before any communication.
  RETURN_IF_ERROR(Validate(b, kv));
  GrowScratch(b);
  RETURN_IF_ERROR(PrepareLora(b));
  if (!shard_.split()) {
    Embed(b);
    const int n_blocks = 2 * c_.n_layer;
    int first = 0, end = n_blocks;
    if (tap_ != nullptr) {
      first = tap_->ResumeAt(x_.data(), b.size(), c_.n_embd);
      end = std::min(end, tap_->StopBefore());
      CHECK(first >= 0 && first <= end);
    }
    // Blocks before `first` do not run: their layers' K/V of these tokens
    // are not written, and no later block reads them.
    for (int k = first; k < end; ++k) {
      if (tap_ != nullptr) tap_->BlockInput(k, x_.data(), b.size(), c_.n_embd);
      if (k % 2 == 0) RETURN_IF_ERROR(AttentionBlock(k / 2, b, kv));
      else RETURN_IF_ERROR(FfnBlock(k / 2, b.size()));
    }
    if (end < n_blocks) {  // stopped early: no logits (ResidualTap::StopBefore)
      logits->assign(b.logit_rows.size() * size_t(c_.n_vocab), 0.0f);
      return Status::Ok();
    }
    if (tap_ != nullptr) tap_->BlockInput(n_blocks, x_.data(), b.size(), c_.n_embd);
    return Logits(b, logits);
  }
  if (shard_.first_stage()) Embed(b);
  else RETURN_IF_ERROR(ReceiveFromPreviousStage(b.size()));
  for (int l = shard_.layer_begin(); l < shard_.layer_end(); ++l) {
    RETURN_IF_ERROR(AttentionBlock(l, b, kv));
    RETURN_IF_ERROR(FfnBlock(l, b.size()));
  }
  return FinishStage(b, logits);
}

}  // namespace infera
