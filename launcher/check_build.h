// mgsrun --check-build: what this installation can run, in horovodrun's layout
// (frameworks found by the python3 on PATH, the MPI launcher, GPU support built).
#pragma once

#include <ostream>
#include <string>

namespace mgs {
namespace launcher {

// One "[X] name detail" line of the report.
std::string checkLine(bool available, const std::string& name, const std::string& detail);

// Prints the report; returns 0 (the report itself says what is missing).
int checkBuild(std::ostream& out);

}  // namespace launcher
}  // namespace mgs
