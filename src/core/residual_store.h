// Error-feedback residuals, one fp32 slice per tensor name. Residuals are
// per tensor (not per bucket) so they survive re-planning, but they are
// stored in slabs laid out like the bucket that last used them: a bucket asks
// for contiguous() storage of its members and gets the slab itself when the
// layout already matches (every step once the plan is stable), so the
// pipeline adds gradients into it and the selector works on it in place, with
// no gather or scatter copies. A new layout (a new plan, a partial bucket)
// moves the members' residuals into a new slab once.
//
// The coordinator is the only writer and holds lock() while it updates a slab;
// framework threads read or restore copies (mgs_residual_copy/restore).
//
// Residuals may also live outside this store, in memory a resident local
// stage owns (device memory: core/routed_local_stage.h). Such a stage
// registers as the External holder: read, copyOut and copyIn ask it first, so
// the C ABI sees one residual per name wherever it lives. A name is held by
// exactly one of the two: the stage takes a residual out of here when it
// adopts the name (takeLocked) and puts it back when it gives the name up
// (putLocked).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mgs {

class ResidualStore {
 public:
  struct Member {
    const std::string* name;
    size_t n;
  };

  // Held by the coordinator around contiguous() and the in-place update.
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }
  // Contiguous storage for the residuals of `members`, in this order (zeros
  // for a name without a residual of that size). Valid until the next call;
  // the caller holds lock().
  float* contiguous(const std::vector<Member>& members);

  using Slab = std::shared_ptr<std::vector<float>>;
  // Makes `slab` (members' residuals back to back, in this order, exactly
  // their total size) the storage of those residuals: how a sparse bucket
  // commits the residual it computed in a scratch slab. Returns the slab the
  // members used before if nothing references it any more (for reuse), else
  // null. The caller holds lock().
  Slab adopt(const std::vector<Member>& members, Slab slab);

  // Residuals held in memory of a resident local stage. Every call comes
  // with lock() held (the store calls it under its own lock; the stage holds
  // lock() while it changes what it holds).
  class External {
   public:
    virtual ~External() = default;
    // *n = the residual's size when `name` is held there.
    virtual bool holds(const std::string& name, size_t* n) const = 0;
    virtual Status read(const std::string& name, float* dst, size_t n) const = 0;
    // src[0..n) into the held residual of that size.
    virtual Status write(const std::string& name, const float* src, size_t n) = 0;
    // Forget `name` (the store holds its residual from now on).
    virtual void drop(const std::string& name) = 0;
  };
  // nullptr unregisters. The holder must outlive its registration.
  void setExternal(External* external) {
    std::lock_guard<std::mutex> lk(mu_);
    external_ = external;
  }
  // For a resident stage adopting `name`: copy its residual here into
  // dst[0..n) (zeros if none or of another size) and forget it. The caller
  // holds lock().
  void takeLocked(const std::string& name, float* dst, size_t n);
  // For a resident stage giving `name` up: this store holds src[0..n) as its
  // residual from now on. The caller holds lock().
  void putLocked(const std::string& name, const float* src, size_t n) { writeLocked(name, src, n); }

  // Copy the residual of `name` (zeros if none yet) into dst[0..n).
  void read(const std::string& name, float* dst, size_t n) const;
  // For callers: kInvalidArgument if the tensor has no residual or n differs.
  Status copyOut(const std::string& name, float* dst, size_t n) const;
  Status copyIn(const std::string& name, const float* src, size_t n);

 private:
  struct Slot {
    std::shared_ptr<std::vector<float>> slab;
    size_t offset = 0, n = 0;
    float* data() const { return slab->data() + offset; }
  };
  void writeLocked(const std::string& name, const float* src, size_t n);

  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> map_;
  External* external_ = nullptr;
};

}  // namespace mgs
