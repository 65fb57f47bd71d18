// The exchanges' registry and PhaseOrder (src/core/bucket_exchange.h). The
// exchanges themselves run through SparsePipeline in sparse_threads_test,
// sparse_agreed_test, device_bucket_test (ranks as threads) and tests/mpi.
#include "core/bucket_exchange.h"

#include <catch2/catch.hpp>
#include <string>

using mgs::ExchangeEntry;
using mgs::PhaseOrder;
using mgs::plan::Exchange;

TEST_CASE("every plan exchange has an exchange that always takes it", "[core]") {
  for (Exchange e : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense, Exchange::kHierarchical}) {
    INFO(mgs::plan::exchangeName(e));
    bool found = false;
    for (const ExchangeEntry& r : mgs::exchangeRegistry()) {
      REQUIRE(r.start != nullptr);
      if (r.exchange == e && r.claims == nullptr) found = true;
    }
    REQUIRE(found);
  }
}

TEST_CASE("a device bucket is claimed before the host allgather", "[core]") {
  int device = -1, host = -1, i = 0;
  for (const ExchangeEntry& r : mgs::exchangeRegistry()) {
    if (std::string(r.name) == "device") device = i;
    if (std::string(r.name) == "allgather") host = i;
    ++i;
  }
  REQUIRE(device >= 0);
  REQUIRE(host > device);
  REQUIRE(mgs::exchangeRegistry()[device].exchange == Exchange::kAllgather);
  REQUIRE(mgs::exchangeRegistry()[device].claims != nullptr);
}

TEST_CASE("PhaseOrder blocks a lane for every later bucket", "[core]") {
  int values = 0, names = 0;  // lanes are addresses
  PhaseOrder order;
  REQUIRE(order.free(&values));
  REQUIRE(order.free(&names));
  order.block(&values);
  order.block(&values);  // twice: still one lane
  REQUIRE_FALSE(order.free(&values));
  REQUIRE(order.free(&names));
  order.block(&names);
  REQUIRE_FALSE(order.free(&names));
  REQUIRE(order.free(nullptr));
}
