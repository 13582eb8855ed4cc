// What the engine runs a step with: one forward pass over a flat batch of
// tokens from many sequences. The decoder (decoder.h) is the implementation
// for every supported family; engine tests plug in fakes, and a parallel
// rank or another device would plug in its own.
#pragma once

#include <memory>
#include <vector>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "infera/status.h"
#include "kernels/kernels.h"
#include "model/batch.h"
#include "model/model.h"

namespace infera {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Runs the batch, writing K/V of every token into `kv`, and the logits of
  // batch.logit_rows into logits [logit_rows.size(), n_vocab].
  virtual Status Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) = 0;
};

// The decoder runner for `model` (which, with `kernels` and `pool`, must
// outlive it), for sequences of up to n_ctx tokens (0: the trained context;
// LongRoPE picks its short or long factors by it).
std::unique_ptr<ModelRunner> MakeModelRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool,
                                             int n_ctx = 0);

}  // namespace infera
