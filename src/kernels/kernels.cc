#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "kernels/exp_generic.h"
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avxvnni/avxvnni_kernels.h"
#include "kernels/cpu/amx/amx_kernels.h"
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512vnni/vnni_kernels.h"
#include "kernels/cpu/avx512vbmi2/sparse_mask_kernels.h"
#include "kernels/cpu/avx512bf16/bf16_kernels.h"
#include "kernels/reference/reference_kernels.h"

namespace infera {

FloatTileFn KernelTable::FloatTileFor(DType t) const {
  switch (t) {
    case DType::kF32: return tile_f32;
    case DType::kF16: return tile_f16;
    case DType::kBF16: return tile_bf16;
    default: return nullptr;
  }
}

Bf16TileFn KernelTable::Bf16TileFor(DType t) const {
  switch (t) {
    case DType::kF32: return bf16_tile_f32;
    case DType::kF16: return bf16_tile_f16;
    case DType::kBF16: return bf16_tile_bf16;
    default: return nullptr;
  }
}

KernelTable MakeKernelTable(CpuIsa isa) {
  const CpuFeatures f = DetectCpuFeatures();
  const CpuIsa best = f.MaxIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  KernelTable t;
  reference::Fill(&t);
  if (isa >= CpuIsa::kAvx2) {
    avx2::Fill(&t);
    if (f.avx_vnni) avxvnni::Fill(&t);
  }
  if (isa >= CpuIsa::kAvx512) {
    avx512::Fill(&t);
    if (f.avx512vnni) avx512vnni::Fill(&t);
    if (f.avx512vnni && f.avx512vbmi2) avx512vbmi2::Fill(&t);
    if (f.avx512bf16) avx512bf16::Fill(&t);
  }
  if (isa >= CpuIsa::kAmx && RequestAmxTileData()) {  // (refused: the AVX-512 level)
    amx::Fill(&t);
    if (f.amx_bf16 && f.avx512bf16) amx::FillBf16(&t);
  }
  return t;
}

KernelTable MakeBestKernelTable() { return MakeKernelTable(DetectCpuFeatures().BestIsa()); }

namespace {

constexpr int64_t kFloatTileTokens = 6;
constexpr int64_t kL2Budget = 384 * 1024;   // bytes of activations per token block (quantized)
constexpr int64_t kL2Weights = 512 * 1024;  // bytes of weight rows per block (float)
// Matmuls of at least this many tokens are cut into this many pieces per
// thread (MatmulMany).
constexpr int64_t kCoarsePiecesTokens = 16;
constexpr int kCoarsePiecesPerThread = 4;

// The shortest rows the AMX tile kernel takes. Its per-k-block float
// epilogue (one fma per token and row) is the VNNI kernel's; the tiles save
// the integer work and the repeated weight decode. Xeon with AMX (KVM,
// kernels_bench Prefill64, medians, two machines): 2048 x 5632, 2 threads,
// 1.3-2.2x the VNNI kernel for Q8_0, Q4_0, Q4_K, Q6_K; 960 x 2560, 1
// thread, Q8_0 0.97-1.00x, Q4_0 1.14-1.23x, and m360's pp512 (960 wide) no
// faster end to end (Q8_0 slower), so narrower rows keep the VNNI kernel.
// (m1b's pp512 was not faster either: the whole level is opt-in,
// CpuFeatures::BestIsa.)
constexpr int64_t kTileMinInputs = 2048;

// Tokens per block: a multiple of 12 (whole 4- and 6-token tiles).
int64_t TokenBlock(int64_t bytes_per_token) {
  const int64_t tb = kL2Budget / std::max<int64_t>(bytes_per_token, 1);
  return std::clamp<int64_t>(tb / 12 * 12, 12, 252);
}

// One matrix of a MatmulMany op, prepared: its share of the op's units
// (16-row groups) is [unit0, unit0 + units).
struct MatmulPart {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
  FloatTileFn tile = nullptr;        // float weights
  Bf16TileFn bf16_tile = nullptr;    // float weights, bf16 products (tile is null then)
  int64_t row_block = 0;             // float: rows per L2-sized block
  const PackedMatrix* pm = nullptr;  // quantized weights
  QuantActs acts;
  int64_t unit0 = 0, units = 0;
};

// Float rows [r0, r1) of y = x · W^T. Walks them in L2-sized blocks and, in
// each, every 6-token tile over all the block's 4-row tiles: a tile's
// activations stay in L1 (or L2 for long rows) while the block's weights
// (half the bytes for F16) come from L2. Reading the activations from L2 for
// every weight tile instead was 10-15 % slower prefill (m360 / m1b F16).
// With bf16 products the activations are xb [m, ldxb] (bf16 bits) instead,
// and F32 / F16 rows serving more than one token tile are first converted to
// bf16 (this thread's scratch, once per row block) so that the tiles do not
// convert them again for every 6 tokens: the same bits (the tiles round the
// same way in registers; m360 F16 pp512 1.25x -> 1.40x f32 products).
// Where a tile unit has bf16 (KernelTable::bf16_tile_rows), it takes 32
// rows and every token per call, for every m (its own form of the dot).
void FloatRows(const KernelTable& k, const MatmulPart& p, const float* x, const uint16_t* xb, int64_t ldxb,
               const uint32_t* x2, int64_t m, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *p.w;
  if (x2 != nullptr) {  // a tile unit: every token per call
    for (int64_t r = r0; r < r1; r += kBf16TileRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kBf16TileRows, r1 - r));
      k.bf16_tile_rows(w.type, w.data + r * w.row_bytes, w.row_bytes, nr, x2, m, m, w.n_in, p.y + r, w.n_out);
    }
    return;
  }
  const bool convert = p.bf16_tile != nullptr && w.type != DType::kBF16 && m > kFloatTileTokens;
  thread_local std::vector<uint16_t> wb;
  for (int64_t b0 = r0; b0 < r1; b0 += p.row_block) {
    const int64_t b1 = std::min(r1, b0 + p.row_block);
    if (convert) {
      wb.resize(static_cast<size_t>((b1 - b0) * ldxb));
      for (int64_t r = b0; r < b1; ++r) k.row_to_bf16(w.type, w.data + r * w.row_bytes, w.n_in, &wb[(r - b0) * ldxb]);
    }
    for (int64_t t = 0; t < m; t += kFloatTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kFloatTileTokens, m - t));
      for (int64_t r = b0; r < b1; r += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, b1 - r));
        if (convert) {
          k.bf16_tile_bf16(reinterpret_cast<const uint8_t*>(&wb[(r - b0) * ldxb]), 2 * ldxb, nr, xb + t * ldxb, ldxb,
                           nt, w.n_in, p.y + t * w.n_out + r, w.n_out);
        } else if (p.bf16_tile != nullptr) {
          p.bf16_tile(w.data + r * w.row_bytes, w.row_bytes, nr, xb + t * ldxb, ldxb, nt, w.n_in,
                      p.y + t * w.n_out + r, w.n_out);
        } else {
          p.tile(w.data + r * w.row_bytes, w.row_bytes, nr, x + t * w.n_in, w.n_in, nt, w.n_in,
                 p.y + t * w.n_out + r, w.n_out);
        }
      }
    }
  }
}

// Packed groups [g0, g1) of y = x · W^T: tokens in L2-sized blocks, each
// group's unpacked block reused by up to 4 tokens.
void QuantGroups(const KernelTable& k, const MatmulPart& p, int64_t m, int64_t g0, int64_t g1) {
  constexpr int kR = PackedMatrix::kRows;
  const int64_t n_out = p.w->n_out;
  const int64_t tb = TokenBlock(p.w->n_in + 64);
  const PackFormat& f = p.pm->format();
  // Tokens per kernel call: 4, or for row-scaled kernels (whose accumulators
  // are only the int32 sums) 8 when 8 tokens' activations and the group's
  // weights stay within L1 (n_in <= 1024). Zen 5 guest, Prefill64: 960 x 2560
  // 1.24x Q8_0 with 8 vs 1.20x with 4; 2048 x 5632 1.03x with 8, 1.26x with 4.
  const int tile = f.row_scale && p.w->n_in <= 1024 ? kMaxRowTileTokens : 4;
  alignas(64) float out[kQGemmTileTokens * kR];
  const QGemmFn qgemm = f.row_scale  ? k.qgemm_row
                       : f.sparse24 ? k.qgemm_sparse24
                       : f.sparse_mask ? k.qgemm_sparse_mask
                                       : k.qgemm;
  const ExpandSparseFn expand = f.sparse24 ? k.expand_sparse24 : f.sparse_mask ? k.expand_sparse_mask : nullptr;
  const bool dense_layout = !f.row_scale && !f.sparse24 && !f.sparse_mask;
  // Sparse groups serving more than one token tile are expanded once into
  // dense Q8_0 or Q4_0 (this thread's scratch) for the dense kernel: the same
  // results, without spreading the values again for every tile.
  thread_local std::unique_ptr<PackedMatrix> dense;
  for (int64_t t0 = 0; t0 < m; t0 += tb) {
    const int64_t t1 = std::min(m, t0 + tb);
    const bool expand_here = expand != nullptr && t1 - t0 > 4;
    // A tile unit takes 16 tokens per call where a block has more than one
    // 4-token tile and the rows are long enough to pay (the same bits as
    // qgemm either way).
    const bool tile16 = k.qgemm_tile16 != nullptr && (dense_layout || expand_here) && t1 - t0 > 4 &&
                        p.w->n_in >= kTileMinInputs;
    const int tile_here = tile16 ? kQGemmTileTokens : tile;
    if (expand_here && (dense == nullptr || dense->n_in() != p.w->n_in || dense->type() != p.pm->DenseType())) {
      dense = std::make_unique<PackedMatrix>(PackedMatrix::DenseGroup(p.pm->DenseType(), p.w->n_in));
    }
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * kR;
      const int nr = static_cast<int>(std::min<int64_t>(kR, n_out - r0));
      if (expand_here) expand(*p.pm, g, dense.get());
      const PackedMatrix& wg = expand_here ? *dense : *p.pm;
      const int64_t gg = expand_here ? 0 : g;
      for (int64_t t = t0; t < t1; t += tile_here) {
        const int nt = static_cast<int>(std::min<int64_t>(tile_here, t1 - t));
        if (tile16) {
          k.qgemm_tile16(wg, gg, p.acts, t, nt, out);
        } else if (expand_here) {
          k.qgemm(wg, gg, p.acts, t, nt, out);
        } else {
          qgemm(wg, gg, p.acts, t, nt, out);
        }
        for (int i = 0; i < nt; ++i) std::copy(out + i * kR, out + i * kR + nr, p.y + (t + i) * n_out + r0);
      }
    }
  }
}

}  // namespace

void Matmul(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
            float* y) {
  const MatmulTarget t{&w, y};
  MatmulMany(k, pool, &t, 1, x, m);
}

namespace {

// y = W x for a matrix with outlier columns (OutlierColumns): the int8 part
// on x with those columns zeroed, plus the float side product.
void MatmulWithOutliers(const KernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t m,
                        float* y) {
  const OutlierColumns& o = *w.outliers;
  const int64_t n = w.n_in, kc = static_cast<int64_t>(o.cols.size());
  CHECK(o.dense.n_in == kc && o.dense.n_out == w.n_out);
  thread_local std::vector<float> x_main, x_side, y_side;
  x_main.assign(x, x + m * n);
  x_side.resize(m * kc);
  y_side.resize(m * w.n_out);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < kc; ++j) {
      x_side[t * kc + j] = x_main[t * n + o.cols[j]];
      x_main[t * n + o.cols[j]] = 0.0f;
    }
  }
  WeightMatrix main = w;
  main.outliers = nullptr;
  const MatmulTarget tm{&main, y}, ts{&o.dense, y_side.data()};
  MatmulMany(k, pool, &tm, 1, x_main.data(), m);
  MatmulMany(k, pool, &ts, 1, x_side.data(), m);
  for (int64_t i = 0; i < m * w.n_out; ++i) y[i] += y_side[i];
}

}  // namespace

void MatmulMany(const KernelTable& k, ThreadPool& pool, const MatmulTarget* targets, int n, const float* x,
                int64_t m) {
  CHECK(n >= 1 && n <= kMaxMatmulTargets);
  if (m <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (targets[i].w->outliers == nullptr) continue;
    for (int j = 0; j < n; ++j) {  // (rare: one matrix at a time)
      if (targets[j].w->outliers != nullptr) {
        MatmulWithOutliers(k, pool, *targets[j].w, x, m, targets[j].y);
      } else {
        MatmulMany(k, pool, &targets[j], 1, x, m);
      }
    }
    return;
  }
  MatmulPart parts[kMaxMatmulTargets];
  std::unique_ptr<PackedMatrix> packed_here[kMaxMatmulTargets];
  // Per part: its activations' buffer (grows once; the owner thread's).
  thread_local std::vector<uint8_t> act_bufs[kMaxMatmulTargets];
  constexpr int64_t kUnit = PackedMatrix::kRows;  // 16 rows: threads never share an output cache line
  // With bf16 products: x rounded to bf16 once for every float matrix,
  // rows of ldxb (zeros past n_in).
  thread_local std::vector<uint16_t> xb_buf;
  const int64_t ldxb = RoundUpToBf16Step(targets[0].w->n_in);
  const uint16_t* xb = nullptr;
  thread_local std::vector<uint32_t> x2_buf;
  const uint32_t* x2 = nullptr;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    MatmulPart& p = parts[i];
    p.w = targets[i].w;
    p.y = targets[i].y;
    const WeightMatrix& w = *p.w;
    CHECK(w.n_in == targets[0].w->n_in);
    p.unit0 = total;
    if (w.n_out <= 0) continue;
    if (w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16) {
      if (k.matmul_bf16) {
        p.bf16_tile = k.Bf16TileFor(w.type);
        CHECK(p.bf16_tile != nullptr && k.bf16_tile_bf16 != nullptr && k.round_bf16 != nullptr &&
              k.row_to_bf16 != nullptr);
        if (xb == nullptr) {
          xb_buf.resize(static_cast<size_t>(m * ldxb));
          for (int64_t t = 0; t < m; ++t) {
            k.round_bf16(x + t * w.n_in, w.n_in, xb_buf.data() + t * ldxb);
            std::fill(xb_buf.data() + t * ldxb + w.n_in, xb_buf.data() + (t + 1) * ldxb, uint16_t{0});
          }
          xb = xb_buf.data();
          if (k.bf16_tile_rows != nullptr) {  // a tile unit's form: the pairs transposed too, rows of m
            CHECK(k.bf16_pairs != nullptr);
            x2_buf.resize(static_cast<size_t>(ldxb / 2 * m));
            k.bf16_pairs(xb, ldxb, m, w.n_in, x2_buf.data(), m);
            x2 = x2_buf.data();
          }
        }
      } else {
        p.tile = k.FloatTileFor(w.type);
        CHECK(p.tile != nullptr);
      }
      p.row_block = std::max<int64_t>(kUnit, kL2Weights / static_cast<int64_t>(w.row_bytes) / kUnit * kUnit);
      p.units = (w.n_out + kUnit - 1) / kUnit;
    } else {
      CHECK(k.qgemm != nullptr && k.quantize_token != nullptr && k.qgemm_row != nullptr);
      p.pm = w.packed;
      if (p.pm == nullptr) {  // tests, tools: pack on the fly (slow)
        packed_here[i] = std::make_unique<PackedMatrix>(PackedMatrix::Pack(w.type, w.data, w.row_bytes, w.n_in, w.n_out));
        p.pm = packed_here[i].get();
      }
      CHECK(p.pm->n_in() == w.n_in && p.pm->n_out() == w.n_out);
      // Matrices whose formats quantize activations alike share one copy.
      const PackFormat& f = p.pm->format();
      bool shared = false;
      for (int j = 0; j < i && !shared; ++j) {
        const PackedMatrix* o = parts[j].pm;
        if (o != nullptr && o->format().block == f.block && o->format().shift == f.shift &&
            o->format().row_scale == f.row_scale) {
          p.acts = parts[j].acts;
          shared = true;
        }
      }
      if (!shared) {
        ThreadPool* quantize_pool = k.ShouldSplit(pool.size(), m * w.n_in * int64_t{sizeof(float)}) ? &pool : nullptr;
        p.acts =
            QuantizeActs(x, m, w.n_in, w.n_in, f, &act_bufs[i], quantize_pool, k.quantize_token, k.quantize_token_row);
      }
      p.units = p.pm->n_groups();
    }
    total += p.units;
  }
  if (total == 0) return;
  auto run = [&](int64_t u0, int64_t u1) {
    for (int i = 0; i < n; ++i) {
      const MatmulPart& p = parts[i];
      const int64_t lo = std::max(u0, p.unit0) - p.unit0, hi = std::min(u1, p.unit0 + p.units) - p.unit0;
      if (lo >= hi) continue;
      if (p.tile != nullptr || p.bf16_tile != nullptr) {
        FloatRows(k, p, x, xb, ldxb, x2, m, lo * kUnit, std::min(hi * kUnit, p.w->n_out));
      } else {
        QuantGroups(k, p, m, lo, hi);
      }
    }
  };
  // The op's size: the weight bytes it reads (the packed copy's for
  // quantized matrices), once per token.
  int64_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    const MatmulPart& p = parts[i];
    bytes += p.pm != nullptr ? static_cast<int64_t>(p.pm->bytes()) : p.w->n_out * static_cast<int64_t>(p.w->row_bytes);
  }
  if (!k.ShouldSplit(pool.size(), bytes * m)) {
    run(0, total);
    return;
  }
  // Prefill-sized batches stream their tokens once per range of rows (float
  // rows: per row_block): a few large pieces; decode: the pool's small ones.
  const int pieces = m >= kCoarsePiecesTokens ? kCoarsePiecesPerThread : ThreadPool::kPiecesPerThread;
  pool.ParallelFor(total, 1, run, pieces);
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * scale);
}

void SiluMul(float* g, const float* u, int64_t n) { SiluMulGeneric(g, u, n); }

void GeluTanhMul(float* g, const float* u, int64_t n) { GeluTanhMulGeneric(g, u, n); }

void SoftCapInPlace(float* x, int64_t n, float cap) { SoftCapGeneric(x, n, cap); }

void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace infera
