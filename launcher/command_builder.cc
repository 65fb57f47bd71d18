#include "launcher/command_builder.h"

#include <cctype>

#include "launcher/hosts.h"
#include "launcher/mgs_vars.h"

namespace mgs {
namespace launcher {

Status buildMpirunArgv(const LaunchRequest& request, const LaunchContext& context, std::vector<std::string>* argv) {
  if (request.np < 1)
    return Status(Code::kInvalidArgument, "-np " + std::to_string(request.np) + ": the number of ranks must be >= 1");
  if (request.command.empty() || request.command.front().empty())
    return Status(Code::kInvalidArgument, "no command to run (usage: mgsrun -np N [options] -- command args...)");

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
  for (const auto& h : request.hostfile_hosts) single_host = single_host && isLocalHost(h, context.local_names);

  std::vector<std::string> a = {"mpirun", "-np", std::to_string(request.np)};
  if (!request.hosts.empty()) a.insert(a.end(), {"-H", request.hosts});
  if (!request.hostfile.empty()) a.insert(a.end(), {"--hostfile", request.hostfile});
  // Open MPI refuses to run as root without this; never add it otherwise.
  if (context.is_root) a.push_back("--allow-run-as-root");
  if (single_host && request.np > context.local_cores) a.push_back("--oversubscribe");
  if (!choosesBinding(request.mpi_args)) a.insert(a.end(), {"--bind-to", "none"});
  // No --tag-output by default: Open MPI 4 tags every chunk it reads from a
  // rank's terminal, not every line, so long lines came out cut in two with a
  // tag in the middle (15-80 of 600 lines of 150 characters in a 2-rank test,
  // each written with one write()). mgs's own messages name their rank; a
  // user who wants tags passes --tag-output through.
  a.insert(a.end(), request.mpi_args.begin(), request.mpi_args.end());
  // Name-only -x forwards mgsrun's own value, so remote ranks see the user's
  // environment (programs, library paths, framework settings) as horovodrun does.
  for (const auto& [name, value] : context.env) {
    const bool search_path = name == "PATH" || name == "LD_LIBRARY_PATH" || name == "PYTHONPATH";
    if (search_path || (request.forward_env && isForwardedVariable(name))) a.insert(a.end(), {"-x", name});
  }
  for (const auto& [name, value] : vars) a.insert(a.end(), {"-x", name + "=" + value});
  a.insert(a.end(), request.command.begin(), request.command.end());
  *argv = std::move(a);
  return Status::OK();
}

bool isForwardedVariable(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  for (const char* prefix : {"MGS_", "OMPI_", "PMIX_", "PMI_", "BASH_FUNC_", "SLURM_"})
    if (name.rfind(prefix, 0) == 0) return false;
  for (const char* skip :
       {"_", "PWD", "OLDPWD", "SHLVL", "HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "DISPLAY", "SSH_CLIENT",
        "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_SESSION_ID"})
    if (name == skip) return false;
  return true;
}

bool choosesBinding(const std::vector<std::string>& mpi_args) {
  for (const auto& a : mpi_args)
    if (a == "--bind-to" || a == "-bind-to" || a.rfind("--bind-to=", 0) == 0) return true;
  return false;
}

Status splitMpiArgs(const std::string& text, std::vector<std::string>* out) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) return Status(Code::kInvalidArgument, "--mpi-args '" + text + "': unterminated " + std::string(1, quote));
  if (in_word) words.push_back(word);
  out->insert(out->end(), words.begin(), words.end());
  return Status::OK();
}

std::string shellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !arg.empty();
    for (char c : arg)
      plain = plain &&
              (std::isalnum(static_cast<unsigned char>(c)) || std::string("@%+=:,./_-").find(c) != std::string::npos);
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
