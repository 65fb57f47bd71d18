// Host lists for mpirun: `-H host[:slots],...` and hostfiles. The launcher only
// needs to know the host names (to tell a single-host run, where it may add
// --oversubscribe) and to reject a malformed list before mpirun starts.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {
namespace launcher {

struct HostSlots {
  std::string host;
  int slots = 0;  // 0: not given
};

// Parses "a:2,b,c:4" (the value of -H). Empty entries, empty host names and
// slot counts that are not integers >= 1 are errors.
Status parseHostList(const std::string& list, std::vector<HostSlots>* out);

// Host names of an Open MPI hostfile's text: the first word of each line,
// '#' starts a comment ("node1 slots=4 max_slots=8" -> "node1").
std::vector<std::string> parseHostfile(const std::string& text);

// True when `host` names this machine: localhost, a loopback address, or one of
// `local_names` (this machine's host name, full or short). Case-insensitive; a
// "user@" prefix is ignored.
bool isLocalHost(const std::string& host, const std::vector<std::string>& local_names);

}  // namespace launcher
}  // namespace mgs
