#include "engine/async_engine.h"

#include <vector>

namespace infera {

StatusOr<std::unique_ptr<AsyncEngine>> AsyncEngine::Create(const Model& model, const Tokenizer* tokenizer,
                                                           const KernelTable& kernels, const EngineOptions& opts) {
  ASSIGN_OR_RETURN(auto engine, Engine::Create(model, tokenizer, kernels, opts));
  return std::unique_ptr<AsyncEngine>(new AsyncEngine(std::move(engine)));
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), max_model_len_(engine_->max_model_len()) {
  loop_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  loop_.join();
}

StatusOr<uint64_t> AsyncEngine::Submit(std::vector<int32_t> prompt, const RequestParams& params, Callback on_output) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) return Unavailable("the engine is shutting down");
  ASSIGN_OR_RETURN(uint64_t id, engine_->Add(std::move(prompt), params));
  callbacks_[id] = std::move(on_output);
  work_cv_.notify_one();
  return id;
}

void AsyncEngine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_->Cancel(id);
  work_cv_.notify_one();
}

EngineStats AsyncEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->Stats();
}

bool AsyncEngine::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  const bool done = idle_cv_.wait_for(lock, timeout, [&] { return IdleLocked(); });
  if (!done) {
    for (const auto& [id, cb] : callbacks_) engine_->Cancel(id);
    work_cv_.notify_one();
    idle_cv_.wait(lock, [&] { return IdleLocked(); });
  }
  return done;
}

void AsyncEngine::Loop() {
  std::vector<std::pair<Callback, RequestOutput>> deliveries;
  for (;;) {
    deliveries.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || engine_->HasWork(); });
      if (stop_) {
        // Cancel what is left, so callers see a final output.
        for (const auto& [id, cb] : callbacks_) engine_->Cancel(id);
        while (engine_->HasWork()) {
          for (RequestOutput& o : engine_->Step()) {
            auto it = callbacks_.find(o.id);
            if (it != callbacks_.end()) deliveries.emplace_back(it->second, std::move(o));
          }
        }
        callbacks_.clear();
      } else {
        for (RequestOutput& o : engine_->Step()) {
          auto it = callbacks_.find(o.id);
          if (it == callbacks_.end()) continue;
          const bool finished = o.finished;
          deliveries.emplace_back(finished ? std::move(it->second) : it->second, std::move(o));
          if (finished) callbacks_.erase(it);
        }
      }
      delivering_ = !deliveries.empty();
    }
    for (auto& [cb, out] : deliveries) {
      if (cb) cb(out);
    }
    bool stop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      delivering_ = false;
      stop = stop_;
    }
    idle_cv_.notify_all();
    if (stop) return;
  }
}

}  // namespace infera
