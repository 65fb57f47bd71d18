#include "launcher/mgs_vars.h"

#include <cctype>

namespace mgs {
namespace launcher {

std::string flagNameFor(const std::string& param_name) {
  std::string s = param_name.rfind("MGS_", 0) == 0 ? param_name.substr(4) : param_name;
  for (char& c : s) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string flagHelp(const ParamSpec& spec) {
  const std::string def = spec.default_value.empty() ? "unset" : spec.default_value;
  return spec.name + ": " + spec.doc + " Allowed: " + spec.allowed + ". Default: " + def + "." +
         (spec.scope == Scope::kSameOnAllRanks ? " Same on every rank (checked at mgs_init)." : "");
}

Status validateVariables(const std::map<std::string, std::string>& flag_vars,
                         const std::map<std::string, std::string>& env, std::map<std::string, std::string>* merged) {
  // Flags first, so a bad flag is reported as the flag the user typed.
  for (const auto& [name, value] : flag_vars) {
    const ParamSpec* spec = findParam(name);
    if (spec == nullptr) return Status(Code::kInternal, "no MGS parameter named " + name);
    Config scratch;
    Status st = spec->apply(value, scratch);
    if (!st.ok()) return Status(st.code(), "--" + flagNameFor(name) + ": " + st.message());
  }
  std::map<std::string, std::string> vars;
  for (const auto& [name, value] : env)
    if (name.rfind("MGS_", 0) == 0) vars[name] = value;
  for (const auto& [name, value] : flag_vars) vars[name] = value;  // a flag beats the environment
  Config config;
  Status st = parseConfig(vars, &config);
  if (!st.ok()) return Status(st.code(), "environment: " + st.message());
  *merged = std::move(vars);
  return Status::OK();
}

}  // namespace launcher
}  // namespace mgs
