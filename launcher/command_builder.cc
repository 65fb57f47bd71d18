#include "launcher/command_builder.h"

#include <cctype>

#include "launcher/hosts.h"
#include "launcher/mgs_vars.h"

namespace mgs {
namespace launcher {

Status buildMpirunArgv(const LaunchRequest& request, const LaunchContext& context,
                       std::vector<std::string>* argv) {
  if (request.np < 1)
    return Status(Code::kInvalidArgument,
                  "-np " + std::to_string(request.np) + ": the number of ranks must be >= 1");
  if (request.command.empty() || request.command.front().empty())
    return Status(Code::kInvalidArgument,
                  "no command to run (usage: mgsrun -np N [options] -- command args...)");

  std::vector<HostSlots> hosts;
  if (!request.hosts.empty()) {
    Status st = parseHostList(request.hosts, &hosts);
    if (!st.ok()) return st;
  }
  if (!request.hostfile.empty() && request.hostfile_hosts.empty())
    return Status(Code::kInvalidArgument, "--hostfile " + request.hostfile + ": no hosts in the file");

  std::map<std::string, std::string> vars;
  Status st = validateVariables(request.flag_vars, context.env, &vars);
  if (!st.ok()) return st;

  bool single_host = true;
  for (const auto& h : hosts) single_host = single_host && isLocalHost(h.host, context.local_names);
  for (const auto& h : request.hostfile_hosts)
    single_host = single_host && isLocalHost(h, context.local_names);

  std::vector<std::string> a = {"mpirun", "-np", std::to_string(request.np)};
  if (!request.hosts.empty()) a.insert(a.end(), {"-H", request.hosts});
  if (!request.hostfile.empty()) a.insert(a.end(), {"--hostfile", request.hostfile});
  // Open MPI refuses to run as root without this; never add it otherwise.
  if (context.is_root) a.push_back("--allow-run-as-root");
  if (single_host && request.np > context.local_cores) a.push_back("--oversubscribe");
  a.push_back("--tag-output");
  // Name-only -x forwards mgsrun's own value, so remote ranks find the same programs.
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH"})
    if (context.env.count(name)) a.insert(a.end(), {"-x", name});
  for (const auto& [name, value] : vars) a.insert(a.end(), {"-x", name + "=" + value});
  a.insert(a.end(), request.command.begin(), request.command.end());
  *argv = std::move(a);
  return Status::OK();
}

std::string shellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !arg.empty();
    for (char c : arg)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) ||
                        std::string("@%+=:,./_-").find(c) != std::string::npos);
    if (plain) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace launcher
}  // namespace mgs
