#include "engine/async_engine.h"

#include <algorithm>
#include <utility>

namespace infera {

StatusOr<std::unique_ptr<AsyncEngine>> AsyncEngine::Create(const Model& model, const Tokenizer* tokenizer,
                                                           const KernelTable& kernels, const EngineOptions& opts,
                                                           const ModelRunnerFactory& make_runner) {
  ASSIGN_OR_RETURN(auto engine, Engine::Create(model, tokenizer, kernels, opts, make_runner));
  return std::unique_ptr<AsyncEngine>(new AsyncEngine(std::move(engine)));
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)),
      max_model_len_(engine_->max_model_len()),
      n_vocab_(engine_->n_vocab()),
      max_num_seqs_(engine_->max_num_seqs()) {
  stats_ = engine_->Stats();
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
  RETURN_IF_ERROR(engine_->Check(prompt, params));
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) return Unavailable("the engine is shutting down");
  const uint64_t id = next_id_++;
  pending_.push_back(Pending{id, std::move(prompt), params, std::move(on_output)});
  ++live_;
  ++stats_.num_waiting;
  work_cv_.notify_one();
  return id;
}

void AsyncEngine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  work_cv_.notify_one();
}

void AsyncEngine::Post(std::function<void(Engine&)> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

EngineStats AsyncEngine::Stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  engine_->OffloadStats(&s);  // live, even while no step runs
  return s;
}

int AsyncEngine::Abandon(const std::string& why) {
  std::vector<std::pair<Callback, RequestOutput>> ends;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    abandoned_ = true;
    auto end = [&](uint64_t id, Callback cb) {
      RequestOutput o;
      o.id = id;
      o.finished = true;
      o.finish_reason = FinishReason::kError;
      o.error = why;
      o.error_code = StatusCode::kUnavailable;
      ends.emplace_back(std::move(cb), std::move(o));
    };
    for (Pending& p : pending_) end(p.id, std::move(p.callback));
    pending_.clear();
    for (auto& [eid, live] : live_by_engine_id_) end(live.id, std::move(live.callback));
    live_by_engine_id_.clear();
    live_ -= static_cast<int64_t>(ends.size());
  }
  idle_cv_.notify_all();
  for (auto& [cb, out] : ends) {
    if (cb) cb(out);
  }
  return static_cast<int>(ends.size());
}

bool AsyncEngine::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  const bool done = idle_cv_.wait_for(lock, timeout, [&] { return IdleLocked(); });
  if (!done) {
    cancel_all_ = true;
    work_cv_.notify_one();
    idle_cv_.wait(lock, [&] { return IdleLocked(); });
  }
  return done;
}

void AsyncEngine::Intake(std::vector<std::pair<Callback, RequestOutput>>* deliveries) {
  std::vector<Pending> pending;
  std::vector<uint64_t> cancels;
  std::vector<std::function<void(Engine&)>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    cancels.swap(cancels_);
    tasks.swap(tasks_);
    if (cancel_all_) {
      cancel_all_ = false;
      for (const Pending& p : pending) cancels.push_back(p.id);
      for (const auto& [ours, eid] : engine_ids_) cancels.push_back(ours);
    }
  }
  for (Pending& p : pending) {
    if (std::find(cancels.begin(), cancels.end(), p.id) != cancels.end()) {
      RequestOutput o;
      o.id = p.id;
      o.finished = true;
      o.finish_reason = FinishReason::kCancelled;
      o.prompt_tokens = static_cast<int32_t>(p.prompt.size());
      deliveries->emplace_back(std::move(p.callback), std::move(o));
      continue;
    }
    const int32_t prompt_len = static_cast<int32_t>(p.prompt.size());
    StatusOr<uint64_t> eid = engine_->Add(std::move(p.prompt), p.params);
    if (!eid.ok()) {  // Check passed at submission: what changed since (a LoRA adapter unloaded), or a bug
      RequestOutput o;
      o.id = p.id;
      o.finished = true;
      o.finish_reason = FinishReason::kError;
      o.error = eid.status().message();
      o.error_code = eid.status().code();
      o.prompt_tokens = prompt_len;
      deliveries->emplace_back(std::move(p.callback), std::move(o));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_by_engine_id_[*eid] = Live{p.id, std::move(p.callback)};
    }
    engine_ids_[p.id] = *eid;
  }
  for (uint64_t id : cancels) {
    auto it = engine_ids_.find(id);
    if (it != engine_ids_.end()) engine_->Cancel(it->second);
  }
  for (auto& task : tasks) task(*engine_);
}

void AsyncEngine::Loop() {
  std::vector<std::pair<Callback, RequestOutput>> deliveries;
  for (;;) {
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return stop_ || cancel_all_ || !pending_.empty() || !cancels_.empty() || !tasks_.empty() ||
               engine_->HasWork();
      });
      stop = stop_;
      if (stop) cancel_all_ = true;  // so callers see a final output
    }
    deliveries.clear();
    Intake(&deliveries);
    do {
      std::vector<RequestOutput> outs = engine_->Step();
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestOutput& o : outs) {
        auto it = live_by_engine_id_.find(o.id);
        if (it == live_by_engine_id_.end()) continue;
        o.id = it->second.id;
        if (o.finished) {
          engine_ids_.erase(o.id);
          deliveries.emplace_back(std::move(it->second.callback), std::move(o));
          live_by_engine_id_.erase(it);
        } else {
          deliveries.emplace_back(it->second.callback, std::move(o));
        }
      }
    } while (stop && engine_->HasWork());
    int64_t finished = 0;
    for (const auto& d : deliveries) finished += d.second.finished ? 1 : 0;
    const EngineStats after = engine_->Stats();
    if (step_observer_ && after.last_step_tokens > 0) step_observer_(after);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = after;
      stats_.num_waiting += static_cast<int32_t>(pending_.size());
      live_ -= finished;
      delivering_ = !deliveries.empty();
    }
    for (auto& [cb, out] : deliveries) {
      if (cb) cb(out);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      delivering_ = false;
    }
    idle_cv_.notify_all();
    if (stop) return;
  }
}

}  // namespace infera
