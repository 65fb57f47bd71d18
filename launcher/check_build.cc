#include "launcher/check_build.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "launcher/machine.h"

#ifndef MGS_LAUNCHER_VERSION
#define MGS_LAUNCHER_VERSION "unknown"
#endif
#ifndef MGS_LAUNCHER_CUDA
#define MGS_LAUNCHER_CUDA 0
#endif
#ifndef MGS_LAUNCHER_NCCL
#define MGS_LAUNCHER_NCCL 0
#endif

namespace mgs {
namespace launcher {
namespace {

// Asks the python3 on PATH which packages it can import (by spec lookup: no
// framework is imported, so this takes well under a second). Lines "name version".
std::map<std::string, std::string> pythonPackages(std::string* python) {
  std::map<std::string, std::string> found;
  const auto env = processEnvironment();
  *python = findInPath("python3", env.count("PATH") ? env.at("PATH") : "");
  if (python->empty()) return found;
  const std::string cmd =
      "'" + *python +
      "' -c 'import importlib.util as u, importlib.metadata as m\n"
      "for pkg, dist in ((\"torch\", \"torch\"), (\"tensorflow\", \"tensorflow\"), (\"mgs\", \"mgs\")):\n"
      "    if u.find_spec(pkg) is None: continue\n"
      "    try: v = m.version(dist)\n"
      "    except Exception:\n"
      "        try: v = m.version(dist + \"-cpu\")\n"
      "        except Exception: v = \"\"\n"
      "    print(pkg, v)' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return found;
  char line[512];
  while (fgets(line, sizeof line, pipe) != nullptr) {
    std::istringstream words(line);
    std::string name, version;
    words >> name >> version;
    if (!name.empty()) found[name] = version;
  }
  pclose(pipe);
  return found;
}

}  // namespace

std::string checkLine(bool available, const std::string& name, const std::string& detail) {
  return std::string("    [") + (available ? "X" : " ") + "] " + name + (detail.empty() ? "" : " (" + detail + ")");
}

int checkBuild(std::ostream& out) {
  std::string python;
  const auto pkgs = pythonPackages(&python);
  const auto env = processEnvironment();
  std::string mpirun, version;
  const bool mpi_ok = probeMpirun(env.count("PATH") ? env.at("PATH") : "", &mpirun, &version).ok();
  auto pkg = [&](const std::string& name) { return pkgs.count(name) > 0; };
  auto ver = [&](const std::string& name) { return pkg(name) ? pkgs.at(name) : std::string(); };
  out << "mgs v" << MGS_LAUNCHER_VERSION << ":\n\n"
      << "Available Frameworks (" << (python.empty() ? "no python3 on PATH" : python) << "):\n"
      << checkLine(pkg("torch"), "PyTorch", ver("torch")) << "\n"
      << checkLine(pkg("tensorflow"), "TensorFlow", ver("tensorflow")) << "\n"
      << checkLine(pkg("mgs"), "mgs Python package", pkg("mgs") ? "mgs.torch, mgs.tensorflow" : "") << "\n\n"
      << "Available Controllers:\n"
      << checkLine(mpi_ok, "MPI", mpi_ok ? version + ", " + mpirun : "no Open MPI mpirun on PATH") << "\n"
      << checkLine(false, "Gloo", "") << "\n\n"
      << "Available Tensor Operations:\n"
      << checkLine(MGS_LAUNCHER_NCCL != 0, "NCCL", "") << "\n"
      << checkLine(MGS_LAUNCHER_CUDA != 0, "CUDA kernels", "") << "\n"
      << checkLine(true, "MPI", "CPU tensors; sparse allgather and dense allreduce") << "\n";
  return 0;
}

}  // namespace launcher
}  // namespace mgs
