#include "attention/attention.h"

#include <algorithm>
#include <cstring>

#include "attention/naive_attention.h"
#include "kernels/flash_generic.h"

namespace infera {

void WriteKv(KvStorage& kv, int layer, int32_t slot, const float* k, const float* v, int n_head_kv, int head_dim) {
  const int kvd = n_head_kv * head_dim;
  if (kv.type() == KvType::kQ8) {
    int8_t* k8 = kv.k8(layer) + size_t(slot) * kvd;
    int8_t* v8 = kv.v8(layer) + size_t(slot) * kvd;
    float* ks = kv.k_scale(layer) + size_t(slot) * n_head_kv;
    float* vs = kv.v_scale(layer) + size_t(slot) * n_head_kv;
    for (int h = 0; h < n_head_kv; ++h) {
      ks[h] = QuantizeKvRow(k + h * head_dim, head_dim, k8 + h * head_dim);
      vs[h] = QuantizeKvRow(v + h * head_dim, head_dim, v8 + h * head_dim);
    }
  } else {
    std::memcpy(kv.k(layer) + size_t(slot) * kvd, k, sizeof(float) * kvd);
    std::memcpy(kv.v(layer) + size_t(slot) * kvd, v, sizeof(float) * kvd);
  }
}

size_t AttentionScratchFloats(const AttentionShape& s, int32_t max_pos) {
  const size_t flash = size_t(s.n_head / s.n_head_kv) * (kFlashTile + 2);
  return std::max(size_t(max_pos) + 1, flash);
}

void AttendBatch(const KernelTable& k, ThreadPool& pool, KvStorage& kv, int layer, const AttentionShape& s,
                 const TokenSlots& tokens, int32_t T, const float* q, float* out,
                 std::vector<std::vector<float>>& scratch, bool naive) {
  const int hd = s.head_dim, n_kv = s.n_head_kv, qd = s.q_dim(), kvd = s.kv_dim();
  const int group = s.n_head / n_kv;
  const bool q8 = kv.type() == KvType::kQ8;
  // One work item per (token, KV head group). Items are dealt to `lanes`
  // strided lanes (lane g: items g, g + lanes, ...), so every range of lanes
  // the pool hands a thread mixes early (short) and late (long) causal rows.
  // The tiled kernel reads each K/V row once per group and keeps O(tile) state.
  const int64_t items = int64_t(T) * n_kv;
  const int64_t lanes = std::min<int64_t>(items, 64 * pool.size());
  pool.ParallelForWithThread(lanes, 1, [&](int thread, int64_t g0, int64_t g1) {
    float* buf = scratch[thread].data();
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t it = g; it < items; it += lanes) {
        const int32_t t = static_cast<int32_t>(it / n_kv);
        const int kvh = static_cast<int>(it % n_kv);
        const int32_t p = tokens.positions[t];
        const int32_t first = s.sliding_window > 0 ? std::max(0, p - s.sliding_window + 1) : 0;
        const size_t q_off = size_t(t) * qd + size_t(kvh) * group * hd;
        const int32_t* slots = tokens.slots_of(t);
        if (q8) {
          k.flash_attend_group_q8(q + q_off, group, kv.k8(layer) + kvh * hd, kv.k_scale(layer) + kvh,
                                  kv.v8(layer) + kvh * hd, kv.v_scale(layer) + kvh, kvd, n_kv, hd, s.scale, s.softcap,
                                  slots, first, p, out + q_off, buf);
        } else if (naive) {
          for (int i = 0; i < group; ++i) {
            AttendHead(k, q + q_off + size_t(i) * hd, kv.k(layer) + kvh * hd, kv.v(layer) + kvh * hd, kvd, hd, s.scale,
                       s.softcap, slots, first, p, buf, out + q_off + size_t(i) * hd);
          }
        } else {
          k.flash_attend_group(q + q_off, group, kv.k(layer) + kvh * hd, kv.v(layer) + kvh * hd, kvd, hd, s.scale,
                               s.softcap, slots, first, p, out + q_off, buf);
        }
      }
    }
  });
}

}  // namespace infera
