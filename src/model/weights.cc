#include "model/weights.h"

#include <atomic>
#include <map>
#include <thread>

#include <cstring>

#include <fmt/format.h>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "model/shard.h"
#include "model/tensor_schema.h"
#include "tensor/fp16.h"
#include "tensor/quant_blocks.h"

namespace infera {

namespace {
std::string OutlierTensorBase(const std::string& weight_name) {
  return weight_name.ends_with(".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}
}  // namespace

std::string OutlierColsTensorName(const std::string& weight_name) {
  return OutlierTensorBase(weight_name) + ".outlier_cols";
}
std::string OutlierWeightTensorName(const std::string& weight_name) {
  return OutlierTensorBase(weight_name) + ".outlier_weight";
}

StatusOr<std::vector<float>> ToF32(const TensorView& t) {
  const int64_t n = t.NumElements();
  std::vector<float> out(n);
  switch (t.type) {
    case DType::kF32: std::memcpy(out.data(), t.data, n * 4); break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); out[i] = Fp16ToFp32(h); }
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); out[i] = Bf16ToFp32(h); }
      break;
    default:
      return Unimplemented(fmt::format("tensor '{}' has type {}; expected f32, f16 or bf16", t.name, DTypeName(t.type)));
  }
  return out;
}

void PermuteRowsHfToGguf(const uint8_t* src, uint8_t* dst, int n_heads, int head_dim, size_t row_bytes) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    for (int part = 0; part < 2; ++part) {
      for (int i = 0; i < half; ++i) {
        const size_t from = static_cast<size_t>(h) * head_dim + part * half + i;
        const size_t to = static_cast<size_t>(h) * head_dim + 2 * i + part;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
}

namespace {

// Q8_0 matrices with at least this fraction of zeros are packed by masks
// (bench/prune_speed.sh; docs/pruning.md): below it the dense layout decodes
// as fast.
constexpr double kMaskMinZeros = 0.5;

// Rows [first, first + n) of `m` as a matrix of their own (no copy).
WeightMatrix RowView(const WeightMatrix& m, int64_t first, int64_t n) {
  WeightMatrix v = m;
  v.n_out = n;
  v.data = m.data + first * m.row_bytes;
  return v;
}

class Builder {
 public:
  Builder(const ModelConfig& c, const TensorLookup& lookup, const WeightLoadOptions& opts,
          const std::string& source, ModelWeights* w)
      : c_(c), lookup_(lookup), opts_(opts), source_(source), w_(w) {}

  Status Get(const std::string& name, std::vector<int64_t> ne, const TensorView** out) {
    const TensorView* t = lookup_(name);
    if (t == nullptr) return DataLoss(source_ + ": missing required tensor '" + name + "'");
    // Trailing dimensions of 1 do not count ({n, 1} is {n}), as in llama.cpp.
    auto trimmed = [](std::vector<int64_t> v) {
      while (v.size() > 1 && v.back() == 1) v.pop_back();
      return v;
    };
    if (trimmed(t->ne) != trimmed(ne)) {
      TensorView want;
      want.ne = ne;
      return DataLoss(fmt::format("{}: tensor '{}' has shape {} but the config implies {}", source_, name,
                                  t->ShapeString(), want.ShapeString()));
    }
    *out = t;
    return Status::Ok();
  }

  // `permute_heads` > 0: permute rows HF -> GGUF with that many heads (of
  // the rows kept). `shape`: the GGUF shape when not {n_in, n_out} (stacked
  // experts). `rows` / `cols`: the part kept (default: all); rows are a
  // view, columns a copy (whole quantization blocks).
  // `allow_outliers`: a plain layer matrix, which may have W8A8 outlier
  // columns (Outliers).
  Status Matrix(const std::string& name, int64_t n_in, int64_t n_out, WeightMatrix* m, int permute_heads = 0,
                std::vector<int64_t> shape = {}, IndexRange rows = {}, IndexRange cols = {},
                bool allow_outliers = false) {
    const TensorView* t;
    RETURN_IF_ERROR(Get(name, shape.empty() ? std::vector<int64_t>{n_in, n_out} : shape, &t));
    if (!IsSupportedWeightType(t->type)) {
      return Unimplemented(fmt::format("{}: tensor '{}' has type {}, which this build cannot run yet",
                                       source_, name, DTypeName(t->type)));
    }
    if (rows.size() == 0) rows = {0, n_out};
    if (cols.size() == 0) cols = {0, n_in};
    if (t->type == DType::kW8A8) {  // untrusted: the kernels assume one scale per row
      if (n_in > kW8A8MaxRow) {
        return DataLoss(fmt::format("{}: w8a8 tensor '{}' has rows of {} elements (at most {})", source_, name, n_in,
                                    kW8A8MaxRow));
      }
      const size_t row_bytes = *RowBytes(t->type, n_in);
      const int64_t bad = FirstW8A8RowWithMixedScales(t->data, row_bytes, n_in, t->nbytes / row_bytes);
      if (bad >= 0) {
        return DataLoss(fmt::format("{}: w8a8 tensor '{}' row {} has more than one scale", source_, name, bad));
      }
      RETURN_IF_ERROR(Outliers(name, n_in, n_out, rows, cols, allow_outliers && permute_heads == 0, m));
    }
    m->type = t->type;
    m->n_in = cols.size();
    m->n_out = rows.size();
    m->row_bytes = *RowBytes(t->type, n_in);
    m->data = t->data;
    uint64_t bytes = t->nbytes;
    if (cols.size() != n_in) {  // every row's columns [begin, end) into a buffer
      const int64_t block = GetDTypeInfo(t->type).block_size;
      if (cols.begin % block != 0 || cols.end % block != 0) {
        return Internal(fmt::format("{}: columns {}-{} of '{}' straddle its quantization blocks", source_, cols.begin,
                                    cols.end, name));
      }
      const size_t all_rows = t->nbytes / m->row_bytes, skip = *RowBytes(t->type, cols.begin);
      const size_t kept = *RowBytes(t->type, cols.size());
      auto& buf = w_->owned.emplace_back(all_rows * kept);
      for (size_t r = 0; r < all_rows; ++r) std::memcpy(&buf[r * kept], t->data + r * m->row_bytes + skip, kept);
      // The copy touched every page of the tensor; this rank never reads it
      // again (a file mapping drops the pages).
      if (opts_.release_source) opts_.release_source(t->data, t->nbytes);
      m->data = buf.data();
      column_copies_.push_back(&buf);
      m->row_bytes = kept;
      bytes = buf.size();
    }
    if (rows.size() != n_out) {
      m->data += rows.begin * m->row_bytes;
      bytes = rows.size() * m->row_bytes;
    }
    if (permute_heads > 0) {
      auto& buf = w_->owned.emplace_back(m->n_out * m->row_bytes);
      PermuteRowsHfToGguf(m->data, buf.data(), permute_heads, static_cast<int>(m->n_out / permute_heads),
                          m->row_bytes);
      m->data = buf.data();
    }
    w_->total_bytes += bytes;
    return Status::Ok();
  }

  // A W8A8 matrix's optional outlier columns: NAME.outlier_cols (I32 [k],
  // sorted, distinct, < n_in) and NAME.outlier_weight (F16 [k, n_out]), NAME
  // without its ".weight". Sets m->outliers when present.
  Status Outliers(const std::string& name, int64_t n_in, int64_t n_out, IndexRange rows, IndexRange cols,
                  bool allowed, WeightMatrix* m) {
    const std::string ci_name = OutlierColsTensorName(name), cw_name = OutlierWeightTensorName(name);
    const TensorView* ci = lookup_(ci_name);
    const TensorView* cw = lookup_(cw_name);
    if (ci == nullptr && cw == nullptr) return Status::Ok();
    if (ci == nullptr || cw == nullptr) {
      return DataLoss(fmt::format("{}: '{}' has only one of its .outlier_cols and .outlier_weight tensors", source_,
                                  name));
    }
    if (!allowed) {
      return Unimplemented(fmt::format("{}: '{}' has outlier columns, supported on unfused layer matrices only",
                                       source_, name));
    }
    if (rows.size() != n_out || cols.size() != n_in) {
      return Unimplemented(fmt::format("{}: '{}' has outlier columns, which a --tp / --pp shard cannot split yet",
                                       source_, name));
    }
    const int64_t k = ci->NumElements();
    if (ci->type != DType::kI32 || ci->ne.size() != 1 || k < 1 || k > n_in) {
      return DataLoss(fmt::format("{}: '{}' must be i32 [1..{}]", source_, ci_name, n_in));
    }
    OutlierColumns& o = w_->outlier_columns.emplace_back();
    o.cols.resize(k);
    std::memcpy(o.cols.data(), ci->data, k * 4);
    for (int64_t j = 0; j < k; ++j) {
      if (o.cols[j] < 0 || o.cols[j] >= n_in || (j > 0 && o.cols[j] <= o.cols[j - 1])) {
        return DataLoss(fmt::format("{}: '{}' must be increasing columns below {}", source_, ci_name, n_in));
      }
    }
    const auto cw_ne = cw->ne;
    if (cw->type != DType::kF16 || cw_ne.size() != 2 || cw_ne[0] != k || cw_ne[1] != n_out) {
      return DataLoss(fmt::format("{}: '{}' must be f16 [{}, {}]", source_, cw_name, k, n_out));
    }
    o.dense = WeightMatrix{DType::kF16, k, n_out, cw->data, static_cast<size_t>(k) * 2};
    m->outliers = &o;
    w_->total_bytes += cw->nbytes + ci->nbytes;
    return Status::Ok();
  }

  // `part`: the elements kept (default: all), before any permutation.
  Status Vector(const std::string& name, int64_t n, std::vector<float>* v, int permute_heads = 0,
                IndexRange part = {}) {
    const TensorView* t;
    RETURN_IF_ERROR(Get(name, {n}, &t));
    auto f32 = ToF32(*t);
    if (!f32.ok()) return f32.status().WithPrefix(source_);
    *v = std::move(f32).value();
    if (part.size() != 0 && part.size() != n) {
      *v = std::vector<float>(v->begin() + part.begin, v->begin() + part.end);
      n = part.size();
    }
    if (permute_heads > 0) {
      std::vector<float> p(v->size());
      PermuteRowsHfToGguf(reinterpret_cast<const uint8_t*>(v->data()), reinterpret_cast<uint8_t*>(p.data()),
                          permute_heads, static_cast<int>(n / permute_heads), sizeof(float));
      *v = std::move(p);
    }
    w_->total_bytes += t->nbytes * v->size() / std::max<int64_t>(1, t->NumElements());
    return Status::Ok();
  }

  // The part of dimension d of `layer` this load keeps.
  IndexRange Part(Dim d, int layer) const {
    return opts_.shard != nullptr ? opts_.shard->DimRange(c_, d, layer) : IndexRange{0, DimSize(c_, d, layer)};
  }

  Status Build() {
    // HF rows of Q/K (weights and biases) into GGUF's rotary pair order.
    const bool perm = opts_.permute_qk_from_hf && c_.rope_style == RopeStyle::kNorm;
    w_->layers.resize(c_.n_layer);
    Status st;
    const ShardSpec* shard = opts_.shard;
    ForEachTensor(c_, [&](const TensorRole& r, int layer) {
      if (!st.ok()) return;
      if (shard != nullptr) {  // another stage's layers and output
        if (r.per_layer && !shard->OwnsLayer(layer)) return;
        if (!shard->last_stage() && (r.model_matrix == &ModelWeights::output ||
                                     r.model_vector == &ModelWeights::output_norm)) {
          return;
        }
      }
      const std::string name = GgufTensorName(r, layer);
      if (r.presence == Presence::kOptional && lookup_(name) == nullptr) return;
      const IndexRange rows = r.matrix ? Part(r.n_out, layer) : IndexRange{};
      // A whole attention output: its columns are not split.
      const bool whole_cols = shard != nullptr && r.layer_matrix == &LayerWeights::wo && shard->wo_whole[layer];
      const IndexRange cols = whole_cols ? IndexRange{} : Part(r.n_in, layer);
      // Heads of the rows kept (HF's rotary rows are permuted per head).
      const int heads = !perm                            ? 0
                        : r.permute == Permute::kQHeads  ? static_cast<int>(Part(Dim::kQ, layer).size() / c_.head_dim)
                        : r.permute == Permute::kKvHeads ? static_cast<int>(Part(Dim::kKv, layer).size() / c_.head_dim)
                                                         : 0;
      if (IsExpertRole(r)) {  // stacked experts: each a view of its slice
        const int64_t rows_all = DimSize(c_, r.n_out, layer), n_in = DimSize(c_, r.n_in, layer);
        auto& experts = w_->layers[layer].*r.layer_experts;
        if (lookup_(name) == nullptr && r.gguf_per_expert != nullptr) {
          // An older file: one tensor per expert, each read in place.
          if (lookup_(GgufExpertTensorName(r, layer, 0)) != nullptr) {
            experts.assign(c_.n_expert, WeightMatrix{});
            for (int e = 0; e < c_.n_expert && st.ok(); ++e) {
              st = Matrix(GgufExpertTensorName(r, layer, e), n_in, rows_all, &experts[e], 0, {}, rows, cols);
            }
            return;
          }
        }
        WeightMatrix whole;
        st = Matrix(name, n_in, rows_all * c_.n_expert, &whole, 0, {n_in, rows_all, c_.n_expert}, {}, cols);
        experts.clear();
        for (int e = 0; e < c_.n_expert; ++e) experts.push_back(RowView(whole, e * rows_all + rows.begin, rows.size()));
        if (rows.size() != rows_all) w_->total_bytes -= (rows_all - rows.size()) * c_.n_expert * whole.row_bytes;
        return;
      }
      if (!r.parts.empty()) {  // fused: each part a view of its rows
        WeightMatrix whole;
        st = Matrix(name, DimSize(c_, r.n_in, layer), RoleRows(r, c_, layer), &whole, 0, {}, {}, cols);
        int64_t row = 0, kept = 0;
        for (const FusedPart& p : r.parts) {
          const IndexRange part = Part(p.rows, layer);
          w_->layers[layer].*p.dest = RowView(whole, row + part.begin, part.size());
          row += DimSize(c_, p.rows, layer);
          kept += part.size();
        }
        w_->total_bytes -= (row - kept) * whole.row_bytes;
        return;
      }
      if (r.matrix) {
        st = Matrix(name, DimSize(c_, r.n_in, layer), DimSize(c_, r.n_out, layer), RoleMatrix(r, layer, w_), heads, {},
                    rows, cols, /*allow_outliers=*/r.per_layer);
        return;
      }
      std::vector<float>* v = RoleVector(r, layer, w_);
      st = Vector(name, DimSize(c_, r.n_in, layer), v, heads, Part(r.n_in, layer));
      if (st.ok() && r.norm && opts_.norm_plus_one) {
        for (float& x : *v) x += 1.0f;
      }
    });
    RETURN_IF_ERROR(st);
    if (c_.tied_embeddings && (shard == nullptr || shard->last_stage())) w_->output = w_->tok_embd;
    if (shard != nullptr && shard->last_stage() && shard->vocab.size() != c_.n_vocab) {
      // Vocabulary-parallel logits: this rank's rows of the output.
      if (!c_.tied_embeddings) w_->total_bytes -= (c_.n_vocab - shard->vocab.size()) * w_->output.row_bytes;
      w_->output = RowView(w_->output, shard->vocab.begin, shard->vocab.size());
    }
    if (w_->rope_freq_factors.empty() && c_.rope_scaling.type == RopeScaling::Type::kLlama3) {
      w_->rope_freq_factors = Llama3RopeFreqFactors(c_);
    }
    if (c_.rope_scaling.type == RopeScaling::Type::kLongRope) {
      if (w_->rope_factors_long.empty()) w_->rope_factors_long = c_.rope_scaling.long_factors;
      if (w_->rope_factors_short.empty()) w_->rope_factors_short = c_.rope_scaling.short_factors;
      if (w_->rope_factors_long.empty() || w_->rope_factors_short.empty()) {
        return DataLoss(source_ + ": LongRoPE needs both rope_factors_long and rope_factors_short");
      }
    }
    PackQuantized();
    return Status::Ok();
  }

  // Repacks every quantized matrix used in a matmul (not an untied token
  // embedding, which is only looked up by row) for the integer kernels, on
  // all cores.
  void PackQuantized() {
    std::vector<WeightMatrix*> todo;
    auto add = [&](WeightMatrix* m) {  // (another stage's matrices are empty)
      if (m->data != nullptr && GetPackFormat(m->type).supported) todo.push_back(m);
    };
    add(&w_->output);
    ForEachTensor(c_, [&](const TensorRole& r, int layer) {
      if (r.per_layer && r.matrix) {
        for (WeightMatrix* m : RoleLayerMatrices(r, &w_->layers[layer])) add(m);
      }
    });
    if (todo.empty()) return;
    w_->packed.resize(todo.size());
    // A shard's column copy is not read again once packed: each is freed as
    // soon as its packed copy exists (the matrix then has only that; data
    // becomes null).
    std::map<const uint8_t*, std::vector<uint8_t>*> copy_of;
    for (std::vector<uint8_t>* c : column_copies_) copy_of[c->data()] = c;
    std::vector<char> freed(todo.size(), 0);
    std::atomic<size_t> next{0};
    // 2:4 sparse Q8_0 matrices (or Q8_0_S24 ones) take the 2:4 layout where
    // a kernel skips their zeros (AVX-512 VNNI); Q8_0 matrices with at least
    // kMaskMinZeros zeros the sparse-mask layout (AVX-512 VBMI2 + VNNI);
    // everything else, and everything elsewhere (or for kernels of a lower
    // ISA than AVX-512: opts.kernel_isa), is dense.
    const CpuFeatures cpu = DetectCpuFeatures();
    const bool vnni = cpu.avx512vnni && static_cast<int>(opts_.kernel_isa) >= static_cast<int>(CpuIsa::kAvx512);
    std::atomic<int> n_sparse{0}, n_mask{0};
    auto layout_of = [&](const WeightMatrix& m) {
      if (vnni && PackedMatrix::IsSparse24(m.type, m.data, m.row_bytes, m.n_in, m.n_out)) {
        return SparseLayout::k24;
      }
      if (vnni && cpu.avx512vbmi2 &&
          PackedMatrix::ZeroFraction(m.type, m.data, m.row_bytes, m.n_in, m.n_out) >= kMaskMinZeros) {
        return SparseLayout::kMask;
      }
      return SparseLayout::kDense;
    };
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        const WeightMatrix& m = *todo[i];
        const SparseLayout sparse = layout_of(m);
        n_sparse += sparse == SparseLayout::k24;
        n_mask += sparse == SparseLayout::kMask;
        w_->packed[i] = std::make_unique<PackedMatrix>(
            PackedMatrix::Pack(m.type, m.data, m.row_bytes, m.n_in, m.n_out, sparse));
        // At once, so the peak holds little more than the packed copy.
        if (opts_.release_source) opts_.release_source(m.data, m.row_bytes * m.n_out);
        if (auto it = copy_of.find(m.data); it != copy_of.end()) {
          std::vector<uint8_t>().swap(*it->second);
          freed[i] = 1;
        }
      }
    };
    const int n_threads = std::max(1, std::min<int>(ThreadPool::DefaultThreadCount(), static_cast<int>(todo.size())));
    std::vector<std::thread> threads;
    for (int t = 1; t < n_threads; ++t) threads.emplace_back(work);
    work();
    for (auto& th : threads) th.join();
    if (n_sparse > 0) LOG_INFO("{} of {} quantized matrices are 2:4 sparse: packed to skip their zeros", n_sparse.load(), todo.size());
    if (n_mask > 0) {
      LOG_INFO("{} of {} quantized matrices are at least {:.0f} % zeros: packed by masks to skip them", n_mask.load(),
               todo.size(), 100 * kMaskMinZeros);
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      todo[i]->packed = w_->packed[i].get();
      if (freed[i]) todo[i]->data = nullptr;
      w_->packed_bytes += w_->packed[i]->bytes();
      w_->packed_source_bytes += todo[i]->row_bytes * todo[i]->n_out;
    }
  }

 private:
  const ModelConfig& c_;
  const TensorLookup& lookup_;
  const WeightLoadOptions& opts_;
  const std::string& source_;
  ModelWeights* w_;
  std::vector<std::vector<uint8_t>*> column_copies_;  // in w_->owned
};

}  // namespace

StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& c, const TensorLookup& lookup,
                                                     const WeightLoadOptions& opts, const std::string& source) {
  auto w = std::make_unique<ModelWeights>();
  Builder b(c, lookup, opts, source, w.get());
  RETURN_IF_ERROR(b.Build());
  return w;
}

}  // namespace infera
