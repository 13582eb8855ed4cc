#include "kernels/cpu/avx512/avx512_unpack.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/reference/unpack.h"

namespace infera::avx512 {
namespace {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

void ZeroPad(int64_t n, uint8_t* u, float* s16, float* m16) {
  const int64_t n_pad = RoundUpToUnit(n);
  std::memset(u + n, 0, n_pad - n);
  for (int64_t g = n / 16; g < n_pad / 16; ++g) s16[g] = m16[g] = 0.0f;
}

void UnpackQ4_0(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16) {
  const __m128i lo = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = row + b * 18;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + b * 32), _mm_and_si128(q, lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + b * 32 + 16), _mm_and_si128(_mm_srli_epi16(q, 4), lo));
    s16[2 * b] = s16[2 * b + 1] = Half(blk);
    m16[2 * b] = m16[2 * b + 1] = 0.0f;
  }
  ZeroPad(n, u, s16, m16);
}

void UnpackQ8_0(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = row + b * 34;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + b * 32), _mm256_xor_si256(q, flip));
    s16[2 * b] = s16[2 * b + 1] = Half(blk);
    m16[2 * b] = m16[2 * b + 1] = 0.0f;
  }
  ZeroPad(n, u, s16, m16);
}

void UnpackQ4_K(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16) {
  const __m256i lo = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* blk = row + b * 144;
    reference::KScalesMins(blk, s16 + b * 16, m16 + b * 16);
    uint8_t* ub = u + b * 256;
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 64 * j), _mm256_and_si256(q, lo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 64 * j + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), lo));
    }
  }
  ZeroPad(n, u, s16, m16);
}

void UnpackQ6_K(const uint8_t* row, int64_t n, uint8_t* u, float* s16, float* m16) {
  const __m256i lo = _mm256_set1_epi8(0x0F), hi = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* blk = row + b * 210;
    const float d = Half(blk + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int j = 0; j < 16; ++j) {
      s16[b * 16 + j] = d * static_cast<float>(sc[j]);
      m16[b * 16 + j] = 0.0f;
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk + 64 * h;
      const uint8_t* qh = blk + 128 + 32 * h;
      uint8_t* ub = u + b * 256 + 128 * h;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      const __m256i u0 = _mm256_or_si256(_mm256_and_si256(a, lo), _mm256_and_si256(_mm256_slli_epi16(hb, 4), hi));
      const __m256i u1 = _mm256_or_si256(_mm256_and_si256(c, lo), _mm256_and_si256(_mm256_slli_epi16(hb, 2), hi));
      const __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), lo), _mm256_and_si256(hb, hi));
      const __m256i u3 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), lo), _mm256_and_si256(_mm256_srli_epi16(hb, 2), hi));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub), u0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 32), u1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 64), u2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 96), u3);
    }
  }
  ZeroPad(n, u, s16, m16);
}

}  // namespace

void FillUnpackers(KernelTable* t) {
  t->unpack[static_cast<size_t>(DType::kQ4_0)] = UnpackQ4_0;
  t->unpack[static_cast<size_t>(DType::kQ8_0)] = UnpackQ8_0;
  t->unpack[static_cast<size_t>(DType::kQ4_K)] = UnpackQ4_K;
  t->unpack[static_cast<size_t>(DType::kQ6_K)] = UnpackQ6_K;
}

}  // namespace infera::avx512
