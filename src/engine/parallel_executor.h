// Running a split model (model/shard.h) from the engine: world rank 0 owns
// the engine (scheduler, sampling, HTTP) and, every step, broadcasts the
// step's flat batch — the plain data the forward pass consumes — to the
// other ranks, which run their shard of the same forward pass in a worker
// loop. Ranks then meet inside the decoder's collectives; rank 0 gets the
// logits.
//
// Wire form of a step (one broadcast of a fixed header, one of the body):
// header {magic, kind, body bytes, KV slots, KV type}; body: the token,
// position and sequence arrays, the logit rows, and each sequence's KV slots
// as runs of consecutive slots (paged blocks make runs of a block or more).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <memory>
#include <vector>

#include "attention/kv_storage.h"
#include "infera/status.h"
#include "model/batch.h"
#include "model/model_runner.h"
#include "parallel/communicator.h"

namespace infera {

// A decoded step: the batch and the slot lists its seq_slots point into.
struct DecodedBatch {
  ForwardBatch batch;
  std::vector<std::vector<int32_t>> slots;
};

// The body of a step message, and back. Decoding checks every length and
// index (a bad message is an error, never a crash).
std::vector<uint8_t> EncodeBatch(const ForwardBatch& b);
Status DecodeBatch(const uint8_t* data, size_t n, DecodedBatch* out);

// One rank's totals since it started: steps, seconds in Forward (compute
// and communication), seconds and bytes in communication.
struct RankStats {
  double steps = 0, step_seconds = 0, comm_seconds = 0, bytes_sent = 0, bytes_received = 0;
};

// What rank 0's runner tells other threads (a watchdog, metrics): when the
// step in flight started (steady clock, ns; 0: none), whether the group
// failed, and every rank's totals as of the last step.
struct StepMonitor {
  std::atomic<int64_t> step_started_ns{0};
  std::atomic<bool> broken{false};
  mutable std::mutex mu;
  std::vector<RankStats> ranks;  // [world size], guarded by mu
};

// Rank 0's runner: broadcasts each batch (and the KV geometry, so workers
// size their caches alike), then runs rank 0's shard through `local`.
// After a communication error the group is unusable: every later Forward
// fails at once with Unavailable (no step waits on a dead rank twice).
// `world` must outlive the runner.
class BroadcastingRunner : public ModelRunner {
 public:
  // n_ctx: the context `local` was made for (workers make theirs alike).
  // monitor (may be null) and tp (this rank's tensor-parallel group, for
  // its statistics; may be null) must outlive the runner.
  BroadcastingRunner(std::unique_ptr<ModelRunner> local, Communicator& world, int32_t n_ctx,
                     StepMonitor* monitor = nullptr, const Communicator* tp = nullptr);
  Status Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) override;
  const std::vector<float>& hidden() const override { return local_->hidden(); }
  bool broken() const { return broken_; }

 private:
  std::unique_ptr<ModelRunner> local_;
  Communicator& world_;
  int32_t n_ctx_;
  StepMonitor* monitor_;
  const Communicator* tp_;
  RankStats mine_;
  std::vector<uint8_t> body_;
  bool broken_ = false;
};

// Rank 0: tells the workers to leave their loops (collective with them).
Status StopWorkers(Communicator& world);

// Ranks 1..N-1: runs this rank's shard on every step rank 0 broadcasts,
// with a runner from make_runner(n_ctx) for the step's context and a KV
// cache of the step's geometry (kv_heads: this shard's per layer, head_dim
// wide), until StopWorkers. Returns the first communication error (the
// group is then unusable) or Ok after a stop. A forward error that is not a
// communication error (a bad batch) is logged and the loop goes on, as rank
// 0's engine does.
using RunnerForContext = std::function<std::unique_ptr<ModelRunner>(int32_t n_ctx)>;
// tp: this rank's tensor-parallel group (for its statistics; may be null).
Status RunWorkerLoop(const RunnerForContext& make_runner, Communicator& world, const Communicator* tp,
                     const std::vector<int>& kv_heads, int head_dim);

}  // namespace infera
