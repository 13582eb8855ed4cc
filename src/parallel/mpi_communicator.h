// Open MPI behind the Communicator interface: the ranks of `mpirun -np N`,
// on one host or many. Errors return (MPI_ERRORS_RETURN) instead of
// aborting, so the caller can fail requests and exit cleanly.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace infera {

// Whether this build has MPI (the library was found at configure time).
bool MpiAvailable();
// Whether this process was started by mpirun / mpiexec (Open MPI's or
// PMIx's environment), i.e. whether a world of several ranks may exist.
bool LaunchedByMpi();

// MPI_Init_thread (MPI_THREAD_SERIALIZED: any one thread at a time) once per
// process; MPI_Finalize when the returned object goes. Returns the world
// communicator. Unavailable when the build has no MPI.
class MpiRuntime {
 public:
  static StatusOr<std::unique_ptr<MpiRuntime>> Init();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  // The world communicator (owned by the runtime).
  Communicator& world() { return *world_; }
  // Ends the whole job now (MPI_Abort): for a rank that cannot go on when
  // the others may be blocked in a collective.
  [[noreturn]] void Abort(int code);

 private:
  MpiRuntime() = default;
  std::unique_ptr<Communicator> world_;
};

}  // namespace infera
