#include "launcher/machine.h"

#include <catch2/catch.hpp>

namespace mgs {
namespace launcher {
namespace {

TEST_CASE("Open MPI is recognised from mpirun --version", "[launcher]") {
  CHECK(isOpenMpiVersionText("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"));
  CHECK(isOpenMpiVersionText("mpirun (Open MPI) 5.0.3"));
  CHECK_FALSE(isOpenMpiVersionText("HYDRA build details:\n    Version: 4.0.2\n"));
  CHECK_FALSE(isOpenMpiVersionText("Intel(R) MPI Library for Linux* OS, Version 2021.6"));
  CHECK_FALSE(isOpenMpiVersionText(""));
}

TEST_CASE("findInPath finds executables only", "[launcher]") {
  CHECK(findInPath("sh", "/nonexistent:/bin:/usr/bin").find("/sh") != std::string::npos);
  CHECK(findInPath("sh", "/nonexistent").empty());
  CHECK(findInPath("passwd", "/etc").empty());  // /etc/passwd exists but is not executable
}

TEST_CASE("localCores is at least one", "[launcher]") { CHECK(localCores() >= 1); }

}  // namespace
}  // namespace launcher
}  // namespace mgs
