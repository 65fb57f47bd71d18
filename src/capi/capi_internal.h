// What the C ABI's translation units share (mgs_capi.cc defines it): the
// status and message handling of every entry point, the running runtime, and
// tensors converted to TensorDesc. Not installed; no C++ crosses the ABI.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "core/runtime.h"
#include "mgs/mgs.h"

namespace mgs::capi {

// The status as an mgs_status_t, its message kept for mgs_last_error().
mgs_status_t finishCall(const Status& st);
// The runtime, for calls that need it (see mgs_capi.cc's runtime()).
Status runningRuntime(std::shared_ptr<Runtime>* out, bool stopped_ok = false);
// `what` names the tensor in messages, e.g. "tensor 'fc.weight' input".
Status tensorDesc(const mgs_tensor_t* t, const std::string& what, TensorDesc* out);
// A running runtime, a name, and the tensor as a TensorDesc.
Status prepareEnqueue(const char* name, const mgs_tensor_t* t, const char* what, std::shared_ptr<Runtime>* rt,
                      TensorDesc* desc);

// Every entry point: no exception crosses the ABI.
template <typename F>
mgs_status_t guardedCall(F&& f) {
  try {
    return finishCall(f());
  } catch (const std::exception& e) {
    return finishCall(Status(Code::kInternal, std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return finishCall(Status(Code::kInternal, "unexpected non-standard exception"));
  }
}

// An enum argument as the integer the caller passed (any value may come
// from a foreign caller; loading it as the enum would be undefined).
template <typename E>
int32_t enumInt(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "mgs enums are 32-bit");
  int32_t v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace mgs::capi
