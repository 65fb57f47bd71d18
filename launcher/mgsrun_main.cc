// mgsrun: checks the MGS_* configuration and the MPI installation, then runs
//   mpirun -np N ... -x MGS_...=value ... command args...
// by exec, so mpirun's exit status (and its signal handling) is mgsrun's.
// Every error is reported as "mgsrun: error: ..." on stderr before anything
// starts; usage errors exit 2, a missing or foreign mpirun exits 127.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "common/params.h"
#include "launcher/check_build.h"
#include "launcher/command_builder.h"
#include "launcher/hosts.h"
#include "launcher/machine.h"
#include "launcher/mgs_vars.h"

namespace {

using mgs::launcher::flagNameFor;

constexpr int kUsageError = 2;
constexpr int kNoMpirun = 127;

int fail(const std::string& message, int code = kUsageError) {
  std::cerr << "mgsrun: error: " << message << "\n";
  if (code == kUsageError) std::cerr << "Run 'mgsrun --help' for usage.\n";
  return code;
}

// Open MPI spells long options with one dash ("-np", "-hostfile", "-mca"); CLI11
// short options are one letter, so those become their "--" spelling. --help
// lists them from here.
constexpr const char* kOneDashNames[] = {"np",      "hostfile",        "host",        "mca",     "bind-to", "map-by",
                                         "rank-by", "report-bindings", "display-map", "mpi-args"};

std::vector<std::string> normalizeArgs(std::vector<std::string> args) {
  for (auto& a : args) {
    if (a == "--") break;
    for (const char* name : kOneDashNames) {
      const std::string single = std::string("-") + name;
      if (a == single || a.rfind(single + "=", 0) == 0) a = "-" + a;
    }
  }
  return args;
}

// Options that stop the launch (print and exit): scanned before CLI11 so they need no -np.
bool wants(const std::vector<std::string>& args, const std::string& option) {
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == option) return true;
  }
  return false;
}

// CLI11's usage line cannot show the command after "--".
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: mgsrun -np N [OPTIONS] [--] command args...\n";
  }
};

std::string typeName(std::string type) {
  for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return type == "BOOL" ? "0|1" : type;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  args = normalizeArgs(args);
  if (wants(args, "--version")) {
    std::cout << "mgsrun " << MGS_LAUNCHER_VERSION << "\n";
    return 0;
  }
  if (wants(args, "--check-build")) return mgs::launcher::checkBuild(std::cout);
  // Everything after the first "--" is the command, untouched by CLI11.
  std::vector<std::string> command;
  const auto dashdash = std::find(args.begin(), args.end(), "--");
  const bool has_dashdash = dashdash != args.end();
  if (has_dashdash) {
    command.assign(dashdash + 1, args.end());
    args.erase(dashdash, args.end());
  }

  CLI::App app("Launch an mgs job with Open MPI's mpirun, forwarding and validating MGS_* settings.", "mgsrun");
  app.formatter(std::make_shared<UsageFormatter>());
  app.prefix_command();  // "mgsrun -np 2 python3 x.py --lr 1" works without "--"
  mgs::launcher::LaunchRequest req;
  bool verbose = false, dry_run = false;
  app.add_option("-n,--np,--num-proc", req.np, "Number of ranks (also spelled -np, as in mpirun)")->required();
  std::vector<std::string> hosts;
  app.add_option("-H,--host,--hosts", hosts, "Hosts and slots, host[:slots],... (repeatable); passed to mpirun -H")
      ->delimiter(',');
  app.add_option("--hostfile", req.hostfile, "Open MPI hostfile (also -hostfile); passed to mpirun --hostfile");
  app.add_flag("-v,--verbose", verbose, "Print the mpirun command (to stderr) before running it");
  app.add_flag("--dry-run", dry_run, "Print the mpirun command (to stdout) and exit 0 without running it");
  app.add_flag("--version", "Print mgsrun's version and exit");
  app.add_flag("--check-build", "Print what this mgs installation supports (MPI, CUDA, frameworks) and exit");

  const std::string mpi_group = "mpirun options (passed through to mpirun in the order given)";
  std::string bind_to, map_by, rank_by, mpi_args;
  std::vector<std::string> xs, mcas;
  bool report_bindings = false, display_map = false, no_env = false, tag_output = false;
  app.add_option("--bind-to", bind_to,
                 "Binding of ranks (core, socket, none...). Default: none, so a rank's threads are not "
                 "pinned to one core")
      ->group(mpi_group);
  app.add_option("--map-by", map_by, "Placement of ranks (slot, node, socket, ppr:N:node...)")->group(mpi_group);
  app.add_option("--rank-by", rank_by, "Ordering of ranks")->group(mpi_group);
  app.add_option("--mca", mcas, "An MCA parameter: --mca KEY VALUE (repeatable)")
      ->type_size(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(mpi_group);
  app.add_option("-x", xs, "Forward a variable: -x NAME or -x NAME=VALUE (repeatable)")->group(mpi_group);
  app.add_flag("--report-bindings", report_bindings, "Report each rank's binding")->group(mpi_group);
  app.add_flag("--display-map", display_map, "Show where ranks are placed")->group(mpi_group);
  app.add_flag("--tag-output", tag_output,
               "Prefix output with [job,rank]<stdout>: (off by default: Open MPI 4 tags what it reads, not lines, "
               "and cuts long lines in two)")
      ->group(mpi_group);
  app.add_option("--mpi-args", mpi_args,
                 "Any other mpirun options, as one string (horovodrun's spelling): --mpi-args=\"--mca btl tcp,self\"")
      ->group(mpi_group);
  app.add_flag("--no-env-forward", no_env,
               "Forward only MGS_*, PATH, LD_LIBRARY_PATH and PYTHONPATH, not the whole environment")
      ->group(mpi_group);

  const std::string group = "MGS parameters (each sets the MGS_* variable named, forwarded to every rank with -x)";
  std::map<std::string, std::string> values;  // parameter name -> flag value
  std::vector<std::pair<std::string, CLI::Option*>> param_opts;
  for (const auto& spec : mgs::paramSpecs()) {
    const std::string desc = mgs::launcher::flagHelp(spec);
    param_opts.emplace_back(spec.name, app.add_option("--" + flagNameFor(spec.name), values[spec.name], desc)
                                           ->type_name(typeName(spec.type))
                                           ->group(group));
  }
  std::string one_dash = "Open MPI's one-dash spellings work too:";
  for (const char* name : kOneDashNames) one_dash += std::string(name == kOneDashNames[0] ? " -" : ", -") + name;
  app.footer(one_dash +
             ".\nEvery MGS_* variable already in the environment is validated and forwarded too; a flag overrides "
             "the environment. An unknown MGS_* name is an error.\n"
             "The rest of the environment is forwarded by name (-x NAME), as horovodrun does; --no-env-forward "
             "turns that off.\n"
             "Examples:\n  mgsrun -np 4 -- ./my_job\n"
             "  mgsrun -np 4 -H node1:2,node2:2 --compressor gaussiank --density 0.001 -- python3 train.py\n");

  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes the vector reversed
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return fail(e.what());
  }
  const std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-')
    return fail("unknown option '" + rest.front() + "' (other mpirun options go in --mpi-args=\"...\")");
  if (has_dashdash && !rest.empty()) return fail("unexpected argument '" + rest.front() + "' before '--'");
  req.command = has_dashdash ? command : rest;

  if (!bind_to.empty()) req.mpi_args.insert(req.mpi_args.end(), {"--bind-to", bind_to});
  if (!map_by.empty()) req.mpi_args.insert(req.mpi_args.end(), {"--map-by", map_by});
  if (!rank_by.empty()) req.mpi_args.insert(req.mpi_args.end(), {"--rank-by", rank_by});
  if (report_bindings) req.mpi_args.push_back("--report-bindings");
  if (display_map) req.mpi_args.push_back("--display-map");
  if (tag_output) req.mpi_args.push_back("--tag-output");
  for (size_t i = 0; i + 1 < mcas.size(); i += 2)
    req.mpi_args.insert(req.mpi_args.end(), {"--mca", mcas[i], mcas[i + 1]});
  for (const auto& x : xs) req.mpi_args.insert(req.mpi_args.end(), {"-x", x});
  if (!mpi_args.empty()) {
    mgs::Status split = mgs::launcher::splitMpiArgs(mpi_args, &req.mpi_args);
    if (!split.ok()) return fail(split.message());
  }
  req.forward_env = !no_env;
  for (const auto& [name, opt] : param_opts)
    if (opt->count() > 0) req.flag_vars[name] = values[name];
  for (const auto& h : hosts) req.hosts += (req.hosts.empty() ? "" : ",") + h;
  if (!req.hostfile.empty()) {
    std::ifstream in(req.hostfile);
    if (!in) return fail("--hostfile " + req.hostfile + ": cannot read it (" + std::strerror(errno) + ")");
    std::stringstream text;
    text << in.rdbuf();
    req.hostfile_hosts = mgs::launcher::parseHostfile(text.str());
  }

  mgs::launcher::LaunchContext ctx;
  ctx.env = mgs::launcher::processEnvironment();
  ctx.is_root = mgs::launcher::runningAsRoot();
  ctx.local_cores = mgs::launcher::localCores();
  ctx.local_names = mgs::launcher::localHostNames();
  std::vector<std::string> mpirun_argv;
  mgs::Status st = mgs::launcher::buildMpirunArgv(req, ctx, &mpirun_argv);
  if (!st.ok()) return fail(st.message());

  std::string mpirun_path, version;
  st = mgs::launcher::probeMpirun(ctx.env.count("PATH") ? ctx.env.at("PATH") : "", &mpirun_path, &version);
  if (!st.ok()) return fail(st.message(), kNoMpirun);

  const std::string line = mgs::launcher::shellJoin(mpirun_argv);
  if (dry_run) {
    std::cout << line << std::endl;
    return 0;
  }
  if (verbose) std::cerr << "mgsrun: " << mpirun_path << " (" << version << ")\nmgsrun: " << line << std::endl;

  std::vector<char*> cargv;
  for (auto& a : mpirun_argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execv(mpirun_path.c_str(), cargv.data());
  return fail("cannot run " + mpirun_path + ": " + std::strerror(errno), kNoMpirun);
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
