// The job's world (comm/world.h) over Open MPI.
#include "comm/world.h"

#include "comm/mpi/mpi_communicator.h"

namespace mgs::world {

Status create(std::unique_ptr<Communicator>* out) { return MpiCommunicator::create(out); }

void finalizeIfOwned(const std::string& hazard) { MpiCommunicator::finalizeIfOwned(hazard); }

}  // namespace mgs::world
