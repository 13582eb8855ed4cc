// The engine on its own loop thread, for servers: any thread may submit,
// cancel or read stats; outputs are delivered through per-request callbacks
// called on the loop thread (they must not block: hand the data to the
// connection's own queue). A submit or cancel waits at most for the step in
// progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "infera/engine.h"

namespace infera {

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;

  // `model`, `tokenizer` and `kernels` must outlive the engine.
  static StatusOr<std::unique_ptr<AsyncEngine>> Create(const Model& model, const Tokenizer* tokenizer,
                                                       const KernelTable& kernels, const EngineOptions& opts);
  // Cancels whatever is left and stops the loop.
  ~AsyncEngine();

  // Queues a request; errors (bad parameters, can never fit, draining) come
  // back here, synchronously. The callback sees every output of the request,
  // the last one with finished = true.
  StatusOr<uint64_t> Submit(std::vector<int32_t> prompt, const RequestParams& params, Callback on_output);
  // Ends a request within one step (its KV blocks are freed then).
  void Cancel(uint64_t id);
  EngineStats Stats() const;
  int32_t max_model_len() const { return max_model_len_; }
  // Stops accepting requests and waits up to `timeout` for those in flight
  // to finish; the rest are cancelled. Returns true if all finished in time.
  bool Drain(std::chrono::milliseconds timeout);

 private:
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  void Loop();
  // No request left, and every output delivered. Requires mu_.
  bool IdleLocked() const { return !engine_->HasWork() && !delivering_; }

  std::unique_ptr<Engine> engine_;
  int32_t max_model_len_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // loop: new work or stop
  std::condition_variable idle_cv_;   // drain: no more work
  std::map<uint64_t, Callback> callbacks_;
  bool stop_ = false;
  bool draining_ = false;
  bool delivering_ = false;  // the loop is running callbacks outside the lock
  std::thread loop_;
};

}  // namespace infera
