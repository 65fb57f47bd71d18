// Runs P "ranks" as threads of this process, each with its own Runtime over
// a ThreadCommunicator: the negotiation and execution code paths of a real
// job, without MPI.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "comm/fake/thread_communicator.h"
#include "core/handle_table.h"
#include "core/runtime.h"

namespace mgs::test {

// Builds rank r's communicator over the shared world (tests wrap it to inject faults).
using CommMaker = std::function<std::unique_ptr<Communicator>(std::shared_ptr<ThreadWorld>, int rank)>;

// Rank r's device communicator (GPU tests: comm/cuda_thread), or none.
using DeviceMaker = std::function<Status(int rank, Communicator& bootstrap, device::DeviceComm* out)>;

inline void runRanks(int P, const Config& config, const std::function<void(Runtime&, int rank)>& body,
                     const CommMaker& make = nullptr, const DeviceMaker& device = nullptr) {
  auto world = std::make_shared<ThreadWorld>(P);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(P);
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Runtime> rt;
      Status st = Runtime::start(
          config,
          [world, r, &make](std::unique_ptr<Communicator>* out) {
            if (make)
              *out = make(world, r);
            else
              out->reset(new ThreadCommunicator(world, r));
            return Status::OK();
          },
          &rt,
          device ? device::DeviceCommFactory([r, &device](Communicator& boot, device::DeviceComm* out) {
            return device(r, boot, out);
          })
                 : device::DeviceCommFactory());
      if (!st.ok()) {
        errors[r] = st.toString();
        return;
      }
      body(*rt, r);
      rt->shutdown();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE(e.empty());
}

inline TensorDesc cpuDesc(void* data, DataType dtype, std::vector<int64_t> shape) {
  TensorDesc t;
  t.data = data;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

// A Laplace-distributed value (scale 1): heavy-tailed like real gradients.
inline float laplace(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  const double v = u(rng);
  return static_cast<float>((v < 0 ? 1 : -1) * std::log(1 - 2 * std::fabs(v) + 1e-12));
}

// Wait for a handle and release it; returns the op's status.
inline Status waitRelease(Runtime& rt, uint64_t id) {
  Status st = rt.handles().get(id)->wait();
  rt.handles().release(id);
  return st;
}

}  // namespace mgs::test
