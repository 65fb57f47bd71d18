#include "common/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace mgs {

spdlog::logger& logger() {
  // Function-local static: created once, thread-safe, never destroyed before
  // the coordinator thread (which may log during shutdown) has stopped.
  static std::shared_ptr<spdlog::logger> lg = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto l = std::make_shared<spdlog::logger>("mgs", sink);
    l->set_pattern("[%H:%M:%S.%e] [mgs rank ?] [%^%l%$] %v");
    l->set_level(spdlog::level::warn);
    l->flush_on(spdlog::level::warn);
    return l;
  }();
  return *lg;
}

void configureLogging(int rank, const std::string& level) {
  auto& lg = logger();
  lg.set_pattern("[%H:%M:%S.%e] [mgs rank " + std::to_string(rank) + "] [%^%l%$] %v");
  lg.set_level(spdlog::level::from_str(level));
}

}  // namespace mgs
