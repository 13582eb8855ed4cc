#include "model/bf16_weights.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "model/tensor_schema.h"

namespace infera {

int StoreFloatMatricesAsBf16(const ModelConfig& c, RowToBf16Fn to_bf16,
                             const std::function<void(const uint8_t*, size_t)>& release, ModelWeights* w) {
  CHECK(to_bf16 != nullptr);
  std::vector<WeightMatrix*> todo;
  auto add = [&](WeightMatrix* m) {  // (another stage's matrices are empty)
    if (m->data != nullptr && m->outliers == nullptr && (m->type == DType::kF32 || m->type == DType::kF16)) {
      todo.push_back(m);
    }
  };
  add(&w->output);
  ForEachTensor(c, [&](const TensorRole& r, int layer) {
    if (r.per_layer && r.matrix) {
      for (WeightMatrix* m : RoleLayerMatrices(r, &w->layers[layer])) add(m);
    }
  });
  if (todo.empty()) return 0;
  // Buffers first (the deque is not thread-safe), then the rows on all
  // cores, each source released as soon as its copy exists.
  std::vector<std::vector<uint8_t>*> out(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    w->owned.emplace_back(static_cast<size_t>(todo[i]->n_out * todo[i]->n_in) * 2);
    out[i] = &w->owned.back();
  }
  ThreadPool pool(std::max(1, std::min<int>(ThreadPool::DefaultThreadCount(), static_cast<int>(todo.size()))));
  pool.ParallelFor(static_cast<int64_t>(todo.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const WeightMatrix& m = *todo[i];
      uint16_t* dst = reinterpret_cast<uint16_t*>(out[i]->data());
      for (int64_t r = 0; r < m.n_out; ++r) to_bf16(m.type, m.data + r * m.row_bytes, m.n_in, dst + r * m.n_in);
      if (release) release(m.data, m.row_bytes * m.n_out);
    }
  });
  // A source that is a whole buffer of owned (a shard's column copy, a
  // converted tensor) is not read again, unless lookups read it: freed.
  for (size_t i = 0; i < todo.size(); ++i) {
    WeightMatrix& m = *todo[i];
    w->packed_source_bytes += m.row_bytes * m.n_out;
    w->packed_bytes += out[i]->size();
    for (std::vector<uint8_t>& buf : w->owned) {
      if (!buf.empty() && buf.data() == m.data && buf.size() == m.row_bytes * m.n_out && m.data != w->tok_embd.data) {
        std::vector<uint8_t>().swap(buf);
        break;
      }
    }
    m.type = DType::kBF16;
    m.data = out[i]->data();
    m.row_bytes = static_cast<size_t>(m.n_in) * 2;
  }
  return static_cast<int>(todo.size());
}

}  // namespace infera
