// Check macros: every foreign call (MPI, CUDA, system) and every internal
// invariant goes through one of these, so a failure carries file:line and, for
// comparisons, both values. They return a Status from the enclosing function.
#pragma once

#include <sstream>
#include <string>

#include "common/status.h"

namespace mgs::detail {
inline std::string where(const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  return std::string(" (") + base + ":" + std::to_string(line) + ")";
}
}  // namespace mgs::detail

#define MGS_RETURN_IF_ERROR(expr)      \
  do {                                 \
    ::mgs::Status _mgs_st = (expr);    \
    if (!_mgs_st.ok()) return _mgs_st; \
  } while (0)

// Return Status(code, msg) if `cond` is false. `msg` is an expression streamed
// into an ostringstream, e.g. MGS_ENSURE(n > 0, kInvalidArgument, "n=" << n).
#define MGS_ENSURE(cond, code, msg)                           \
  do {                                                        \
    if (!(cond)) {                                            \
      std::ostringstream _mgs_os;                             \
      _mgs_os << msg;                                         \
      return ::mgs::Status(::mgs::Code::code, _mgs_os.str()); \
    }                                                         \
  } while (0)

// Equality check that prints both values.
#define MGS_ENSURE_EQ(a, b, code, msg)                                        \
  do {                                                                        \
    auto _mgs_a = (a);                                                        \
    auto _mgs_b = (b);                                                        \
    if (!(_mgs_a == _mgs_b)) {                                                \
      std::ostringstream _mgs_os;                                             \
      _mgs_os << msg << ": " #a " = " << _mgs_a << " but " #b " = " << _mgs_b \
              << ::mgs::detail::where(__FILE__, __LINE__);                    \
      return ::mgs::Status(::mgs::Code::code, _mgs_os.str());                 \
    }                                                                         \
  } while (0)
