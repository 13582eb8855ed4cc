// A command's place in a split model (--tp / --pp): starts the ranks (MPI
// under mpirun, or threads of this process), loads only this rank's shard,
// and wires rank 0's engine to the others. Used by run, generate, serve,
// bench and perplexity:
//
//   ASSIGN_OR_RETURN(auto ps, ParallelSession::Start(flags));
//   if (ps->rank() != 0) return ps->RunWorker(path, kernels, threads);  // MPI ranks > 0
//   model = LoadModel(path, ps->load_options());                       // rank 0's shard
//   RETURN_IF_ERROR(ps->Ready(path, *model, kernels, threads));        // every rank loaded
//   Engine::Create(..., ps->RunnerFactory(*model, kernels, n_ctx));
//
// Not split (tp = pp = 1): every call is a no-op and the factory is empty.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "infera/engine.h"
#include "engine/parallel_executor.h"
#include "infera/status.h"
#include "tools/cli_common.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace infera::cli {

struct ParallelFlags {
  int tp = 1;
  int pp = 1;
  std::string pp_layers;         // "10,12": layers per stage
  std::string backend = "auto";  // mpi | threads | auto (mpi when started by mpirun)
  double step_timeout = 60;      // seconds a step may take before the group counts as failed
};
void AddParallelFlags(CLI::App& app, ParallelFlags* f);

class ParallelSession {
 public:
  static StatusOr<std::unique_ptr<ParallelSession>> Start(const ParallelFlags& f);
  // Rank 0: stops the workers (threads: joins them). MPI: finalizes.
  ~ParallelSession();
  ParallelSession(const ParallelSession&) = delete;
  ParallelSession& operator=(const ParallelSession&) = delete;

  bool split() const { return layout_.world_size() > 1; }
  int rank() const { return world_ != nullptr ? world_->rank() : 0; }
  const ModelLoadOptions& load_options() const { return load_; }
  // Compute threads per rank for a -t value: 0 shares this host's cores
  // among the ranks on it.
  int Threads(int requested) const;
  // rt with this rank's threads for a -t value (Threads).
  RuntimeOptions RankRuntime(const RuntimeOptions& rt, int requested_threads) const {
    RuntimeOptions out = rt;
    out.threads = Threads(requested_threads);
    return out;
  }
  // Rank 0, after loading its shard (or failing to: `loaded`): starts the
  // threads backend's workers, then checks with every rank that all loaded.
  Status Ready(const std::string& model_path, const Status& loaded, const KernelTable& k, int threads);
  // Rank 0's runners: broadcast each step, run the shard. Empty when not split.
  ModelRunnerFactory RunnerFactory(const Model& m, const KernelTable& k, int32_t n_ctx);
  // Rank 0's communication so far (all its communicators).
  CommStats Stats() const;
  bool mpi() const { return mpi_ != nullptr; }
  // Rank 0: why the group cannot go on ("" while fine): a communication
  // error, or a step running past --step-timeout (a rank died or hangs, a
  // link broke). Any thread.
  std::string Failure() const;
  // Rank 0: every rank's totals as of the last step (empty before one).
  std::vector<RankStats> RankStatsSnapshot() const;
  // Ends this process and, under MPI, the whole job (MPI_Abort), with `code`.
  [[noreturn]] void Abort(int code);
  // MPI ranks > 0: selects kernels for rt (rt.threads: this rank's), loads
  // the shard, agrees with the others, runs steps until rank 0 stops;
  // returns the exit code.
  int RunWorker(const std::string& model_path, const RuntimeOptions& rt);

 private:
  ParallelSession() = default;
  // Loads rank `rank`'s shard and agrees with the others that all loaded.
  static Status LoadAndAgree(const std::string& path, const ModelLoadOptions& lo, Communicator& world,
                             std::unique_ptr<Model>* out);
  static Status Agree(Communicator& world, const Status& mine);
  static Status ServeSteps(const Model& m, const KernelTable& k, int threads, Communicator& world,
                           Communicator& tp);
  ParallelLayout layout_;
  ModelLoadOptions load_;
  std::unique_ptr<MpiRuntime> mpi_;
  std::vector<std::unique_ptr<Communicator>> local_comms_;  // threads backend: one per rank
  Communicator* world_ = nullptr;                           // this rank's
  std::unique_ptr<Communicator> tp_;                        // this rank's stage group
  std::vector<std::thread> workers_;                        // threads backend
  KernelTable worker_kernels_;                              // the threads backend workers'
  double step_timeout_ = 60;
  StepMonitor monitor_;                                     // rank 0's steps
  bool started_ = false;                                    // Start succeeded
  bool agreed_ = false;                                     // rank 0 met the others in Ready
  bool workers_running_ = false;
};

}  // namespace infera::cli
