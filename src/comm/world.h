// The job's world: the communicator a rank's runtime runs on, and the end of
// it. The C API starts and ends jobs through this header only, so it names
// no backend; the backend that implements it (Open MPI: src/comm/mpi/world.cc)
// is chosen by what libmgs links.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "common/status.h"

namespace mgs::world {

// Join the job (initialising the backend where nobody has) and give this
// rank's communicator over every rank.
Status create(std::unique_ptr<Communicator>* out);
// At shutdown: end the backend if create() started it. With a non-empty
// `hazard` (a fatal error or stall abort happened here), wait at most a few
// seconds for the other ranks to reach the end too, then abort the job
// instead of hanging.
void finalizeIfOwned(const std::string& hazard = std::string());

}  // namespace mgs::world
