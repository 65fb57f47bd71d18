#include "core/timeline.h"

#include <cerrno>
#include <cstring>

namespace mgs {

std::string jsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

Status Timeline::open(const std::string& path, std::unique_ptr<Timeline>* out) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status(Code::kConfig, "cannot open MGS_TIMELINE='" + path + "' for writing: " + std::strerror(errno));
  std::fputs("[\n", f);
  out->reset(new Timeline(f));
  return Status::OK();
}

Timeline::~Timeline() {
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Timeline::write(const std::string& line) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(line.c_str(), file_);
}

int Timeline::trackOf(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  const int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(tensor, id);
  write("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(id) +
        ",\"args\":{\"name\":" + jsonQuote(tensor) + "}}");
  return id;
}

void Timeline::span(const std::string& tensor, const char* activity, Clock::time_point start, Clock::time_point end,
                    const std::string& args_json) {
  const int tid = trackOf(tensor);
  using us = std::chrono::duration<double, std::micro>;
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
                activity, tid, us(start - origin_).count(), us(end - start).count());
  std::string line = buf;
  if (!args_json.empty()) line += ",\"args\":" + args_json;
  write(line + "}");
}

void Timeline::flush() { std::fflush(file_); }

}  // namespace mgs
