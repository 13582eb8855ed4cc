// The engine on its own loop thread, for servers: any thread may submit,
// cancel or read stats, and none of these waits for a step: submissions and
// cancellations are queued and taken in by the loop before its next step.
// Outputs are delivered through per-request callbacks called on the loop
// thread (they must not block: hand the data to the connection's own queue).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "infera/engine.h"

namespace infera {

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;

  // `model`, `tokenizer` and `kernels` must outlive the engine.
  // make_runner: as Engine::Create's (empty: the model's decoder).
  static StatusOr<std::unique_ptr<AsyncEngine>> Create(const Model& model, const Tokenizer* tokenizer,
                                                       const KernelTable& kernels, const EngineOptions& opts,
                                                       const ModelRunnerFactory& make_runner = {});
  // Cancels whatever is left and stops the loop.
  ~AsyncEngine();

  // Queues a request; errors (bad parameters, can never fit, draining) come
  // back here, synchronously. The callback sees every output of the request,
  // the last one with finished = true. The id is this object's own (not the
  // Engine's).
  StatusOr<uint64_t> Submit(std::vector<int32_t> prompt, const RequestParams& params, Callback on_output);
  // Ends a request within one step (its KV blocks are freed then).
  void Cancel(uint64_t id);
  // Runs `task` on the loop thread before its next step (operator actions
  // on the engine: sessions). Tasks posted after the loop stopped never run.
  void Post(std::function<void(Engine&)> task);
  // The stats as of the last step (plus submissions since).
  EngineStats Stats() const;
  int32_t max_model_len() const { return max_model_len_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t max_num_seqs() const { return max_num_seqs_; }
  // Called on the loop thread after every step that computed tokens, with
  // the stats after it. Set before the first Submit; must not block.
  void SetStepObserver(std::function<void(const EngineStats&)> fn) { step_observer_ = std::move(fn); }
  // Stops accepting requests and waits up to `timeout` for those in flight
  // to finish; the rest are cancelled. Returns true if all finished in time.
  bool Drain(std::chrono::milliseconds timeout);
  // The engine cannot go on (a split model's group failed; the loop may be
  // stuck inside a step for good): refuses new requests and ends every
  // request in flight now, from the calling thread, with an error output
  // (error_code kUnavailable, `why`). Their callbacks are never called
  // again. Any thread; returns how many were ended. The process should exit
  // soon after: the loop thread cannot be joined if it is stuck.
  int Abandon(const std::string& why);

 private:
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  void Loop();
  // Takes in queued submissions and cancellations (loop thread).
  void Intake(std::vector<std::pair<Callback, RequestOutput>>* deliveries);
  // Nothing queued, nothing running, every output delivered. Requires mu_.
  bool IdleLocked() const { return pending_.empty() && tasks_.empty() && live_ == 0 && !delivering_; }

  struct Pending {
    uint64_t id;
    std::vector<int32_t> prompt;
    RequestParams params;
    Callback callback;
  };

  std::unique_ptr<Engine> engine_;  // used by the loop thread only (Check: any thread)
  const int32_t max_model_len_;
  const int32_t n_vocab_;
  const int32_t max_num_seqs_;

  mutable std::mutex mu_;             // guards everything below
  std::condition_variable work_cv_;   // loop: new work or stop
  std::condition_variable idle_cv_;   // drain: no more work
  std::vector<Pending> pending_;
  std::vector<uint64_t> cancels_;
  std::vector<std::function<void(Engine&)>> tasks_;
  uint64_t next_id_ = 1;
  int64_t live_ = 0;                  // submitted and not yet finished
  EngineStats stats_;                 // as of the last step
  bool stop_ = false;
  bool draining_ = false;
  bool cancel_all_ = false;  // drain timed out, or stopping
  bool delivering_ = false;  // the loop is running callbacks outside the lock

  // Live requests (guarded by mu_: Abandon takes their callbacks).
  struct Live {
    uint64_t id;  // ours
    Callback callback;
  };
  std::map<uint64_t, Live> live_by_engine_id_;
  bool abandoned_ = false;

  // Loop thread only.
  std::function<void(const EngineStats&)> step_observer_;
  std::map<uint64_t, uint64_t> engine_ids_;  // our id -> engine id (for cancels)
  std::thread loop_;
};

}  // namespace infera
