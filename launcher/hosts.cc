#include "launcher/hosts.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace mgs {
namespace launcher {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Status parseHostList(const std::string& list, std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream ss(list);
  std::string entry;
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "-H '" + list + "': " + why + " (expected host[:slots],... with slots >= 1)");
  };
  if (list.empty()) return bad("empty host list");
  while (std::getline(ss, entry, ',')) {
    if (entry.empty()) return bad("empty entry");
    HostSlots h;
    const auto colon = entry.rfind(':');
    h.host = entry.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string n = entry.substr(colon + 1);
      if (n.empty() || n.size() > 6 || !std::all_of(n.begin(), n.end(), ::isdigit) || std::stoi(n) < 1)
        return bad("bad slot count '" + n + "' for host '" + h.host + "'");
      h.slots = std::stoi(n);
    }
    if (h.host.empty()) return bad("empty host name in '" + entry + "'");
    hosts.push_back(h);
  }
  if (!list.empty() && list.back() == ',') return bad("empty entry");
  *out = std::move(hosts);
  return Status::OK();
}

std::vector<std::string> parseHostfile(const std::string& text) {
  std::vector<std::string> hosts;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    std::string host;
    if (words >> host) hosts.push_back(host);
  }
  return hosts;
}

bool isLocalHost(const std::string& host, const std::vector<std::string>& local_names) {
  std::string h = lower(host.substr(host.find('@') == std::string::npos ? 0 : host.find('@') + 1));
  if (h == "localhost" || h == "localhost.localdomain" || h == "::1" || h.rfind("127.", 0) == 0) return true;
  for (const auto& name : local_names)
    if (!name.empty() && h == lower(name)) return true;
  return false;
}

}  // namespace launcher
}  // namespace mgs
