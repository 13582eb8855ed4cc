// Communicators for ranks that are threads of one process: the sharded code
// paths run and are tested without MPI. A collective waits at most
// `timeout` for the other ranks (then every rank gets Unavailable).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace infera {

// One communicator per rank [n]; hand communicator r to the thread that
// plays rank r.
std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(
    int n, std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace infera
