// MGS_* variables as seen by the launcher: the command-line flag derived from
// each entry of the parameter table, and validation of flag values and of the
// MGS_* variables already in the environment. Nothing here is declared twice:
// names, allowed values and messages all come from mgs::paramSpecs().
#pragma once

#include <map>
#include <string>

#include "common/params.h"
#include "common/status.h"

namespace mgs {
namespace launcher {

// "MGS_STALL_ABORT_S" -> "stall-abort-s" (the flag is "--stall-abort-s").
std::string flagNameFor(const std::string& param_name);

// The --help text of a parameter's flag, from its table row: doc, allowed
// values, default, and whether every rank must get the same value.
std::string flagHelp(const ParamSpec& spec);

// Checks every flag value (name -> value, names are MGS_* parameter names)
// against the table, then the merged set (environment's MGS_* overridden by
// the flags) exactly as mgs_init would, so an unknown MGS_* name in the
// environment is rejected here instead of on every rank. On success `merged`
// holds what the ranks will see.
Status validateVariables(const std::map<std::string, std::string>& flag_vars,
                         const std::map<std::string, std::string>& env, std::map<std::string, std::string>* merged);

}  // namespace launcher
}  // namespace mgs
