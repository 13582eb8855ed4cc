#include "tools/parallel_session.h"

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "engine/parallel_executor.h"
#include "model/model_runner.h"
#include "parallel/local_communicator.h"

namespace infera::cli {

void AddParallelFlags(CLI::App& app, ParallelFlags* f) {
  app.add_option("--tp,--tensor-parallel-size", f->tp,
                 "tensor-parallel ranks: each holds 1/N of every layer (KV-head groups, FFN columns, vocabulary)")
      ->group("Parallelism");
  app.add_option("--pp,--pipeline-parallel-size", f->pp, "pipeline stages: each holds a contiguous range of layers")
      ->group("Parallelism");
  app.add_option("--pp-layers", f->pp_layers, "layers per pipeline stage, e.g. 10,12 (default: as even as possible)")
      ->group("Parallelism");
  app.add_option("--parallel-backend", f->backend,
                 "mpi (one process per rank: mpirun -np TP*PP infera ...), threads (ranks as threads of one "
                 "process), or auto: mpi when started by mpirun")
      ->group("Parallelism");
  app.add_option("--step-timeout", f->step_timeout,
                 "seconds one step may take before the group counts as failed (a rank died or a link broke): serve "
                 "then fails the requests in flight with 503 and exits non-zero for its supervisor to restart it")
      ->group("Parallelism");
}

namespace {

// Ranks of this job on this host (Open MPI tells each process).
int LocalRanks(int world) {
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int n = std::atoi(v);
    if (n >= 1) return n;
  }
  return world;
}

// A stage's tensor-parallel group: ranks stage * tp ... stage * tp + tp - 1.
StatusOr<std::unique_ptr<Communicator>> StageGroup(Communicator& world, int tp) {
  return world.Split(world.rank() / tp, world.rank() % tp);
}

}  // namespace

StatusOr<std::unique_ptr<ParallelSession>> ParallelSession::Start(const ParallelFlags& f) {
  std::unique_ptr<ParallelSession> s(new ParallelSession());
  if (f.tp < 1 || f.tp > 64 || f.pp < 1 || f.pp > 64) return InvalidArgument("--tp and --pp must be in 1..64");
  if (!(f.step_timeout > 0)) return InvalidArgument("--step-timeout must be > 0 seconds");
  s->step_timeout_ = f.step_timeout;
  s->layout_.tp = f.tp;
  s->layout_.pp = f.pp;
  if (!f.pp_layers.empty()) {
    std::stringstream in(f.pp_layers);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 1 || v > 100000) {
        return InvalidArgument("--pp-layers takes layer counts like 10,12");
      }
      s->layout_.pp_layers.push_back(static_cast<int>(v));
    }
    if (f.pp == 1 && s->layout_.pp_layers.size() > 1) {
      return InvalidArgument("--pp-layers names several stages; give --pp too");
    }
  }
  std::string backend = f.backend;
  if (backend == "auto") backend = LaunchedByMpi() ? "mpi" : "threads";
  if (backend != "mpi" && backend != "threads") {
    return InvalidArgument("--parallel-backend must be mpi, threads or auto (got '" + f.backend + "')");
  }
  const int n = s->layout_.world_size();
  if (backend == "mpi" && (n > 1 || LaunchedByMpi())) {
    ASSIGN_OR_RETURN(s->mpi_, MpiRuntime::Init());
    s->world_ = &s->mpi_->world();
    if (s->world_->size() != n) {
      return InvalidArgument(fmt::format("mpirun started {} ranks but --tp {} x --pp {} needs {}", s->world_->size(),
                                         f.tp, f.pp, n));
    }
    if (n > 1) {
      ASSIGN_OR_RETURN(s->tp_, StageGroup(*s->world_, f.tp));
    }
  } else if (n > 1) {
    // Never time out: a worker waits for the next step as long as the
    // server idles.
    s->local_comms_ = MakeLocalCommunicators(n, std::chrono::hours(24 * 365));
    s->world_ = s->local_comms_[0].get();
  }
  s->load_.layout = s->layout_;
  s->load_.rank = s->rank();
  s->started_ = true;
  if (n > 1) {
    LOG_INFO("parallel: tp {} x pp {} over {} ({} ranks), this is rank {}", f.tp, f.pp,
             s->mpi_ ? "MPI" : "threads", n, s->rank());
  }
  return s;
}

ParallelSession::~ParallelSession() {
  if (started_ && mpi_ != nullptr && split() && rank() == 0 && !agreed_) {
    // Rank 0 gave up before Ready: the MPI workers wait in their load
    // agreement; tell them to stop.
    (void)Agree(*world_, Status(StatusCode::kCancelled, "rank 0 stopped before serving"));
  }
  if (workers_running_ && world_ != nullptr && world_->rank() == 0) {
    if (Status st = StopWorkers(*world_); !st.ok()) LOG_WARN("parallel: stopping the workers: {}", st.ToString());
  }
  for (auto& t : workers_) t.join();
  tp_.reset();
}

int ParallelSession::Threads(int requested) const {
  if (requested > 0) return ResolveThreads(requested);  // (more than the cores: a warning, capped)
  const int ranks_here = mpi_ ? LocalRanks(layout_.world_size()) : layout_.world_size();
  return std::max(1, ThreadPool::DefaultThreadCount() / std::max(1, ranks_here));
}

Status ParallelSession::Agree(Communicator& world, const Status& mine) {
  std::vector<float> failed(world.size());
  const float me = mine.ok() ? 0.0f : 1.0f;
  RETURN_IF_ERROR(world.AllGather(&me, 1, failed.data()));
  if (!mine.ok()) return mine;
  for (int r = 0; r < world.size(); ++r) {
    if (failed[r] != 0) return Unavailable(fmt::format("rank {} could not load its shard of the model", r));
  }
  return Status::Ok();
}

Status ParallelSession::LoadAndAgree(const std::string& path, const ModelLoadOptions& lo, Communicator& world,
                                     std::unique_ptr<Model>* out) {
  auto m = LoadModel(path, lo);
  RETURN_IF_ERROR(Agree(world, m.status()));
  *out = std::move(m).value();
  LOG_INFO("parallel: {}; weights resident {:.1f} MiB", DescribeShard((*out)->whole(), (*out)->shard),
           (*out)->weights->resident_bytes() / 1048576.0);
  return Status::Ok();
}

Status ParallelSession::ServeSteps(const Model& m, const KernelTable& k, int threads, Communicator& world,
                                   Communicator& tp) {
  ThreadPool pool(threads);
  ParallelComms comms{&world, &tp};
  RunnerForContext make = [&](int32_t n_ctx) { return MakeModelRunner(m, k, pool, n_ctx, comms); };
  return RunWorkerLoop(make, world, &tp, m.config.KvHeadsPerLayer(), m.config.head_dim);
}

Status ParallelSession::Ready(const std::string& model_path, const Status& loaded, const KernelTable& k,
                              int threads) {
  if (!split()) return loaded;
  if (!local_comms_.empty()) {
    worker_kernels_ = k;
    for (int r = 1; r < layout_.world_size(); ++r) {
      workers_.emplace_back([this, r, model_path, threads] {
        const KernelTable& k = worker_kernels_;
        Communicator& world = *local_comms_[r];
        auto tp = StageGroup(world, layout_.tp);
        if (!tp.ok()) return;
        ModelLoadOptions lo = load_;
        lo.rank = r;
        std::unique_ptr<Model> m;
        if (!LoadAndAgree(model_path, lo, world, &m).ok()) return;
        if (Status st = ServeSteps(*m, k, threads, world, **tp); !st.ok()) {
          LOG_ERROR("parallel: rank {} stopped: {}", r, st.ToString());
        }
      });
    }
    ASSIGN_OR_RETURN(tp_, StageGroup(*world_, layout_.tp));
  }
  agreed_ = true;
  RETURN_IF_ERROR(Agree(*world_, loaded));
  workers_running_ = true;
  return Status::Ok();
}

ModelRunnerFactory ParallelSession::RunnerFactory(const Model& m, const KernelTable& k, int32_t n_ctx) {
  if (!split()) return {};
  return [this, &m, &k, n_ctx](ThreadPool& pool) -> std::unique_ptr<ModelRunner> {
    return std::make_unique<BroadcastingRunner>(MakeModelRunner(m, k, pool, n_ctx, {world_, tp_.get()}), *world_,
                                                n_ctx, &monitor_, tp_.get());
  };
}

std::string ParallelSession::Failure() const {
  if (!split()) return "";
  if (monitor_.broken.load()) return "communication with the other ranks failed (a rank died or a link broke)";
  const int64_t t0 = monitor_.step_started_ns.load();
  if (t0 == 0) return "";
  const double s = (std::chrono::steady_clock::now().time_since_epoch().count() - t0) * 1e-9;
  if (s <= step_timeout_) return "";
  return fmt::format("a step has run for {:.1f} s, past --step-timeout {:.0f} s (a rank died or hangs, or a link "
                     "broke)", s, step_timeout_);
}

std::vector<RankStats> ParallelSession::RankStatsSnapshot() const {
  std::lock_guard<std::mutex> lock(monitor_.mu);
  return monitor_.ranks;
}

void ParallelSession::Abort(int code) {
  if (mpi_ != nullptr) mpi_->Abort(code);
  std::_Exit(code);
}

CommStats ParallelSession::Stats() const {
  CommStats s;
  for (const Communicator* c : {static_cast<const Communicator*>(world_), static_cast<const Communicator*>(tp_.get())}) {
    if (c == nullptr) continue;
    s.calls += c->stats().calls;
    s.bytes_sent += c->stats().bytes_sent;
    s.bytes_received += c->stats().bytes_received;
    s.seconds += c->stats().seconds;
  }
  return s;
}

int ParallelSession::RunWorker(const std::string& model_path, const RuntimeOptions& rt) {
  auto k = SelectKernels(rt);
  if (!k.ok()) {
    (void)Agree(*world_, k.status());  // the others learn that this rank cannot go on
    return ReportError(k.status());
  }
  std::unique_ptr<Model> m;
  Status st = LoadAndAgree(model_path, ForKernels(load_, *k), *world_, &m);
  if (st.ok()) st = ServeSteps(*m, *k, Threads(rt.threads), *world_, *tp_);
  if (!st.ok()) {
    LOG_ERROR("parallel: rank {} stopped: {}", rank(), st.ToString());
    return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace infera::cli
