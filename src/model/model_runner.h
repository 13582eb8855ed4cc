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
#include "parallel/communicator.h"

namespace infera {

struct LoraAdapter;  // model/lora.h

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Runs the batch, writing K/V of every token into `kv`, and the logits of
  // batch.logit_rows into logits [logit_rows.size(), n_vocab].
  virtual Status Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) = 0;
  // The final hidden states [batch.hidden_rows.size(), n_embd] of the last
  // Forward (on world rank 0 of a split model); valid until the next
  // Forward. A runner that cannot produce them fails a batch that asks.
  virtual const std::vector<float>& hidden() const {
    static const std::vector<float> kNone;  // (immutable)
    return kNone;
  }
};

// The communicators a shard of a split model (model.shard) runs with: all
// ranks, and the ranks of its stage's tensor-parallel group. Null for a
// whole model. Not owned.
struct ParallelComms {
  Communicator* world = nullptr;
  Communicator* tp = nullptr;
};

// The decoder runner for `model` (which, with `kernels` and `pool`, must
// outlive it), for sequences of up to n_ctx tokens (0: the trained context;
// LongRoPE picks its short or long factors by it). A shard of a split model
// runs its part and communicates through `comms` (which must outlive it):
// every rank of the model calls Forward with the same batch; world rank 0
// gets the logits, the others none. LoRA adapters come with each batch
// (ForwardBatch::lora_adapters; not on a split model).
std::unique_ptr<ModelRunner> MakeModelRunner(const Model& model, const KernelTable& kernels, ThreadPool& pool,
                                             int n_ctx = 0, ParallelComms comms = {});

}  // namespace infera
