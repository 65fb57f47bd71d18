// Minimal binary (de)serialisation for negotiation messages. Both ends are
// the same build on the same kind of host, so fixed-width little-endian
// copies suffice; the reader checks bounds so a corrupt message is an error,
// not a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mgs {

class WireWriter {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void putString(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  void putShape(const std::vector<int64_t>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) put(x);
  }
  std::string& str() { return buf_; }

 private:
  std::string buf_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& s) : p_(s.data()), end_(s.data() + s.size()) {}
  template <typename T>
  bool get(T* v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool getString(std::string* s) {
    uint32_t n;
    if (!get(&n) || static_cast<size_t>(end_ - p_) < n) return false;
    s->assign(p_, n);
    p_ += n;
    return true;
  }
  bool getShape(std::vector<int64_t>* v) {
    uint32_t n;
    if (!get(&n) || n > 64) return false;
    v->resize(n);
    for (auto& x : *v)
      if (!get(&x)) return false;
    return true;
  }
  bool atEnd() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace mgs
