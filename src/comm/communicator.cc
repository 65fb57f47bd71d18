#include "comm/communicator.h"

namespace mgs {

Status Communicator::broadcastString(std::string* s, int root) {
  uint64_t n = s->size();
  Status st = broadcast(&n, sizeof n, root);
  if (!st.ok()) return st;
  if (rank() != root) s->resize(n);
  if (n == 0) return Status::OK();
  return broadcast(s->data(), n, root);
}

}  // namespace mgs
