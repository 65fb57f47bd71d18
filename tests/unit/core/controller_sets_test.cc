// Negotiation of process sets and join (controller.h), ranks as threads:
// an op of a set waits for the set's ranks only, a rank outside the set fails
// it on every rank that submits it, and while a rank has joined the others'
// allreduces run on it with zeros while their other ops fail.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <thread>

#include "comm/fake/thread_communicator.h"
#include "core/controller.h"
#include "core/handle_table.h"

using namespace mgs;

namespace {

Request request(const std::string& name, OpType type, int32_t set = 0, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = qualifiedName(name, set);
  q.sig.type = type;
  q.sig.shape = std::move(shape);
  q.sig.process_set = set;
  q.handle = std::make_shared<HandleState>();
  q.enqueued = Clock::now();
  return q;
}

struct Seen {
  Status status;
  bool served = false;
  int64_t value = 0;
  size_t zero_bytes = 0;  // a served op's buffer, all zero
  bool on_cuda = false;   // the op's negotiated signature
};

// Every rank runs `cycles` negotiation cycles (collective: the same count
// everywhere); submit(rank, cycle) gives what a rank submits at a cycle.
std::vector<std::map<std::string, Seen>> negotiate(
    int P, const ProcessSetTable& sets, int cycles,
    const std::function<std::vector<Request>(int rank, int cycle)>& submit) {
  auto world = std::make_shared<ThreadWorld>(P);
  std::vector<std::map<std::string, Seen>> seen(P);
  std::vector<std::string> errors(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      Controller controller(comm, Config{});
      controller.setProcessSets(&sets);
      for (int c = 0; c < cycles; ++c) {
        CycleResult res;
        Status st = controller.cycle(submit(r, c), 0, &res);
        if (!st.ok()) errors[r] = st.toString();  // checked below, off this thread
        for (auto& op : res.ready) {
          Seen s{op.status, op.req.served, op.req.handle ? op.req.handle->value : 0, 0, op.req.sig.on_cuda};
          if (op.req.served) {
            const auto* p = static_cast<const char*>(op.req.input.data);
            s.zero_bytes = op.req.input.bytes();
            for (size_t i = 0; i < s.zero_bytes; ++i)
              if (p[i] != 0) s.zero_bytes = 0;
          }
          seen[r][op.req.name] = s;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) CHECK(errors[r].empty());
  return seen;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an op of a process set waits for the set's ranks only", "[negotiation][sets]") {
  const int P = 3;
  ProcessSetTable sets;
  sets.reset(P);
  const int32_t id = sets.add({0, 2});
  auto seen = negotiate(P, sets, 12, [&](int r, int c) {
    std::vector<Request> out;
    if (c == 0 && r != 1) out.push_back(request("x", OpType::kAllreduce, id));
    if (c == 0) out.push_back(request("all", OpType::kAllreduce));
    return out;
  });
  const std::string x = qualifiedName("x", id);
  CHECK(seen[1].count(x) == 0);  // rank 1 is not in the set: never told to run it
  for (int r : {0, 2}) {
    REQUIRE(seen[r].count(x) == 1);
    CHECK(seen[r][x].status.ok());
  }
  for (int r = 0; r < P; ++r) CHECK(seen[r]["all"].status.ok());
}

TEST_CASE("a rank outside a process set fails the op on every rank that submits it", "[negotiation][sets]") {
  const int P = 3;
  ProcessSetTable sets;
  sets.reset(P);
  const int32_t id = sets.add({0, 2});
  // Rank 1 (outside) submits first; rank 0 soon after, rank 2 much later.
  auto seen = negotiate(P, sets, 20, [&](int r, int c) {
    std::vector<Request> out;
    if ((r == 1 && c == 0) || (r == 0 && c == 3) || (r == 2 && c == 10))
      out.push_back(request("y", OpType::kAllreduce, id));
    return out;
  });
  const std::string y = qualifiedName("y", id);
  for (int r = 0; r < P; ++r) {
    REQUIRE(seen[r].count(y) == 1);
    INFO(seen[r][y].status.message());
    CHECK(seen[r][y].status.code() == Code::kInvalidArgument);
    CHECK(contains(seen[r][y].status.message(), "rank 1 submitted it to process set 1 (ranks [0, 2])"));
  }
}

TEST_CASE("a joined rank runs the others' allreduces with zeros and fails their other ops",
          "[negotiation][join]") {
  const int P = 3;
  ProcessSetTable sets;
  sets.reset(P);
  auto seen = negotiate(P, sets, 24, [&](int r, int c) {
    std::vector<Request> out;
    if (r == 0 && c == 0) out.push_back(request("mgs.join.0", OpType::kJoin, 0, {}));
    if (r != 0 && c == 4) {
      out.push_back(request("g", OpType::kAllreduce, 0, {2, 3}));
      out.push_back(request("h", OpType::kAllgather));
    }
    // Names other ranks never submit (unnamed ops numbered differently): each fails at once.
    if (r != 0 && c == 6) out.push_back(request("only." + std::to_string(r), OpType::kBroadcast));
    if (r == 1 && c == 8) out.push_back(request("mgs.join.0", OpType::kJoin, 0, {}));
    if (r == 2 && c == 14) out.push_back(request("mgs.join.0", OpType::kJoin, 0, {}));
    return out;
  });
  // The allreduce ran everywhere; rank 0 built its request (zeros of the right size).
  CHECK(seen[0]["g"].status.ok());
  CHECK(seen[0]["g"].served);
  CHECK(seen[0]["g"].zero_bytes == 6 * sizeof(float));
  for (int r : {1, 2}) {
    CHECK(seen[r]["g"].status.ok());
    CHECK_FALSE(seen[r]["g"].served);
    INFO(seen[r]["h"].status.message());
    CHECK(seen[r]["h"].status.code() == Code::kUnsupported);
    CHECK(contains(seen[r]["h"].status.message(), "rank 0 joined"));
  }
  CHECK(seen[0].count("h") == 0);
  for (int r : {1, 2}) {
    const std::string only = "only." + std::to_string(r);
    REQUIRE(seen[r].count(only) == 1);
    CHECK(seen[r][only].status.code() == Code::kUnsupported);
  }
  for (int r = 0; r < P; ++r) {
    REQUIRE(seen[r].count("mgs.join.0") == 1);
    CHECK(seen[r]["mgs.join.0"].status.ok());
    CHECK(seen[r]["mgs.join.0"].value == 2);  // the last rank to join
  }
}

TEST_CASE("a joined rank serves an allreduce of CUDA tensors too, with host zeros and the CUDA signature",
          "[negotiation][join]") {
  const int P = 2;
  ProcessSetTable sets;
  sets.reset(P);
  auto seen = negotiate(P, sets, 16, [&](int r, int c) {
    std::vector<Request> out;
    if (r == 0 && c == 0) out.push_back(request("mgs.join.0", OpType::kJoin, 0, {}));
    if (r == 1 && c == 4) {
      Request q = request("gpu", OpType::kAllreduce, 0, {5});
      q.sig.on_cuda = true;
      out.push_back(std::move(q));
    }
    if (r == 1 && c == 8) out.push_back(request("mgs.join.0", OpType::kJoin, 0, {}));
    return out;
  });
  REQUIRE(seen[1].count("gpu") == 1);
  INFO(seen[1]["gpu"].status.message());
  CHECK(seen[1]["gpu"].status.ok());
  REQUIRE(seen[0].count("gpu") == 1);
  CHECK(seen[0]["gpu"].served);
  CHECK(seen[0]["gpu"].on_cuda);  // the executor takes the CUDA path (NCCL or staged) as rank 1 does
  CHECK(seen[0]["gpu"].zero_bytes == 5 * sizeof(float));
}
