# -DMGS_GPU_ONLY=ON: the CUDA selector, the NCCL communicator, their tests and
# the GPU benchmark, with no MPI, spdlog or CLI11 (a GPU machine set up with
# nvcc, CMake and PyTorch wheels; scripts/gpu_check.sh). Catch2 is used when
# found, else tests/gpu/mini_catch. The libraries below are the same sources
# as src/common (less logging and params, which need spdlog), src/compress and
# src/comm (less MPI): a file added there must be added here too (the build
# fails at link time otherwise).
find_package(Threads REQUIRED)
find_package(OpenMP COMPONENTS CXX)
# Catch2 v2 only: a machine may hold Catch2 v3, whose target has no
# catch2/catch.hpp; then the minimal stand-in is used.
find_package(Catch2 2 QUIET)
if(TARGET Catch2::Catch2 AND Catch2_VERSION VERSION_GREATER_EQUAL 3)
  set(MGS_CATCH2_V3 ON)
endif()
if(NOT MGS_CUDA_ENABLED)
  message(FATAL_ERROR "MGS_GPU_ONLY=ON needs CUDA (nvcc was not found)")
endif()

add_library(mgs_common STATIC src/common/status.cc src/common/dtype.cc src/common/dtype_simd.cc src/common/threads.cc
                              src/common/parallel.cc)
target_link_libraries(mgs_common PUBLIC Threads::Threads)
target_include_directories(mgs_common PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)

add_library(mgs_compress STATIC
  src/compress/cpu_passes.cc src/compress/decompress.cc src/compress/selector.cc
  src/compress/selector_plan.cc src/compress/threshold_search.cc)
target_link_libraries(mgs_compress PUBLIC mgs_common)
target_compile_options(mgs_compress PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O3>)
if(OpenMP_CXX_FOUND)
  target_link_libraries(mgs_compress PUBLIC OpenMP::OpenMP_CXX)
endif()

add_library(mgs_comm STATIC src/comm/communicator.cc src/comm/reduce.cc)
target_link_libraries(mgs_comm PUBLIC mgs_common)
add_library(mgs_comm_fake STATIC src/comm/fake/thread_communicator.cc src/comm/fake/rendezvous.cc)
target_link_libraries(mgs_comm_fake PUBLIC mgs_comm Threads::Threads)
add_library(mgs_comm_cuda_thread STATIC src/comm/cuda_thread/cuda_thread_communicator.cc)
target_link_libraries(mgs_comm_cuda_thread PUBLIC mgs_comm_fake CUDA::cudart Threads::Threads)
if(MGS_NCCL_ENABLED)
  add_library(mgs_comm_nccl STATIC src/comm/nccl/nccl_communicator.cc)
  target_include_directories(mgs_comm_nccl SYSTEM PUBLIC ${MGS_NCCL_INCLUDE_DIR})
  target_link_libraries(mgs_comm_nccl PUBLIC mgs_comm CUDA::cudart ${MGS_NCCL_LIBRARY})
  target_compile_definitions(mgs_comm_nccl PUBLIC MGS_WITH_NCCL=1)
endif()

# The host local stage (src/core/CMakeLists.txt's mgs_core_local): the
# reference the device local stage is tested against, and what it builds on.
add_library(mgs_core_local STATIC src/core/collective_timing.cc src/core/cpu_local_stage.cc src/core/nonfinite.cc
                                  src/core/residual_store.cc)
target_link_libraries(mgs_core_local PUBLIC mgs_comm mgs_compress mgs_common PRIVATE mgs_device_memory_cuda)
set_source_files_properties(src/core/nonfinite.cc PROPERTIES COMPILE_OPTIONS "$<$<NOT:$<CONFIG:Debug>>:-O3>")

add_subdirectory(cuda)
add_subdirectory(src/device/cuda)

enable_testing()
add_library(mgs_catch_main OBJECT tests/catch_main.cc)
if(TARGET Catch2::Catch2 AND NOT MGS_CATCH2_V3)
  include(Catch)
  target_link_libraries(mgs_catch_main PUBLIC Catch2::Catch2)
else()
  message(STATUS "mgs: Catch2 not found; the GPU tests use tests/gpu/mini_catch")
  target_include_directories(mgs_catch_main PUBLIC ${PROJECT_SOURCE_DIR}/tests/gpu/mini_catch)
endif()
add_subdirectory(tests/gpu)
add_subdirectory(bench/compress)
