#include "launcher/command_builder.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/params.h"

namespace mgs {
namespace launcher {
namespace {

LaunchRequest request(int np, std::vector<std::string> command = {"./job", "--lr", "0.1"}) {
  LaunchRequest r;
  r.np = np;
  r.command = std::move(command);
  return r;
}

LaunchContext context(bool root = false, int cores = 4) {
  LaunchContext c;
  c.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}};
  c.is_root = root;
  c.local_cores = cores;
  c.local_names = {"node7.cluster", "node7"};
  return c;
}

std::vector<std::string> build(const LaunchRequest& r, const LaunchContext& c) {
  std::vector<std::string> argv;
  Status st = buildMpirunArgv(r, c, &argv);
  INFO(st.message());
  REQUIRE(st.ok());
  return argv;
}

bool has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

// True when `value` follows `flag` somewhere in argv ("-x", "MGS_DENSITY=0.01").
bool hasPair(const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag && argv[i + 1] == value) return true;
  return false;
}

std::string errorOf(const LaunchRequest& r, const LaunchContext& c) {
  std::vector<std::string> argv = {"untouched"};
  Status st = buildMpirunArgv(r, c, &argv);
  REQUIRE_FALSE(st.ok());
  CHECK(argv == std::vector<std::string>{"untouched"});
  return st.message();
}

TEST_CASE("minimal command: np, no output tags, PATH, command last", "[launcher]") {
  const auto argv = build(request(2), context());
  const std::vector<std::string> expected = {"mpirun", "-np", "2", "--bind-to", "none", "-x", "PATH", "./job", "--lr", "0.1"};
  CHECK(argv == expected);
}

TEST_CASE("allow-run-as-root only as root", "[launcher]") {
  CHECK(has(build(request(2), context(true)), "--allow-run-as-root"));
  CHECK_FALSE(has(build(request(2), context(false)), "--allow-run-as-root"));
}

TEST_CASE("oversubscribe when ranks exceed this machine's cores", "[launcher]") {
  CHECK_FALSE(has(build(request(4), context(false, 4)), "--oversubscribe"));
  CHECK(has(build(request(5), context(false, 4)), "--oversubscribe"));
  CHECK(has(build(request(2), context(false, 1)), "--oversubscribe"));

  SECTION("local host lists count as one host") {
    auto r = request(8);
    r.hosts = "localhost:4,node7:4,127.0.0.1";
    const auto argv = build(r, context(false, 4));
    CHECK(has(argv, "--oversubscribe"));
    CHECK(hasPair(argv, "-H", "localhost:4,node7:4,127.0.0.1"));
  }
  SECTION("host name match ignores case and user@") {
    auto r = request(8);
    r.hosts = "root@NODE7.cluster:8";
    CHECK(has(build(r, context(false, 4)), "--oversubscribe"));
  }
  SECTION("a remote host: mpirun places the ranks, no oversubscription") {
    auto r = request(8);
    r.hosts = "localhost:4,node8:4";
    CHECK_FALSE(has(build(r, context(false, 4)), "--oversubscribe"));
  }
  SECTION("hostfile hosts decide too") {
    auto r = request(8);
    r.hostfile = "/tmp/hosts";
    r.hostfile_hosts = {"localhost"};
    auto argv = build(r, context(false, 4));
    CHECK(has(argv, "--oversubscribe"));
    CHECK(hasPair(argv, "--hostfile", "/tmp/hosts"));
    r.hostfile_hosts = {"localhost", "node9"};
    CHECK_FALSE(has(build(r, context(false, 4)), "--oversubscribe"));
  }
}

TEST_CASE("flags become -x MGS_...=value and override the environment", "[launcher]") {
  auto r = request(2);
  r.flag_vars = {{"MGS_DENSITY", "0.01"}, {"MGS_COMPRESSOR", "gaussiank"}};
  auto c = context();
  c.env["MGS_DENSITY"] = "0.5";
  c.env["MGS_LOG_LEVEL"] = "debug";
  const auto argv = build(r, c);
  CHECK(hasPair(argv, "-x", "MGS_DENSITY=0.01"));
  CHECK_FALSE(hasPair(argv, "-x", "MGS_DENSITY=0.5"));
  CHECK(hasPair(argv, "-x", "MGS_COMPRESSOR=gaussiank"));
  CHECK(hasPair(argv, "-x", "MGS_LOG_LEVEL=debug"));  // from the environment
  CHECK_FALSE(hasPair(argv, "-x", "HOME"));           // only MGS_* and the search paths
  // The command comes after every mpirun option, untouched.
  CHECK(std::vector<std::string>(argv.end() - 3, argv.end()) == r.command);
}

TEST_CASE("search paths are forwarded by name only when set", "[launcher]") {
  auto c = context();
  CHECK_FALSE(hasPair(build(request(2), c), "-x", "PYTHONPATH"));
  CHECK_FALSE(hasPair(build(request(2), c), "-x", "LD_LIBRARY_PATH"));
  c.env["PYTHONPATH"] = "/opt/mgs/python";
  c.env["LD_LIBRARY_PATH"] = "/opt/mgs/lib";
  const auto argv = build(request(2), c);
  CHECK(hasPair(argv, "-x", "PYTHONPATH"));
  CHECK(hasPair(argv, "-x", "LD_LIBRARY_PATH"));
  CHECK(hasPair(argv, "-x", "PATH"));
}

TEST_CASE("bad flag values name the flag, the variable and what is allowed", "[launcher]") {
  auto r = request(2);
  r.flag_vars = {{"MGS_DENSITY", "2"}};
  const std::string msg = errorOf(r, context());
  CHECK_THAT(msg, Catch::Contains("--density"));
  CHECK_THAT(msg, Catch::Contains("MGS_DENSITY='2'"));
  CHECK_THAT(msg, Catch::Contains("(0, 1]"));

  r.flag_vars = {{"MGS_COMPRESSOR", "zip"}};
  CHECK_THAT(errorOf(r, context()), Catch::Contains("one of none, topk"));
  r.flag_vars = {{"MGS_ERROR_FEEDBACK", "yes"}};
  CHECK_THAT(errorOf(r, context()), Catch::Contains("0 or 1"));
}

TEST_CASE("the environment is validated like mgs_init does", "[launcher]") {
  auto c = context();
  c.env["MGS_FOO"] = "1";
  std::string msg = errorOf(request(2), c);
  CHECK_THAT(msg, Catch::Contains("unknown variable MGS_FOO='1'"));

  // The message is exactly what parseConfig (used by mgs_init) says, with a prefix.
  Config config;
  Status init = parseConfig({{"MGS_FOO", "1"}}, &config);
  CHECK_THAT(msg, Catch::EndsWith(init.message()));

  c = context();
  c.env["MGS_STALL_ABORT_S"] = "-1";
  CHECK_THAT(errorOf(request(2), c), Catch::Contains("MGS_STALL_ABORT_S='-1'"));

  SECTION("a valid flag replaces a bad environment value") {
    auto r = request(2);
    c.env["MGS_STALL_ABORT_S"] = "-1";
    r.flag_vars = {{"MGS_STALL_ABORT_S", "30"}};
    CHECK(hasPair(build(r, c), "-x", "MGS_STALL_ABORT_S=30"));
  }
}

TEST_CASE("bad requests are rejected before anything starts", "[launcher]") {
  CHECK_THAT(errorOf(request(0), context()), Catch::Contains(">= 1"));
  CHECK_THAT(errorOf(request(-3), context()), Catch::Contains("-np -3"));
  CHECK_THAT(errorOf(request(2, {}), context()), Catch::Contains("no command"));
  auto r = request(2);
  for (const char* hosts : {"a:0", "a:x", ":2", "a,,b", "a,", "a:"}) {
    r.hosts = hosts;
    INFO(hosts);
    CHECK_THAT(errorOf(r, context()), Catch::Contains("-H"));
  }
  r.hosts = "";
  r.hostfile = "/tmp/empty";
  CHECK_THAT(errorOf(r, context()), Catch::Contains("no hosts"));
}

TEST_CASE("shellJoin quotes only what a shell would split", "[launcher]") {
  CHECK(shellJoin({"mpirun", "-x", "MGS_TIMELINE=/tmp/t.json", "-np", "2"}) ==
        "mpirun -x MGS_TIMELINE=/tmp/t.json -np 2");
  CHECK(shellJoin({"python3", "-c", "print('a b')", ""}) == "python3 -c 'print('\\''a b'\\'')' ''");
}

TEST_CASE("the environment is forwarded by name, as horovodrun does", "[launcher]") {
  auto c = context();
  c.env["NCCL_DEBUG"] = "INFO";
  c.env["OMP_NUM_THREADS"] = "4";
  c.env["OMPI_COMM_WORLD_RANK"] = "0";
  c.env["PMIX_RANK"] = "0";
  c.env["BASH_FUNC_module%%"] = "() { :; }";
  c.env["PWD"] = "/somewhere";
  c.env["MGS_DENSITY"] = "0.5";
  auto argv = build(request(2), c);
  CHECK(hasPair(argv, "-x", "NCCL_DEBUG"));
  CHECK(hasPair(argv, "-x", "OMP_NUM_THREADS"));
  CHECK(hasPair(argv, "-x", "MGS_DENSITY=0.5"));  // MGS_* with the value mgsrun checked
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "BASH_FUNC_module%%", "PWD", "HOME", "MGS_DENSITY"})
    CHECK_FALSE(hasPair(argv, "-x", name));

  auto r = request(2);
  r.forward_env = false;
  argv = build(r, c);
  CHECK_FALSE(hasPair(argv, "-x", "NCCL_DEBUG"));
  CHECK(hasPair(argv, "-x", "PATH"));  // the search paths always travel
  CHECK(hasPair(argv, "-x", "MGS_DENSITY=0.5"));
}

TEST_CASE("isForwardedVariable", "[launcher]") {
  CHECK(isForwardedVariable("NCCL_SOCKET_IFNAME"));
  CHECK(isForwardedVariable("CUDA_VISIBLE_DEVICES"));
  CHECK_FALSE(isForwardedVariable(""));
  CHECK_FALSE(isForwardedVariable("1ABC"));
  CHECK_FALSE(isForwardedVariable("A-B"));
  CHECK_FALSE(isForwardedVariable("OMPI_MCA_btl"));
  CHECK_FALSE(isForwardedVariable("SHLVL"));
}

TEST_CASE("binding: none by default, the user's choice otherwise", "[launcher]") {
  CHECK(hasPair(build(request(2), context()), "--bind-to", "none"));
  auto r = request(2);
  r.mpi_args = {"--bind-to", "core", "--map-by", "socket"};
  auto argv = build(r, context());
  CHECK(hasPair(argv, "--bind-to", "core"));
  CHECK_FALSE(hasPair(argv, "--bind-to", "none"));
  CHECK(choosesBinding({"--bind-to=socket"}));
  CHECK(choosesBinding({"-bind-to", "core"}));
  CHECK_FALSE(choosesBinding({"--map-by", "core"}));
}

TEST_CASE("mpirun options pass through in order, before the command", "[launcher]") {
  auto r = request(2, {"python3", "train.py", "-x", "3"});
  r.mpi_args = {"--mca", "btl", "tcp,self", "-x", "FOO=1"};
  const auto argv = build(r, context());
  const auto at = std::find(argv.begin(), argv.end(), "--mca");
  REQUIRE(at != argv.end());
  CHECK(std::vector<std::string>(at, at + 5) == r.mpi_args);
  CHECK(std::vector<std::string>(argv.end() - 4, argv.end()) == r.command);
}

TEST_CASE("splitMpiArgs keeps quoted words together", "[launcher]") {
  std::vector<std::string> out = {"kept"};
  REQUIRE(splitMpiArgs("  --mca btl 'tcp, self' -x \"A=b c\" ", &out).ok());
  CHECK(out == std::vector<std::string>{"kept", "--mca", "btl", "tcp, self", "-x", "A=b c"});
  out.clear();
  REQUIRE(splitMpiArgs("", &out).ok());
  CHECK(out.empty());
  const Status st = splitMpiArgs("--mca 'btl", &out);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("unterminated"));
}

}  // namespace
}  // namespace launcher
}  // namespace mgs
