// Signatures and responses on the negotiation wire (controller.cc,
// controller_responses.cc). Both ends are the same build (wire.h).
#pragma once

#include <string>

#include "core/request.h"
#include "core/wire.h"

namespace mgs {

// Bytes of one report entry besides its name and its process set ranks (and
// an upper bound on the shape: at most MGS_MAX_DIMS dimensions).
constexpr size_t kSignatureBytes = 64 + 8 * MGS_MAX_DIMS;

inline void writeSignature(WireWriter& w, const std::string& name, const Signature& s) {
  w.putString(name);
  w.put(static_cast<uint8_t>(s.type));
  w.put(static_cast<int32_t>(s.dtype));
  w.putShape(s.shape);
  w.put(static_cast<uint8_t>(s.on_cuda));
  w.put(s.reduce_op);
  w.put(s.prescale);
  w.put(s.postscale);
  w.put(s.flags);
  w.put(s.root);
  w.put(s.process_set);
  w.put(static_cast<uint32_t>(s.ranks.size()));
  for (int32_t r : s.ranks) w.put(r);
}

inline bool readSignature(WireReader& r, std::string* name, Signature* s) {
  uint8_t type, cuda;
  int32_t dtype;
  uint32_t nranks = 0;
  if (!r.getString(name) || !r.get(&type) || !r.get(&dtype) || !r.getShape(&s->shape) || !r.get(&cuda) ||
      !r.get(&s->reduce_op) || !r.get(&s->prescale) || !r.get(&s->postscale) || !r.get(&s->flags) ||
      !r.get(&s->root) || !r.get(&s->process_set) || !r.get(&nranks) || nranks > (1u << 24))
    return false;
  s->ranks.resize(nranks);
  for (auto& x : s->ranks)
    if (!r.get(&x)) return false;
  s->type = static_cast<OpType>(type);
  s->dtype = static_cast<DataType>(dtype);
  s->on_cuda = cuda != 0;
  return true;
}

// A response's flags.
constexpr uint8_t kResponseCacheable = 1;  // every rank puts the name in its response cache
constexpr uint8_t kResponseServed = 2;     // joined ranks run it with zeros; its signature follows

}  // namespace mgs
