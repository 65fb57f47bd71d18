#include <catch2/catch.hpp>

#include "common/dtype.h"
#include "core/fusion.h"

using namespace mgs;

namespace {
Signature allreduce(DataType dtype, int op = MGS_REDUCE_SUM) {
  Signature s;
  s.dtype = dtype;
  s.reduce_op = op;
  return s;
}
}  // namespace

TEST_CASE("fusion groups compatible allreduces up to the threshold", "[fusion]") {
  Signature f32 = allreduce(MGS_FLOAT32), f64 = allreduce(MGS_FLOAT64),
            avg = allreduce(MGS_FLOAT32, MGS_REDUCE_AVERAGE);
  Signature bc;
  bc.type = OpType::kBroadcast;
  std::vector<const Signature*> sigs = {&f32, &f64, &f32, &bc, &avg, &f32, &f32};
  std::vector<size_t> bytes = {400, 800, 400, 400, 400, 400, 4000};
  auto groups = fusionGroups(sigs, bytes, 1200);
  // f32 sums {0, 2, 5} fit in 1200 bytes; #6 alone exceeds the threshold.
  CHECK(groups == std::vector<std::vector<size_t>>{{0, 2, 5}, {1}, {3}, {4}, {6}});
  // Threshold 0: nothing fused.
  CHECK(fusionGroups(sigs, bytes, 0).size() == sigs.size());
}

TEST_CASE("tensors at or above the fusion bound stay alone", "[fusion]") {
  Signature f32 = allreduce(MGS_FLOAT32);
  std::vector<const Signature*> sigs = {&f32, &f32, &f32, &f32};
  const size_t big = kFusionMaxTensorBytes, small = 1000;
  std::vector<size_t> bytes = {small, big, small, 4 * big};
  // The default bound: the 64 KiB tensor and the 256 KiB one go alone,
  // though the threshold would hold all four.
  CHECK(fusionGroups(sigs, bytes, 64 << 20) == std::vector<std::vector<size_t>>{{0, 2}, {1}, {3}});
  // A bound measured above them (a long collective start-up): all fuse.
  CHECK(fusionGroups(sigs, bytes, 64 << 20, 8 * big) == std::vector<std::vector<size_t>>{{0, 1, 2, 3}});
  // Between: the 64 KiB one fuses, the 256 KiB one (at the bound) does not.
  CHECK(fusionGroups(sigs, bytes, 64 << 20, 4 * big) == std::vector<std::vector<size_t>>{{0, 1, 2}, {3}});
  // The threshold still bounds a group.
  CHECK(fusionGroups(sigs, bytes, static_cast<int64_t>(big + small), 8 * big) ==
        std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}});
}

TEST_CASE("CUDA allreduces fuse with CUDA allreduces only", "[fusion]") {
  Signature host = allreduce(MGS_FLOAT32), cuda = allreduce(MGS_FLOAT32);
  cuda.on_cuda = true;
  std::vector<const Signature*> sigs = {&cuda, &host, &cuda, &host, &cuda};
  std::vector<size_t> bytes = {400, 400, 400, 400, 400};
  CHECK(fusionGroups(sigs, bytes, 1 << 20) == std::vector<std::vector<size_t>>{{0, 2, 4}, {1, 3}});
  // The threshold bounds a CUDA group as it bounds a host one.
  CHECK(fusionGroups(sigs, bytes, 800) == std::vector<std::vector<size_t>>{{0, 2}, {1, 3}, {4}});
}

TEST_CASE("16-bit floats are fused as 16-bit and scaled on the way out", "[fusion]") {
  std::vector<uint16_t> a = {floatToHalf(1.5f), floatToHalf(-2.0f)};
  std::vector<uint16_t> b = {floatToHalf(3.0f)};
  std::vector<char> wire;
  packFusion({a.data(), b.data()}, {2, 1}, MGS_FLOAT16, 2.0, &wire);
  REQUIRE(wire.size() == 3 * sizeof(uint16_t));  // half the bytes of float32 on the wire
  const auto* w = reinterpret_cast<const uint16_t*>(wire.data());
  CHECK(halfToFloat(w[0]) == 3.0f);
  CHECK(halfToFloat(w[1]) == -4.0f);
  CHECK(halfToFloat(w[2]) == 6.0f);
  std::vector<uint16_t> oa(2), ob(1);
  unpackFusion(wire, MGS_FLOAT16, 0.25, {oa.data(), ob.data()}, {2, 1});
  CHECK(halfToFloat(oa[0]) == 0.75f);
  CHECK(halfToFloat(oa[1]) == -1.0f);
  CHECK(halfToFloat(ob[0]) == 1.5f);
}

TEST_CASE("integer fusion truncates after scaling", "[fusion]") {
  std::vector<int32_t> a = {7, -7};
  std::vector<char> wire;
  packFusion({a.data()}, {2}, MGS_INT32, 1.0, &wire);
  std::vector<int32_t> out(2);
  unpackFusion(wire, MGS_INT32, 1.0 / 2, {out.data()}, {2});
  CHECK(out == std::vector<int32_t>{3, -3});
}
