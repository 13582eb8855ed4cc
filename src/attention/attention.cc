#include "attention/attention.h"

#include <algorithm>
#include <cstring>

#include "kernels/bf16_generic.h"
#include "kernels/flash.h"
#include "kernels/flash_generic.h"

namespace infera {

void WriteKv(KvStorage& kv, int layer, int32_t slot, const float* k, const float* v, int n_head_kv, int head_dim) {
  const size_t row = size_t(slot) * head_dim;
  for (int h = 0; h < n_head_kv; ++h) {
    const float* kh = k + h * head_dim;
    const float* vh = v + h * head_dim;
    if (kv.type() == KvType::kBF16) {
      uint16_t* kt = kv.k16(layer, h);
      uint16_t* vt = kv.v16(layer, h);
      for (int d = 0; d < head_dim; ++d) {
        kt[FlashK16Index(slot, d, head_dim)] = Bf16Round(kh[d]);
        vt[FlashV16Index(slot, d, head_dim)] = Bf16Round(vh[d]);
      }
    } else if (kv.type() == KvType::kQ8) {
      int8_t* kt = kv.k8(layer, h);
      kv.k_scale(layer, h)[slot] =
          QuantizeKvRowTo(kh, head_dim, [&](int d, int8_t q) { kt[FlashKIndex(slot, d, head_dim)] = q; });
      kv.v_scale(layer, h)[slot] = QuantizeKvRow(vh, head_dim, kv.v8(layer, h) + row);
    } else {
      float* kt = kv.k(layer, h);
      for (int d = 0; d < head_dim; ++d) kt[FlashKIndex(slot, d, head_dim)] = kh[d];
      std::memcpy(kv.v(layer, h) + row, vh, sizeof(float) * head_dim);
    }
  }
}

namespace {

// Query rows (tokens × the query heads of one KV head) per tiled block: the
// block's state and a step of K/V (64 positions: 2 × 16 KB at head_dim 64,
// f32) stay in L1 / L2 while every row uses the step.
constexpr int kFlashRows = 32;
// With bf16 products the kernel rounds each step's K and V into pair
// layouts first (about 200 ns per step of 64 positions at head_dim 64 on
// Zen 5): 96 rows share that cost three times as widely, and their state
// (2 x 96 x (head_dim + 2) floats) still fits L2.
constexpr int kFlashRowsBf16 = 96;

void Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Cuts the batch into blocks: runs of consecutive tokens of one sequence at
// consecutive positions, at most max_nq tokens each. Block i is tokens
// [starts[i], starts[i + 1]).
void CutBlocks(const TokenSlots& tokens, int32_t T, int max_nq, std::vector<int32_t>* starts) {
  starts->clear();
  for (int32_t t = 0; t < T; ++t) {
    const bool cont = t > 0 && tokens.seq[t] == tokens.seq[t - 1] &&
                      tokens.positions[t] == tokens.positions[t - 1] + 1 && t - starts->back() < max_nq;
    if (!cont) starts->push_back(t);
  }
  starts->push_back(T);
}

}  // namespace

void AttendBatch(const KernelTable& k, ThreadPool& pool, KvStorage& kv, int layer, const AttentionShape& s,
                 const TokenSlots& tokens, int32_t T, const float* q, float* out, AttentionWorkspace& ws) {
  if (ws.thread.size() < size_t(pool.size())) ws.thread.resize(pool.size());
  const int hd = s.head_dim, n_kv = s.n_head_kv, qd = s.q_dim();
  const int group = s.n_head / n_kv;
  const bool q8 = kv.type() == KvType::kQ8;
  const bool bf16_cache = kv.type() == KvType::kBF16;
  const bool bf16 = bf16_cache || (k.attn_bf16 && !q8);
  const int max_nq = std::max(1, (bf16 ? kFlashRowsBf16 : kFlashRows) / group);
  ws.first.resize(T);
  int64_t attended = 0;  // (query token, position) pairs
  for (int32_t t = 0; t < T; ++t) {
    const int32_t p = tokens.positions[t];
    ws.first[t] = s.sliding_window > 0 ? std::max(0, p - s.sliding_window + 1) : 0;
    attended += p - ws.first[t] + 1;
  }
  std::vector<int32_t>& starts = ws.block_starts;
  CutBlocks(tokens, T, max_nq, &starts);
  const int64_t n_blocks = static_cast<int64_t>(starts.size()) - 1;
  const int64_t items = n_blocks * n_kv;  // item = (block, KV head)
  auto flash_block = [&](int64_t item) {
    const int64_t bi = item / n_kv;
    const int kvh = static_cast<int>(item % n_kv);
    const int32_t t0 = starts[bi];
    FlashBlock b;
    b.q = q + size_t(t0) * qd + size_t(kvh) * group * hd;
    b.q_stride = qd;
    b.nq = starts[bi + 1] - t0;
    b.g = group;
    b.head_dim = hd;
    b.first = ws.first.data() + t0;
    b.last = tokens.positions + t0;
    b.slots = tokens.slots_of(t0);
    if (bf16_cache) {
      b.k16 = kv.k16(layer, kvh);
      b.v16 = kv.v16(layer, kvh);
    } else if (q8) {
      b.k8 = kv.k8(layer, kvh);
      b.v8 = kv.v8(layer, kvh);
      b.ks = kv.k_scale(layer, kvh);
      b.vs = kv.v_scale(layer, kvh);
    } else {
      b.k = kv.k(layer, kvh);
      b.v = kv.v(layer, kvh);
    }
    b.scale = s.scale;
    b.softcap = s.softcap;
    return b;
  };
  auto out_of = [&](int64_t item) {
    return out + size_t(starts[item / n_kv]) * qd + size_t(item % n_kv) * group * hd;
  };
  const size_t scratch = FlashBlockScratchFloats(max_nq * group, hd);
  for (auto& buf : ws.thread) Grow(buf, scratch);
  // Small ops (short contexts, small models) run inline: the op's size is
  // the K and V rows each query token reads, as f32.
  if (!k.ShouldSplit(pool.size(), attended * n_kv * hd * 2 * int64_t{sizeof(float)})) {
    for (int64_t it = 0; it < items; ++it) FlashAttendBlock(k, flash_block(it), out_of(it), qd, ws.thread[0].data());
    return;
  }

  // Few items (decode of a few sequences): spread their chunks of positions
  // over the threads, each into its own state, then merge in chunk order.
  std::vector<int64_t>& piece0 = ws.item_first_piece;  // [items + 1]
  piece0.assign(1, 0);
  for (int64_t it = 0; it < items; ++it) {
    int32_t c0 = 0, c1 = 0;
    FlashChunkRange(flash_block(it), &c0, &c1);
    piece0.push_back(piece0.back() + (c1 - c0));
  }
  const int64_t pieces = piece0.back();
  // Split when dealing whole items would leave a thread idle for long:
  // fewer items than two per thread, or few items that do not divide evenly
  // (decode of one sequence with 5 KV heads on 2 threads: 3 items against
  // 2, a sixth of the attention time lost) — the merge costs far less.
  const int64_t n_threads = pool.size();
  const bool uneven = items % n_threads != 0 && items < 8 * n_threads;
  const bool split = n_threads > 1 && (items < 2 * n_threads || uneven) && pieces >= 2 * items;
  if (!split) {
    // One work item per (block, KV head). Items are dealt to `lanes` strided
    // lanes (lane g: items g, g + lanes, ...), so every range of lanes the
    // pool hands a thread mixes early (short) and late (long) causal blocks.
    const int64_t lanes = std::min<int64_t>(items, 16 * pool.size());
    pool.ParallelForWithThread(lanes, 1, [&](int thread, int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        for (int64_t it = g; it < items; it += lanes) {
          FlashAttendBlock(k, flash_block(it), out_of(it), qd, ws.thread[thread].data());
        }
      }
    });
    return;
  }
  const size_t state = FlashStateFloats(max_nq * group, hd);
  Grow(ws.chunk_states, size_t(pieces) * state);
  pool.ParallelForWithThread(pieces, 1, [&](int thread, int64_t p0, int64_t p1) {
    for (int64_t pc = p0; pc < p1; ++pc) {
      const int64_t it = std::upper_bound(piece0.begin(), piece0.end(), pc) - piece0.begin() - 1;
      const FlashBlock b = flash_block(it);
      int32_t c0 = 0, c1 = 0;
      FlashChunkRange(b, &c0, &c1);
      FlashRunChunk(k, b, c0 + int32_t(pc - piece0[it]), ws.chunk_states.data() + size_t(pc) * state,
                    ws.thread[thread].data());
    }
  });
  pool.ParallelForWithThread(items, 1, [&](int thread, int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const FlashBlock b = flash_block(it);
      int32_t c0 = 0, c1 = 0;
      FlashChunkRange(b, &c0, &c1);
      float* running = ws.thread[thread].data();
      FlashStateInit(b, running);
      for (int32_t c = c0; c < c1; ++c) {
        FlashMerge(k, b, c, ws.chunk_states.data() + size_t(piece0[it] + (c - c0)) * state, running);
      }
      FlashFinalize(b, running, out_of(it), qd);
    }
  });
}

}  // namespace infera
