#include "tools/model_writer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "base/thread_pool.h"

#include "base/logging.h"
#include "formats/gguf_writer.h"
#include "model/random_model.h"
#include "model/tensor_schema.h"
#include "quant/quantize.h"
#include "tensor/quant_blocks.h"

namespace infera::cli {
namespace {

// Rows of m re-encoded as `to` (through f32), weighted by `importance`
// ([n_in], or [n_stack * n_in]: one slice per stacked matrix; empty: none).
// Rows are independent: split them over all cores (the K-quant searches are
// slow). Each output row depends only on its input row, so the bytes do not
// depend on the thread count. Into a block type, a NaN or infinite input
// weight is an error (the formats cannot hold it, and their searches assume
// finite values): the first such row, or -1, in *bad_row.
std::vector<uint8_t> Recode(const WeightMatrix& m, DType to, const std::vector<float>& importance, int64_t n_stack,
                            int64_t* bad_row) {
  const uint64_t out_row = *RowBytes(to, m.n_in);
  std::vector<uint8_t> out(out_row * m.n_out);
  std::atomic<int64_t> first_bad{INT64_MAX};
  const bool quantized = GetDTypeInfo(to).quantized;
  auto run = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(m.n_in);
    for (int64_t r = r0; r < r1; ++r) {
      DequantizeRow(m.type, m.data + r * m.row_bytes, row.data(), m.n_in);
      if (quantized && !std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); })) {
        int64_t cur = first_bad.load();
        while (r < cur && !first_bad.compare_exchange_weak(cur, r)) {
        }
        return;
      }
      const float* qw = nullptr;
      if (!importance.empty()) {
        const int64_t slice = n_stack > 0 ? r / (m.n_out / n_stack) : 0;
        qw = importance.data() + slice * m.n_in;
      }
      QuantizeRow(to, row.data(), out.data() + r * out_row, m.n_in, qw);
    }
  };
  const int64_t n_threads = std::min<int64_t>(ThreadPool::DefaultThreadCount(), std::max<int64_t>(1, m.n_out / 64));
  std::vector<std::thread> threads;
  const int64_t per = (m.n_out + n_threads - 1) / n_threads;
  for (int64_t t = 1; t < n_threads; ++t) threads.emplace_back(run, std::min(m.n_out, t * per), std::min(m.n_out, (t + 1) * per));
  run(0, std::min(m.n_out, per));
  for (auto& th : threads) th.join();
  *bad_row = first_bad.load() == INT64_MAX ? -1 : first_bad.load();
  return out;
}

}  // namespace

StatusOr<ModelWriteSummary> WriteModelGguf(const LoadedModel& lm, const TypeChooser& choose,
                                           const ModelWriteOptions& opts, const std::string& path) {
  const Model& m = *lm.model;
  const ModelConfig& c = m.config;
  const auto& w = *m.weights;
  GgufWriter gw;
  if (m.gguf) {
    for (const auto& [k, v] : m.gguf->metadata()) {
      if (k != "general.alignment") gw.SetValue(k, v);
    }
  }
  WriteModelMetadata(c, opts.file_type, &gw);
  gw.SetU32("general.file_type", opts.llama_ftype.value_or(LlamaFileType(opts.file_type)));
  if (GetDTypeInfo(opts.file_type).quantized) gw.SetU32("general.quantization_version", 2);
  if (opts.embed_tokenizer) {
    if (lm.tokenizer && std::string(lm.tokenizer->GgufModelName()) == "llama") {
      WriteTokenizerMetadata(lm.tokenizer->vocab(), &gw);
    } else if (lm.tokenizer) {
      LOG_WARN("byte-level BPE tokenizers are not embedded yet: the output has no tokenizer metadata");
    } else {
      LOG_WARN("no tokenizer: the output has no tokenizer metadata (pass --tokenizer)");
    }
  }
  if (opts.extra_metadata) opts.extra_metadata(&gw);
  ModelWriteSummary sum;
  int total = 0;  // matrices, for the progress display
  ForEachTensor(c, [&](const TensorRole& r, int) { total += r.matrix ? 1 : 0; });
  int done = 0;
  const bool tty = isatty(fileno(stderr)) != 0;
  // `n_stack` > 0: x holds that many matrices, written as one 3-D tensor.
  auto mat = [&](const std::string& name, const WeightMatrix& x, int64_t n_stack = 0) -> Status {
    if (x.outliers != nullptr) {
      return Unimplemented(name + ": has W8A8 outlier columns; write it from the float model instead");
    }
    DType to = choose(name, x);
    if (!RowBytes(to, x.n_in)) to = DType::kF16;  // row not a whole number of blocks
    if (!CanQuantize(to)) return Unimplemented(std::string("cannot write type ") + DTypeName(to));
    std::vector<int64_t> ne = {x.n_in, x.n_out};
    if (n_stack > 0) ne = {x.n_in, x.n_out / n_stack, n_stack};
    const std::vector<uint8_t>* pre = opts.encoded ? opts.encoded(name) : nullptr;
    if (pre != nullptr) {
      if (pre->size() != *RowBytes(to, x.n_in) * x.n_out) return Internal(name + ": encoded blocks of the wrong size");
      gw.AddTensor(name, to, ne, pre->data(), pre->size());
    } else if (to == x.type) {
      gw.AddTensor(name, x.type, ne, x.data, x.row_bytes * x.n_out);
    } else {
      std::vector<float> importance;
      if (opts.importance) importance = opts.importance(name);
      if (!importance.empty() && importance.size() != static_cast<size_t>(x.n_in * std::max<int64_t>(1, n_stack))) {
        return InvalidArgument(fmt::format("{}: importance data has {} values, the tensor needs {}", name,
                                           importance.size(), x.n_in * std::max<int64_t>(1, n_stack)));
      }
      int64_t bad_row = -1;
      std::vector<uint8_t> bytes = Recode(x, to, importance, n_stack, &bad_row);
      if (bad_row >= 0) {
        return InvalidArgument(fmt::format("{}: row {} holds a NaN or infinite weight; refusing to quantize it",
                                           name, bad_row));
      }
      gw.AddTensorCopy(name, to, ne, std::move(bytes));
    }
    sum.bytes += *RowBytes(to, x.n_in) * x.n_out;
    sum.elements += static_cast<uint64_t>(x.n_in) * x.n_out;
    sum.tensors_per_type[DTypeName(to)]++;
    if (opts.show_progress) {
      ++done;
      if (tty) {
        const int width = 30, fill = done * width / total;
        std::fprintf(stderr, "\r[%s%s] %d/%d %-28s %s", std::string(fill, '#').c_str(),
                     std::string(width - fill, '-').c_str(), done, total, name.c_str(), DTypeName(to));
        std::fflush(stderr);
      } else if (done * 10 / total != (done - 1) * 10 / total) {
        // Not a terminal (a log): one line per 10 %.
        std::fprintf(stderr, "quantize: %d/%d tensors\n", done, total);
      }
    }
    return Status::Ok();
  };
  auto vec = [&](const std::string& name, const std::vector<float>& v) {
    gw.AddTensor(name, DType::kF32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * 4);
    sum.bytes += v.size() * 4;
    sum.elements += v.size();
    sum.tensors_per_type["f32"]++;
  };
  Status st;
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (!st.ok()) return;
    const std::string name = GgufTensorName(r, layer);
    if (!r.parts.empty() || IsExpertRole(r)) {
      // A fused tensor or stacked experts: the parts are views of
      // consecutive rows of one tensor (see BuildWeights); write them back
      // as that tensor.
      const auto parts = RoleLayerMatrices(r, w.layers[layer]);
      WeightMatrix whole = *parts[0];
      whole.n_out = 0;
      for (const WeightMatrix* p : parts) {
        if (p->type != whole.type || p->data != whole.data + whole.n_out * whole.row_bytes) {
          st = Internal(name + ": the parts of a fused tensor are not contiguous");
          return;
        }
        whole.n_out += p->n_out;
      }
      st = mat(name, whole, IsExpertRole(r) ? static_cast<int64_t>(parts.size()) : 0);
    } else if (r.matrix) {
      st = mat(name, *RoleMatrix(r, layer, w));
    } else if (const std::vector<float>& v = *RoleVector(r, layer, w); !v.empty()) {
      vec(name, v);  // (an optional vector the model does not have is empty)
    }
  });
  RETURN_IF_ERROR(st);
  if (opts.extra_tensors) opts.extra_tensors(&gw);
  if (opts.show_progress && tty) std::fputc('\n', stderr);
  RETURN_IF_ERROR(gw.Write(path));
  return sum;
}

}  // namespace infera::cli
