// Turns what the user asked for plus facts about this machine into the mpirun
// argv. Pure: no environment reads, no I/O, so every rule is unit-tested
// (tests/launcher/command_builder_test.cc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {
namespace launcher {

// What the user asked for (already split out of the command line).
struct LaunchRequest {
  int np = 0;
  std::string hosts;                             // value of -H, "" when not given
  std::string hostfile;                          // path, "" when not given
  std::vector<std::string> hostfile_hosts;       // host names read from `hostfile`
  std::map<std::string, std::string> flag_vars;  // MGS_* name -> value, from flags
  std::vector<std::string> command;              // program and its arguments
  std::vector<std::string> mpi_args;             // other mpirun options, passed through in order
  bool forward_env = true;                       // -x every exportable variable (horovodrun's way)
};

// Facts about the machine mgsrun runs on.
struct LaunchContext {
  std::map<std::string, std::string> env;  // the environment (at least PATH, ... and MGS_*)
  bool is_root = false;
  int local_cores = 1;
  std::vector<std::string> local_names;  // this machine's host names
};

// Validates the request (np, host list, every MGS_* value and name, a
// non-empty command) and builds
//   mpirun -np N [-H ...] [--hostfile F] [--allow-run-as-root] [--oversubscribe]
//          [--bind-to none] [mpi_args...] [-x NAME ...] -x MGS_...=v ... command...
// --oversubscribe is added when every rank runs on this machine (no host list,
// or only local hosts) and N exceeds its cores. --bind-to none is added unless
// mpi_args choose a binding: Open MPI's default pins each rank to one core when
// np <= 2, which the coordinator thread, intra-op threads and data loaders then
// share. Every exportable variable of the environment is forwarded by name (as
// horovodrun does; see isForwardedVariable), MGS_* ones with their checked value.
Status buildMpirunArgv(const LaunchRequest& request, const LaunchContext& context, std::vector<std::string>* argv);

// True for an environment variable mgsrun forwards with -x NAME: a shell-safe
// name that is not per-process state (PWD, SHLVL, ...), an MPI launcher's own
// (OMPI_*, PMIX_*, PMI_*), a shell function, or MGS_* (forwarded with values).
bool isForwardedVariable(const std::string& name);

// True when mpirun options already choose a binding (--bind-to, -bind-to, --bind-to=...).
bool choosesBinding(const std::vector<std::string>& mpi_args);

// Splits a --mpi-args string on whitespace, keeping '...' and "..." quoted parts together.
Status splitMpiArgs(const std::string& text, std::vector<std::string>* out);

// One line a shell reads back as the same argv (single quotes where needed).
std::string shellJoin(const std::vector<std::string>& argv);

}  // namespace launcher
}  // namespace mgs
