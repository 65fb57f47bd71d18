// The C ABI without MPI: status strings, calls before init, config errors.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "mgs/mgs.h"

TEST_CASE("status strings and dtype sizes", "[capi]") {
  CHECK(std::string(mgs_status_string(MGS_SUCCESS)) == "MGS_SUCCESS");
  CHECK(std::string(mgs_status_string(MGS_ERR_MISMATCH)) == "MGS_ERR_MISMATCH");
  CHECK(std::string(mgs_status_string(static_cast<mgs_status_t>(999))) == "MGS_ERR_UNKNOWN");
  CHECK(mgs_dtype_size(MGS_FLOAT16) == 2);
  CHECK(mgs_dtype_size(MGS_INT64) == 8);
  CHECK(mgs_dtype_size(static_cast<mgs_dtype_t>(77)) == 0);
  CHECK(std::string(mgs_version()).find('.') != std::string::npos);
}

TEST_CASE("every call before mgs_init fails cleanly and names mgs_init", "[capi]") {
  CHECK(mgs_is_initialized() == 0);
  int v = 0;
  CHECK(mgs_rank(&v) == MGS_ERR_NOT_INITIALIZED);
  CHECK(std::string(mgs_last_error()).find("mgs_init()") != std::string::npos);
  CHECK(mgs_size(&v) == MGS_ERR_NOT_INITIALIZED);
  float x = 0;
  int64_t shape[1] = {1};
  mgs_tensor_t t{&x, MGS_FLOAT32, 1, shape, MGS_DEVICE_CPU, nullptr, nullptr};
  mgs_handle_t h = 0;
  CHECK(mgs_allreduce_async("x", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_allgather_async("x", &t, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_broadcast_async("x", &t, 0, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_barrier() == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_alltoall_async("x", &t, nullptr, 0, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_reducescatter_async("x", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_allreduce_ps_async("x", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, 0, &h) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_barrier_ps(0) == MGS_ERR_NOT_INITIALIZED);
  int32_t id = 0, ranks[1] = {0};
  CHECK(mgs_process_set_add(ranks, 1, &id) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_process_set_size(0, &id) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_join(&id) == MGS_ERR_NOT_INITIALIZED);
  CHECK(std::string(mgs_last_error()).find("mgs_init()") != std::string::npos);
  CHECK(mgs_wait(1) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_release(1) == MGS_ERR_NOT_INITIALIZED);
  CHECK(std::string(mgs_handle_error(1)).empty());
  CHECK(mgs_residual_copy("x", &x, 1) == MGS_ERR_NOT_INITIALIZED);
  CHECK(mgs_residual_restore("x", &x, 1) == MGS_ERR_NOT_INITIALIZED);
  size_t state_size = 7;
  CHECK(mgs_sparse_state_copy(nullptr, 0, &state_size) == MGS_ERR_NOT_INITIALIZED);
  CHECK(state_size == 7);
  CHECK(mgs_sparse_state_restore("x", 1) == MGS_ERR_NOT_INITIALIZED);
  CHECK(std::string(mgs_last_error()).find("mgs_init()") != std::string::npos);
  size_t buckets = 7;
  mgs_plan_bucket_t bucket{};
  CHECK(mgs_get_plan_buckets(&bucket, 1, sizeof bucket, &buckets) == MGS_ERR_NOT_INITIALIZED);
  CHECK(std::string(mgs_last_error()).find("mgs_init()") != std::string::npos);
  CHECK(mgs_get_plan_buckets(&bucket, 1, sizeof bucket, nullptr) == MGS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mgs_last_error()).find("count is NULL") != std::string::npos);
  CHECK(mgs_get_plan_buckets(nullptr, 1, sizeof bucket, &buckets) == MGS_ERR_INVALID_ARGUMENT);
  CHECK(mgs_shutdown() == MGS_SUCCESS);  // harmless
  CHECK(std::string(mgs_last_error()).empty());
}

TEST_CASE("mgs_init rejects a bad MGS_* variable before touching MPI", "[capi]") {
  setenv("MGS_DENSITY", "7", 1);
  CHECK(mgs_init() == MGS_ERR_CONFIG);
  const std::string msg = mgs_last_error();
  CHECK(msg.find("MGS_DENSITY='7'") != std::string::npos);
  CHECK(msg.find("(0, 1]") != std::string::npos);
  unsetenv("MGS_DENSITY");
  setenv("MGS_NOT_A_THING", "1", 1);
  CHECK(mgs_init() == MGS_ERR_CONFIG);
  CHECK(std::string(mgs_last_error()).find("unknown variable MGS_NOT_A_THING") != std::string::npos);
  unsetenv("MGS_NOT_A_THING");
  CHECK(mgs_is_initialized() == 0);
}
