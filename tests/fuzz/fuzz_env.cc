// libFuzzer target: the MGS_* parser (src/common/params). Input: lines of
// NAME=VALUE; a line's first byte below 0xf0 picks a known parameter (so most
// inputs reach the value parsers), else the line is taken as it is.
// Invariants beyond "no crash, no UB": a parsed value prints (show) to text
// that parses back to the same value, and the agreement check tolerates any
// gathered digests.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "common/params.h"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& specs = mgs::paramSpecs();
  std::map<std::string, std::string> vars;
  const char* p = reinterpret_cast<const char*>(data);
  const char* end = p + size;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    const char* e = nl ? nl : end;
    std::string line(p, e);
    p = nl ? nl + 1 : end;
    if (line.empty()) continue;
    const auto b = static_cast<uint8_t>(line[0]);
    if (b < 0xf0) {
      vars[specs[b % specs.size()].name] = line.substr(1);
    } else {
      const auto eq = line.find('=');
      vars[line.substr(1, eq == std::string::npos ? std::string::npos : eq - 1)] =
          eq == std::string::npos ? "" : line.substr(eq + 1);
    }
  }

  mgs::Config c;
  const mgs::Status st = mgs::parseConfig(vars, &c);
  if (!st.ok()) {
    require(st.code() == mgs::Code::kConfig && !st.message().empty());
    return 0;
  }
  for (const auto& spec : specs) {
    mgs::Config back;
    const std::string shown = spec.show(c);
    require(spec.apply(shown, back).ok());
    require(spec.show(back) == shown);
  }
  (void)mgs::describeConfig(c);
  // Digests from "ranks" made of the input itself: any mix must give a
  // message or agreement, never a crash.
  const auto mine = mgs::agreementDigests(c);
  for (int ranks = 1; ranks <= 3; ++ranks) {
    std::vector<uint64_t> all(mine.size() * ranks);
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = (i < size) ? mine[i % mine.size()] ^ data[i] : mine[i % mine.size()];
    (void)mgs::agreementErrors(c, all, ranks);
    all.pop_back();  // a short gather is reported, not read past
    require(!mgs::agreementErrors(c, all, ranks).empty());
  }
  return 0;
}
