#include "core/collective_timing.h"

namespace mgs {

size_t CollectiveSizes::bufferBytes() const {
  size_t b = 0;
  for (size_t x : allreduce) b = std::max(b, x);
  for (size_t x : broadcast) b = std::max(b, x);
  for (size_t x : allgather) b = std::max(b, x);
  return b;
}

size_t CollectiveSizes::recvBytes(int P) const {
  size_t b = 0;
  for (size_t x : allgather) b = std::max(b, x);
  return b * static_cast<size_t>(P);
}

const CollectiveSizes& hostCollectiveSizes() {
  static const CollectiveSizes s{{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20},
                                 {4 << 10, 64 << 10, 1 << 20, 8 << 20},
                                 {4 << 10, 64 << 10, 1 << 20, 8 << 20}};
  return s;
}

const CollectiveSizes& deviceCollectiveSizes() {
  static const CollectiveSizes s{{4 << 10, 64 << 10, 1 << 20, 16 << 20},
                                 {4 << 10, 64 << 10, 1 << 20, 4 << 20},
                                 {4 << 10, 64 << 10, 1 << 20, 4 << 20}};
  return s;
}

Status measureCollectives(Communicator& comm, const CollectiveSizes& sizes, void* buf, void* recv,
                          std::vector<double>* t) {
  for (size_t b : sizes.allreduce) {
    double s;
    MGS_RETURN_IF_ERROR(timeMedian(3, &s, [&] { return comm.allreduce(buf, b / 4, MGS_FLOAT32, CommOp::kSum); }));
    t->push_back(s);
  }
  for (size_t b : sizes.allgather) {
    double s;
    MGS_RETURN_IF_ERROR(timeMedian(3, &s, [&] { return comm.allgather(buf, b, recv); }));
    t->push_back(s);
  }
  // The agreed exchange's index block travels by broadcast (root 0; the
  // leader rotates, the cost does not depend on which rank it is).
  for (size_t b : sizes.broadcast) {
    double s;
    MGS_RETURN_IF_ERROR(timeMedian(3, &s, [&] { return comm.broadcast(buf, b, 0); }));
    t->push_back(s);
  }
  return Status::OK();
}

}  // namespace mgs
