#include "engine/kv_block_codec.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "kernels/bf16_generic.h"
#include "kernels/flash_generic.h"
#include "kernels/kernels.h"

namespace infera {
namespace {

// Bytes of one (layer, KV head)'s part of a payload.
size_t HeadBytes(int head_dim, int32_t bs, uint32_t kind) {
  return kind == kKvPayloadF32 ? 2 * sizeof(float) * head_dim * size_t(bs)
                               : 2 * (size_t(head_dim) * bs + sizeof(float) * bs);
}

int HeadDim(const KvStorage& kv) { return kv.n_layer() > 0 && kv.n_heads(0) > 0 ? kv.kv_dim(0) / kv.n_heads(0) : 0; }

}  // namespace

size_t KvPayloadBytes(const KvStorage& kv, int32_t block_size, uint32_t kind) {
  const int hd = HeadDim(kv);
  size_t n = 0;
  for (int l = 0; l < kv.n_layer(); ++l) n += kv.n_heads(l) * HeadBytes(hd, block_size, kind);
  return n;
}

namespace {

// Where element d of the block's slot i sits in a payload's K rows: the
// cache's own tiled layout (FlashKIndex over the block's slots) when the
// block is a whole number of 16-slot tiles — then a block's K is one
// contiguous run in the cache and moves with one memcpy — else row-major.
struct KLayout {
  bool tiled;
  int hd;
  int64_t operator()(int32_t i, int d) const { return tiled ? FlashKIndex(i, d, hd) : int64_t(i) * hd + d; }
};

}  // namespace

std::string EncodeKvBlock(KvStorage& kv, int32_t first_slot, int32_t bs, uint32_t kind) {
  const int hd = HeadDim(kv);
  const KLayout kp{bs % kFlashTile == 0 && first_slot % kFlashTile == 0, hd};
  const size_t n = size_t(bs) * hd;
  std::string out(KvPayloadBytes(kv, bs, kind), '\0');
  char* p = out.data();
  std::vector<float> row(hd);
  std::vector<float> vrow(hd);
  for (int l = 0; l < kv.n_layer(); ++l) {
    for (int h = 0; h < kv.n_heads(l); ++h) {
      if (kv.type() == KvType::kBF16) {  // bf16 storage: f32 payloads hold its values exactly
        const uint16_t* kt = kv.k16(l, h);
        const uint16_t* vt = kv.v16(l, h);
        float* kf = reinterpret_cast<float*>(p);
        int8_t* k8 = reinterpret_cast<int8_t*>(p);
        float* ks = reinterpret_cast<float*>(k8 + n);
        int8_t* v8 = reinterpret_cast<int8_t*>(ks + bs);
        float* vs = reinterpret_cast<float*>(v8 + n);
        for (int32_t i = 0; i < bs; ++i) {
          const int32_t s = first_slot + i;
          for (int d = 0; d < hd; ++d) {
            row[d] = Bf16ToF32(kt[FlashK16Index(s, d, hd)]);
            vrow[d] = Bf16ToF32(vt[FlashV16Index(s, d, hd)]);
          }
          if (kind == kKvPayloadF32) {
            for (int d = 0; d < hd; ++d) kf[kp(i, d)] = row[d];
            std::memcpy(kf + n + size_t(i) * hd, vrow.data(), sizeof(float) * hd);
          } else {
            ks[i] = QuantizeKvRowTo(row.data(), hd, [&](int d, int8_t q) { k8[kp(i, d)] = q; });
            vs[i] = QuantizeKvRow(vrow.data(), hd, v8 + size_t(i) * hd);
          }
        }
      } else if (kind == kKvPayloadF32) {  // f32 storage (the fingerprint ties kinds to storage types)
        float* k = reinterpret_cast<float*>(p);
        const float* kt = kv.k(l, h);
        if (kp.tiled) {
          std::memcpy(k, kt + FlashKIndex(first_slot, 0, hd), sizeof(float) * n);
        } else {
          for (int32_t i = 0; i < bs; ++i) {
            for (int d = 0; d < hd; ++d) k[kp(i, d)] = kt[FlashKIndex(first_slot + i, d, hd)];
          }
        }
        std::memcpy(k + n, kv.v(l, h) + size_t(first_slot) * hd, sizeof(float) * n);
      } else {
        int8_t* k = reinterpret_cast<int8_t*>(p);
        float* ks = reinterpret_cast<float*>(k + n);
        int8_t* v = reinterpret_cast<int8_t*>(ks + bs);
        float* vs = reinterpret_cast<float*>(v + n);
        if (kv.type() == KvType::kQ8) {
          const int8_t* kt = kv.k8(l, h);
          if (kp.tiled) {
            std::memcpy(k, kt + FlashKIndex(first_slot, 0, hd), n);
          } else {
            for (int32_t i = 0; i < bs; ++i) {
              for (int d = 0; d < hd; ++d) k[kp(i, d)] = kt[FlashKIndex(first_slot + i, d, hd)];
            }
          }
          std::memcpy(v, kv.v8(l, h) + size_t(first_slot) * hd, n);
          std::memcpy(ks, kv.k_scale(l, h) + first_slot, sizeof(float) * bs);
          std::memcpy(vs, kv.v_scale(l, h) + first_slot, sizeof(float) * bs);
        } else {
          const float* kt = kv.k(l, h);
          for (int32_t i = 0; i < bs; ++i) {
            const int32_t s = first_slot + i;
            for (int d = 0; d < hd; ++d) row[d] = kt[FlashKIndex(s, d, hd)];
            ks[i] = QuantizeKvRowTo(row.data(), hd, [&](int d, int8_t q) { k[kp(i, d)] = q; });
            vs[i] = QuantizeKvRow(kv.v(l, h) + size_t(s) * hd, hd, v + size_t(i) * hd);
          }
        }
      }
      p += HeadBytes(hd, bs, kind);
    }
  }
  return out;
}

Status DecodeKvBlock(std::string_view payload, uint32_t kind, KvStorage& kv, int32_t first_slot, int32_t bs) {
  if (kind != kKvPayloadF32 && kind != kKvPayloadQ8) return DataLoss(fmt::format("unknown KV payload kind {}", kind));
  if (kind == kKvPayloadF32 && kv.type() == KvType::kQ8) return DataLoss("f32 KV payload for a q8 cache");
  if (payload.size() != KvPayloadBytes(kv, bs, kind)) return DataLoss("KV payload size mismatch");
  const int hd = HeadDim(kv);
  const KLayout kp{bs % kFlashTile == 0 && first_slot % kFlashTile == 0, hd};
  const size_t n = size_t(bs) * hd;
  const char* p = payload.data();
  for (int l = 0; l < kv.n_layer(); ++l) {
    for (int h = 0; h < kv.n_heads(l); ++h) {
      if (kv.type() == KvType::kBF16) {
        uint16_t* kt = kv.k16(l, h);
        uint16_t* vt = kv.v16(l, h);
        const float* kf = reinterpret_cast<const float*>(p);
        const int8_t* k8 = reinterpret_cast<const int8_t*>(p);
        const float* ks = reinterpret_cast<const float*>(k8 + n);
        const int8_t* v8 = reinterpret_cast<const int8_t*>(ks + bs);
        const float* vs = reinterpret_cast<const float*>(v8 + n);
        for (int32_t i = 0; i < bs; ++i) {
          const int32_t s = first_slot + i;
          for (int d = 0; d < hd; ++d) {
            const bool f32 = kind == kKvPayloadF32;
            const float kx = f32 ? kf[kp(i, d)] : ks[i] * k8[kp(i, d)];
            const float vx = f32 ? kf[n + size_t(i) * hd + d] : vs[i] * v8[size_t(i) * hd + d];
            kt[FlashK16Index(s, d, hd)] = Bf16Round(kx);
            vt[FlashV16Index(s, d, hd)] = Bf16Round(vx);
          }
        }
      } else if (kind == kKvPayloadF32) {
        const float* k = reinterpret_cast<const float*>(p);
        float* kt = kv.k(l, h);
        if (kp.tiled) {
          std::memcpy(kt + FlashKIndex(first_slot, 0, hd), k, sizeof(float) * n);
        } else {
          for (int32_t i = 0; i < bs; ++i) {
            for (int d = 0; d < hd; ++d) kt[FlashKIndex(first_slot + i, d, hd)] = k[kp(i, d)];
          }
        }
        std::memcpy(kv.v(l, h) + size_t(first_slot) * hd, k + n, sizeof(float) * n);
      } else {
        const int8_t* k = reinterpret_cast<const int8_t*>(p);
        const float* ks = reinterpret_cast<const float*>(k + n);
        const int8_t* v = reinterpret_cast<const int8_t*>(ks + bs);
        const float* vs = reinterpret_cast<const float*>(v + n);
        if (kv.type() == KvType::kQ8) {
          int8_t* kt = kv.k8(l, h);
          if (kp.tiled) {
            std::memcpy(kt + FlashKIndex(first_slot, 0, hd), k, n);
          } else {
            for (int32_t i = 0; i < bs; ++i) {
              for (int d = 0; d < hd; ++d) kt[FlashKIndex(first_slot + i, d, hd)] = k[kp(i, d)];
            }
          }
          std::memcpy(kv.v8(l, h) + size_t(first_slot) * hd, v, n);
          std::memcpy(kv.k_scale(l, h) + first_slot, ks, sizeof(float) * bs);
          std::memcpy(kv.v_scale(l, h) + first_slot, vs, sizeof(float) * bs);
        } else {
          float* kt = kv.k(l, h);
          for (int32_t i = 0; i < bs; ++i) {
            const int32_t s = first_slot + i;
            float* vt = kv.v(l, h) + size_t(s) * hd;
            for (int d = 0; d < hd; ++d) {
              kt[FlashKIndex(s, d, hd)] = ks[i] * k[kp(i, d)];
              vt[d] = vs[i] * v[size_t(i) * hd + d];
            }
          }
        }
      }
      p += HeadBytes(hd, bs, kind);
    }
  }
  return Status::Ok();
}

}  // namespace infera
