// MGS_BACKEND's decision at init (core/device_backend.h), on the CPU: the
// rules for every combination of build and host, the messages naming every
// rank that cannot run NCCL, and real runtimes (ranks as threads) failing at
// init on every rank when 'nccl' cannot run here (this machine has no GPU).
#include <catch2/catch.hpp>

#include <thread>

#include "comm/fake/thread_communicator.h"
#include "core/device.h"
#include "core/device_backend.h"
#include "core/runtime.h"

using namespace mgs;

namespace {
const int32_t kFull = localBackendWord(true, true, 1);
}

TEST_CASE("backend: local word and when init agrees", "[backend]") {
  CHECK(localBackendWord(false, false, 0) == 0);
  CHECK(localBackendWord(true, false, 2) == (kBackendBuiltCuda | kBackendHasDevice));
  CHECK(kFull == (kBackendBuiltCuda | kBackendBuiltNccl | kBackendHasDevice));
  CHECK(localBackendWord(true, true, 0) == (kBackendBuiltCuda | kBackendBuiltNccl));
  CHECK(!backendNeedsAgreement("mpi", true));
  CHECK(!backendNeedsAgreement("auto", false));  // no collective added to CPU-only builds
  CHECK(backendNeedsAgreement("auto", true));
  CHECK(backendNeedsAgreement("nccl", false));  // every rank must learn why, none may enter NCCL alone
}

TEST_CASE("backend: mpi and auto", "[backend]") {
  BackendMode m = BackendMode::kNcclAtInit;
  REQUIRE(agreeBackend("mpi", {}, 0, &m).ok());
  CHECK(m == BackendMode::kMpi);
  REQUIRE(agreeBackend("mpi", {0, 0}, 0, &m).ok());
  CHECK(m == BackendMode::kMpi);
  REQUIRE(agreeBackend("auto", {kFull, kFull, kFull}, 1, &m).ok());
  CHECK(m == BackendMode::kNcclLazy);
  // One rank without a device: everybody stays on MPI (never a mixed job).
  REQUIRE(agreeBackend("auto", {kFull, localBackendWord(true, true, 0), kFull}, 0, &m).ok());
  CHECK(m == BackendMode::kMpi);
  REQUIRE(agreeBackend("auto", {}, 0, &m).ok());  // a build without NCCL skips the agreement
  CHECK(m == BackendMode::kMpi);
  Status st = agreeBackend("gloo", {kFull}, 0, &m);
  CHECK(st.code() == Code::kConfig);
  CHECK(st.message().find("'gloo'") != std::string::npos);
}

TEST_CASE("backend: nccl names every rank that cannot run it and why", "[backend]") {
  BackendMode m = BackendMode::kMpi;
  REQUIRE(agreeBackend("nccl", {kFull, kFull}, 0, &m).ok());
  CHECK(m == BackendMode::kNcclAtInit);
  const std::vector<int32_t> words = {kFull, localBackendWord(false, false, 0), localBackendWord(true, false, 1),
                                      localBackendWord(true, true, 0)};
  for (int me = 0; me < 4; ++me) {
    Status st = agreeBackend("nccl", words, me, &m);
    INFO(st.message());
    CHECK(st.code() == Code::kUnsupported);
    CHECK(st.message().find("MGS_BACKEND=nccl cannot run") != std::string::npos);
    CHECK(st.message().find("rank 0") == std::string::npos);
    CHECK(st.message().find("rank 1" + std::string(me == 1 ? " (this rank)" : "") +
                            ": its mgs library was built without CUDA") != std::string::npos);
    CHECK(st.message().find("rank 2" + std::string(me == 2 ? " (this rank)" : "") +
                            ": its mgs library was built without NCCL") != std::string::npos);
    CHECK(st.message().find("rank 3" + std::string(me == 3 ? " (this rank)" : "") + ": no CUDA device is visible") !=
          std::string::npos);
    CHECK(st.message().find("MGS_BACKEND=mpi") != std::string::npos);
  }
}

TEST_CASE("backend: MGS_BACKEND=nccl without NCCL or a GPU fails init on every rank", "[backend][runtime]") {
  // This machine has no GPU: whatever the build, 'nccl' cannot run here.
  REQUIRE(device::visibleDevices() == 0);
  for (int P : {1, 3}) {
    Config c;
    c.backend = "nccl";
    auto world = std::make_shared<ThreadWorld>(P);
    std::vector<Status> results(P);
    std::vector<std::thread> threads;
    for (int r = 0; r < P; ++r)
      threads.emplace_back([&, r] {
        std::unique_ptr<Runtime> rt;
        results[r] = Runtime::start(
            c,
            [&, r](std::unique_ptr<Communicator>* out) {
              out->reset(new ThreadCommunicator(world, r));
              return Status::OK();
            },
            &rt);
      });
    for (auto& t : threads) t.join();
    const std::string cause = !device::builtWithCuda()   ? "built without CUDA"
                              : !device::builtWithNccl() ? "built without NCCL"
                                                         : "no CUDA device is visible";
    for (int r = 0; r < P; ++r) {
      INFO("P=" << P << " rank " << r << ": " << results[r].message());
      CHECK(results[r].code() == Code::kUnsupported);
      CHECK(results[r].message().find(cause) != std::string::npos);
      CHECK(results[r].message().find("rank " + std::to_string(r) + " (this rank)") != std::string::npos);
    }
  }
  // 'mpi' and 'auto' start normally here.
  for (const char* b : {"mpi", "auto"}) {
    Config c;
    c.backend = b;
    auto world = std::make_shared<ThreadWorld>(2);
    std::vector<Status> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        std::unique_ptr<Runtime> rt;
        results[r] = Runtime::start(
            c,
            [&, r](std::unique_ptr<Communicator>* out) {
              out->reset(new ThreadCommunicator(world, r));
              return Status::OK();
            },
            &rt);
        if (rt) rt->shutdown();
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) CHECK(results[r].ok());
  }
}
