// One named spdlog logger ("mgs") with the rank in its pattern. Use the
// MGS_LOG_* macros: they check the level before formatting anything.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace mgs {

// The process's mgs logger (created on first use, level "warn").
spdlog::logger& logger();
// Put `rank` into the pattern and set the level ("trace".."error", "off").
void configureLogging(int rank, const std::string& level);

}  // namespace mgs

#define MGS_LOG_AT(lvl, ...)                                    \
  do {                                                          \
    auto& _mgs_lg = ::mgs::logger();                            \
    if (_mgs_lg.should_log(lvl)) _mgs_lg.log(lvl, __VA_ARGS__); \
  } while (0)
#define MGS_LOG_TRACE(...) MGS_LOG_AT(spdlog::level::trace, __VA_ARGS__)
#define MGS_LOG_DEBUG(...) MGS_LOG_AT(spdlog::level::debug, __VA_ARGS__)
#define MGS_LOG_INFO(...) MGS_LOG_AT(spdlog::level::info, __VA_ARGS__)
#define MGS_LOG_WARN(...) MGS_LOG_AT(spdlog::level::warn, __VA_ARGS__)
#define MGS_LOG_ERROR(...) MGS_LOG_AT(spdlog::level::err, __VA_ARGS__)
