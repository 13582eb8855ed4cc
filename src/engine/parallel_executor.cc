#include "engine/parallel_executor.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "base/logging.h"

namespace infera {
namespace {

constexpr uint32_t kMagic = 0x50464e49;  // "INFP"
enum class StepKind : uint32_t { kForward = 1, kStop = 2 };

struct StepHeader {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  uint64_t body_bytes = 0;
  int32_t kv_slots = 0;
  int32_t kv_type = 0;  // KvType
  int32_t n_ctx = 0;    // the runner's context (LongRoPE picks factors by it)
  int32_t reserved = 0;
};

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) { out_->clear(); }
  void I32(int32_t v) { Raw(&v, sizeof v); }
  void Vec(const std::vector<int32_t>& v) {
    I32(static_cast<int32_t>(v.size()));
    Raw(v.data(), v.size() * sizeof(int32_t));
  }

 private:
  // (resize + memcpy, not insert: GCC 12 -O3 warns falsely of an overflow
  // -Wstringop-overflow when insert of a 4-byte range is inlined here.)
  void Raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool I32(int32_t* v) { return Raw(v, sizeof *v); }
  bool Vec(std::vector<int32_t>* v, int32_t max_len) {
    int32_t n;
    if (!I32(&n) || n < 0 || n > max_len || size_t(n) * sizeof(int32_t) > n_ - at_) return false;
    v->resize(n);
    return Raw(v->data(), size_t(n) * sizeof(int32_t));
  }
  bool done() const { return at_ == n_; }

 private:
  bool Raw(void* dst, size_t n) {
    if (n > n_ - at_) return false;
    if (n > 0) std::memcpy(dst, p_ + at_, n);
    at_ += n;
    return true;
  }
  const uint8_t* p_;
  size_t n_, at_ = 0;
};

constexpr int32_t kMaxLen = 1 << 28;

// After every step each rank's totals go to rank 0 (one small gather).
constexpr size_t kStatFields = 5;
Status ShareStats(Communicator& world, const Communicator* tp, double step_seconds, RankStats* mine,
                  std::vector<RankStats>* all) {
  mine->steps += 1;
  mine->step_seconds += step_seconds;
  mine->comm_seconds = mine->bytes_sent = mine->bytes_received = 0;
  for (const Communicator* c : {static_cast<const Communicator*>(&world), tp}) {
    if (c == nullptr) continue;
    mine->comm_seconds += c->stats().seconds;
    mine->bytes_sent += static_cast<double>(c->stats().bytes_sent);
    mine->bytes_received += static_cast<double>(c->stats().bytes_received);
  }
  const float v[kStatFields] = {float(mine->steps), float(mine->step_seconds), float(mine->comm_seconds),
                                float(mine->bytes_sent), float(mine->bytes_received)};
  std::vector<float> out(world.rank() == 0 ? kStatFields * world.size() : 0);
  RETURN_IF_ERROR(world.Gather(v, std::vector<size_t>(world.size(), kStatFields), out.data(), 0));
  if (all != nullptr && world.rank() == 0) {
    all->resize(world.size());
    for (int r = 0; r < world.size(); ++r) {
      const float* f = &out[r * kStatFields];
      (*all)[r] = RankStats{f[0], f[1], f[2], f[3], f[4]};
    }
  }
  return Status::Ok();
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<uint8_t> EncodeBatch(const ForwardBatch& b) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.Vec(b.tokens);
  w.Vec(b.positions);
  w.Vec(b.seq);
  w.Vec(b.logit_rows);
  w.I32(static_cast<int32_t>(b.seq_slots.size()));
  std::vector<int32_t> runs;  // (first slot, length) pairs
  for (const std::vector<int32_t>* s : b.seq_slots) {
    runs.clear();
    for (size_t i = 0; i < s->size(); ++i) {
      if (!runs.empty() && runs[runs.size() - 2] + runs.back() == (*s)[i]) ++runs.back();
      else runs.insert(runs.end(), {(*s)[i], 1});
    }
    w.Vec(runs);
  }
  return out;
}

Status DecodeBatch(const uint8_t* data, size_t n, DecodedBatch* out) {
  Reader r(data, n);
  ForwardBatch& b = out->batch;
  b.Clear();
  int32_t n_seqs = 0;
  if (!r.Vec(&b.tokens, kMaxLen) || !r.Vec(&b.positions, kMaxLen) || !r.Vec(&b.seq, kMaxLen) ||
      !r.Vec(&b.logit_rows, kMaxLen) || !r.I32(&n_seqs) || n_seqs < 0 || n_seqs > kMaxLen) {
    return DataLoss("step message: truncated or malformed batch");
  }
  if (b.positions.size() != b.tokens.size() || b.seq.size() != b.tokens.size()) {
    return DataLoss("step message: batch arrays differ in length");
  }
  out->slots.resize(n_seqs);
  std::vector<int32_t> runs;
  for (int32_t s = 0; s < n_seqs; ++s) {
    if (!r.Vec(&runs, kMaxLen) || runs.size() % 2 != 0) return DataLoss("step message: malformed KV slots");
    auto& slots = out->slots[s];
    slots.clear();
    for (size_t i = 0; i < runs.size(); i += 2) {
      if (runs[i + 1] < 0 || slots.size() + runs[i + 1] > size_t(kMaxLen)) {
        return DataLoss("step message: malformed KV slots");
      }
      for (int32_t k = 0; k < runs[i + 1]; ++k) slots.push_back(runs[i] + k);
    }
  }
  if (!r.done()) return DataLoss("step message: trailing bytes");
  for (auto& s : out->slots) b.seq_slots.push_back(&s);
  return Status::Ok();
}

BroadcastingRunner::BroadcastingRunner(std::unique_ptr<ModelRunner> local, Communicator& world, int32_t n_ctx,
                                       StepMonitor* monitor, const Communicator* tp)
    : local_(std::move(local)), world_(world), n_ctx_(n_ctx), monitor_(monitor), tp_(tp) {}

Status BroadcastingRunner::Forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>* logits) {
  if (broken_) return Unavailable("the parallel group failed earlier; restart it");
  if (monitor_ != nullptr) {
    monitor_->step_started_ns.store(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  body_ = EncodeBatch(batch);
  StepHeader h;
  h.kind = static_cast<uint32_t>(StepKind::kForward);
  h.body_bytes = body_.size();
  h.kv_slots = kv.n_slots();
  h.kv_type = static_cast<int32_t>(kv.type());
  h.n_ctx = n_ctx_;
  // (The header is broadcast as the workers wait for it: non-blocking
  // collectives match only non-blocking ones.)
  Status st = world_.Broadcast(&h, sizeof h, 0, /*idle_wait=*/true);
  if (st.ok()) st = world_.Broadcast(body_.data(), body_.size(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  if (st.ok()) st = local_->Forward(batch, kv, logits);
  if (st.code() != StatusCode::kUnavailable) {  // (a bad batch failed alike on every rank)
    std::vector<RankStats> all;
    Status shared = ShareStats(world_, tp_, SecondsSince(t0), &mine_, &all);
    if (!shared.ok()) {
      st = shared;
    } else if (monitor_ != nullptr) {
      std::lock_guard<std::mutex> lock(monitor_->mu);
      monitor_->ranks = std::move(all);
    }
  }
  if (!st.ok() && st.code() == StatusCode::kUnavailable) broken_ = true;
  if (monitor_ != nullptr) {
    monitor_->step_started_ns.store(0);
    if (broken_) monitor_->broken.store(true);
  }
  return st;
}

Status StopWorkers(Communicator& world) {
  StepHeader h;
  h.kind = static_cast<uint32_t>(StepKind::kStop);
  return world.Broadcast(&h, sizeof h, 0, /*idle_wait=*/true);
}

Status RunWorkerLoop(const RunnerForContext& make_runner, Communicator& world, const Communicator* tp,
                     const std::vector<int>& kv_heads, int head_dim) {
  RankStats mine;
  std::unique_ptr<ModelRunner> runner;
  int32_t runner_ctx = -1;
  std::unique_ptr<KvStorage> kv;
  std::vector<uint8_t> body;
  DecodedBatch step;
  std::vector<float> logits;
  for (;;) {
    StepHeader h;
    RETURN_IF_ERROR(world.Broadcast(&h, sizeof h, 0, /*idle_wait=*/true));
    if (h.magic != kMagic) return DataLoss("step message: bad magic (mismatched infera builds across ranks?)");
    if (h.kind == static_cast<uint32_t>(StepKind::kStop)) return Status::Ok();
    if (h.kind != static_cast<uint32_t>(StepKind::kForward) || h.body_bytes > (uint64_t(1) << 34) ||
        h.kv_slots <= 0 || (h.kv_type != int32_t(KvType::kF32) && h.kv_type != int32_t(KvType::kQ8) &&
                             h.kv_type != int32_t(KvType::kBF16))) {
      return DataLoss("step message: malformed header");
    }
    body.resize(h.body_bytes);
    RETURN_IF_ERROR(world.Broadcast(body.data(), body.size(), 0));
    RETURN_IF_ERROR(DecodeBatch(body.data(), body.size(), &step));
    const auto type = static_cast<KvType>(h.kv_type);
    if (kv == nullptr || kv->n_slots() != h.kv_slots || kv->type() != type) {
      kv = std::make_unique<KvStorage>(kv_heads, h.kv_slots, head_dim, type);
      LOG_INFO("rank {}: KV cache for {} slots ({:.1f} MiB)", world.rank(), h.kv_slots,
               KvStorage::BytesFor(kv_heads, h.kv_slots, head_dim, type) / 1048576.0);
    }
    if (runner == nullptr || runner_ctx != h.n_ctx) {
      runner = make_runner(h.n_ctx);
      runner_ctx = h.n_ctx;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status st = runner->Forward(step.batch, *kv, &logits);
    if (st.code() == StatusCode::kUnavailable) return st;
    RETURN_IF_ERROR(ShareStats(world, tp, SecondsSince(t0), &mine, nullptr));
    if (!st.ok()) LOG_ERROR("rank {}: forward pass failed: {}", world.rank(), st.ToString());
  }
}

}  // namespace infera
