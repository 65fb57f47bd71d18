// Response cache: names that were negotiated successfully before get a stable
// bit position, so later cycles negotiate them with one bitwise-AND allreduce
// instead of a gather to rank 0 (Horovod's idea). Every rank updates its cache
// only from the broadcast response list, in the same order, so bit positions
// agree across ranks without any extra communication.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/request.h"

namespace mgs {

class ResponseCache {
 public:
  // Bit position of `name` if cached with a signature equal to `sig`, else -1.
  int64_t lookup(const std::string& name, const Signature& sig) const;
  // Insert or refresh `name`; an existing name keeps its bit.
  void put(const std::string& name, const Signature& sig);
  // Forget `name`; its bit stays reserved (unused) so positions never shift.
  void erase(const std::string& name);
  // Number of bit positions in use (the bit vector's length).
  size_t bits() const { return names_.size(); }
  // Name at bit `id` ("" for an erased slot).
  const std::string& nameAt(size_t id) const { return names_[id]; }

 private:
  struct Entry {
    size_t id;
    Signature sig;
  };
  std::unordered_map<std::string, Entry> entries_;
  std::vector<std::string> names_;
};

}  // namespace mgs
