// Chrome-trace timeline (chrome://tracing, Perfetto), written by rank 0's
// coordinator only. Each tensor gets its own track. Events are appended and
// flushed every cycle, so the file is loadable even if training stops early
// (the trace viewer accepts a JSON array without its closing bracket); a clean
// shutdown closes the array, making the file strict JSON.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "core/request.h"

namespace mgs {

class Timeline {
 public:
  static Status open(const std::string& path, std::unique_ptr<Timeline>* out);
  ~Timeline();

  // A complete event ("ph":"X") on the tensor's track.
  void span(const std::string& tensor, const char* activity, Clock::time_point start, Clock::time_point end,
            const std::string& args_json = "");
  void flush();

 private:
  explicit Timeline(std::FILE* f) : file_(f), origin_(Clock::now()) {}
  int trackOf(const std::string& tensor);
  void write(const std::string& line);

  std::FILE* file_;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> tracks_;
  bool first_ = true;
};

// JSON string literal with quotes, escaping what JSON requires.
std::string jsonQuote(const std::string& s);

}  // namespace mgs
