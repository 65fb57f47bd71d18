#include "launcher/machine.h"

#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <thread>

#include "launcher/command_builder.h"

extern char** environ;

namespace mgs {
namespace launcher {

std::map<std::string, std::string> processEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

bool runningAsRoot() { return geteuid() == 0; }

int localCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::vector<std::string> localHostNames() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return {};
  const std::string full(buf);
  return {full, full.substr(0, full.find('.'))};
}

std::string findInPath(const std::string& name, const std::string& path_var) {
  std::stringstream ss(path_var);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return "";
}

bool isOpenMpiVersionText(const std::string& text) {
  return text.find("Open MPI") != std::string::npos;  // also matches "mpirun (Open MPI) 4.1.4"
}

Status probeMpirun(const std::string& path_var, std::string* path, std::string* version) {
  const std::string found = findInPath("mpirun", path_var);
  if (found.empty())
    return Status(Code::kUnsupported,
                  "mpirun not found in PATH; install Open MPI (Debian: apt-get install openmpi-bin)");
  const std::string cmd = shellJoin({found, "--version"}) + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Status(Code::kInternal, "cannot run '" + cmd + "'");
  std::string out;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = pclose(pipe);
  const std::string first = out.substr(0, out.find('\n'));
  if (!isOpenMpiVersionText(out))
    return Status(Code::kUnsupported, found + " is not Open MPI ('" + found + " --version' printed '" + first +
                                          "'); mgsrun needs Open MPI's mpirun first in PATH");
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
    return Status(Code::kUnsupported, "'" + found + " --version' failed (status " + std::to_string(rc) + ")");
  *path = found;
  *version = first;
  return Status::OK();
}

}  // namespace launcher
}  // namespace mgs
