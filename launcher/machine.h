// Facts about the machine mgsrun runs on, and the check that `mpirun` is Open
// MPI (mgsrun emits Open MPI flags: -x, --bind-to, --oversubscribe, ...).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {
namespace launcher {

// The whole environment of this process, name -> value.
std::map<std::string, std::string> processEnvironment();
bool runningAsRoot();
// CPUs this process may run on (sched_getaffinity), else hardware_concurrency, at least 1.
int localCores();
// This machine's host name, full and short ("n1.example.org", "n1").
std::vector<std::string> localHostNames();

// The first executable `name` in the ':'-separated `path_var`; "" when none.
std::string findInPath(const std::string& name, const std::string& path_var);
// True when `mpirun --version` output comes from Open MPI.
bool isOpenMpiVersionText(const std::string& text);
// Finds mpirun in `path_var` and checks it is Open MPI; on success `path` is
// where it is and `version` the first line of its --version output.
Status probeMpirun(const std::string& path_var, std::string* path, std::string* version);

}  // namespace launcher
}  // namespace mgs
