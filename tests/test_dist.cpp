// The process group, with ranks as threads of this process talking over localhost TCP:
// all-reduce and broadcast against sums computed here, averaged gradients against the
// gradient of the whole batch, the data loader's shards, and the errors a user can cause.
#include <nn/dist.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "test_util.h"

using namespace nn;
using test::require_close;

namespace {

// A port held by a bound, not listening, socket (SO_REUSEADDR, as rank 0's listener has):
// rank 0 can listen on it, and no other socket (another test's connection, with ctest
// running tests side by side) gets it while the reservation is held.
struct ReservedPort {
  int fd = -1, port = 0;
  ReservedPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~ReservedPort() { ::close(fd); }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
};

// A port nothing listens on now (reserved, then released).
int free_port() { return ReservedPort().port; }

// Runs body(pg) on `n` ranks, one thread each; returns each rank's error ("" when none).
// Catch2's REQUIREs are not thread-safe, so bodies record and the caller asserts. The port is
// reserved while the ranks run (a port merely free before could be taken as another test's
// local port before rank 0 listened: "Address already in use").
std::vector<std::string> run_ranks_on(int port, int n,
                                      const std::function<void(dist::ProcessGroup&)>& body,
                                      double timeout,
                                      const std::function<dist::Options(int)>& tweak) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        dist::Options o;
        o.world_size = n;
        o.rank = r;
        o.master_port = port;
        o.timeout_seconds = timeout;
        if (tweak) o = tweak(r), o.master_port = port;
        dist::ProcessGroup pg(o);
        body(pg);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "(empty message)";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<std::string> run_ranks(int n, const std::function<void(dist::ProcessGroup&)>& body,
                                   double timeout = 20,
                                   const std::function<dist::Options(int)>& tweak = {}) {
  const ReservedPort port;
  return run_ranks_on(port.port, n, body, timeout, tweak);
}

void require_contains(const std::string& text, const std::string& part) {
  INFO("message: " << text);
  REQUIRE(text.find(part) != std::string::npos);
}

void require_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("all_reduce sums tensors across ranks and leaves identical bits on each") {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t len : {0, 1, 3, 1001}) {
      INFO("world " << n << ", " << len << " elements");
      Generator g(7 + uint64_t(n) * 100 + uint64_t(len));
      std::vector<Tensor> a, b;  // per rank: an f32 tensor and an f16 one
      for (int r = 0; r < n; ++r) {
        a.push_back(randn({len}, {}, &g));
        b.push_back(randn({2, 3}, {}, &g).to(kF16));
      }
      Tensor want_a = zeros({len}), want_b = zeros({2, 3});
      for (int r = 0; r < n; ++r) want_a = add(want_a, a[size_t(r)]), want_b = add(want_b, b[size_t(r)].to(kF32));
      std::vector<Tensor> got_a(static_cast<size_t>(n)), got_b(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) got_a[size_t(r)] = a[size_t(r)].clone(), got_b[size_t(r)] = b[size_t(r)].clone();
      require_no_errors(run_ranks(n, [&](dist::ProcessGroup& pg) {
        pg.all_reduce({got_a[size_t(pg.rank())], got_b[size_t(pg.rank())]});
      }));
      for (int r = 0; r < n; ++r) {
        require_close(got_a[size_t(r)], want_a, 1e-5, 1e-5);
        require_close(got_b[size_t(r)].to(kF32), want_b, 1e-2, 1e-2);
        REQUIRE(got_b[size_t(r)].dtype() == kF16);
        REQUIRE(got_a[size_t(r)].to_vector<float>() == got_a[0].to_vector<float>());
      }
      if (n > 1 && len > 0) REQUIRE(got_a[0].to_vector<float>() != a[0].to_vector<float>());
    }
  }
}

TEST_CASE("all_reduce of one tensor: reduced in place when contiguous, through a copy when a view") {
  const int n = 3;
  std::vector<Tensor> flat(n), base(n), view(n);
  Tensor want_flat = zeros({7}), want_base = zeros({4, 5});
  for (int r = 0; r < n; ++r) {
    flat[size_t(r)] = full({7}, double(r + 1));
    base[size_t(r)] = randn({4, 5});
    view[size_t(r)] = base[size_t(r)].transpose(0, 1);  // (5, 4), not contiguous
    want_flat = add(want_flat, flat[size_t(r)]);
    want_base = add(want_base, base[size_t(r)]);
  }
  require_no_errors(run_ranks(n, [&](dist::ProcessGroup& pg) {
    const size_t r = size_t(pg.rank());
    pg.all_reduce({flat[r]});
    pg.all_reduce({view[r]});
  }));
  for (int r = 0; r < n; ++r) {
    require_close(flat[size_t(r)], want_flat);
    require_close(base[size_t(r)], want_base, 1e-5, 1e-5);
  }
}

TEST_CASE("all_reduce of host values and f64 tensors: sum and max in double") {
  // Values f32 cannot hold (1 + 2^-40 rounds to 1, 1e300 overflows), whose sums in double are
  // the same in any order of the ranks
  std::vector<std::vector<double>> v = {
      {1, -5, 1 + 0x1p-40, 1e-300}, {2, 7, 0x1p-40, 1e300}, {4, 3, 0x1p-30, 2e300}};
  std::vector<std::vector<double>> m = v;
  std::vector<Tensor> t;
  for (const auto& x : v) t.push_back(from_vector<double>(x, {4}));
  require_no_errors(run_ranks(3, [&](dist::ProcessGroup& pg) {
    const size_t r = size_t(pg.rank());
    pg.all_reduce(v[r]);
    pg.all_reduce(m[r], dist::ReduceOp::max);
    pg.all_reduce({t[r]});
  }));
  const std::vector<double> sum{7, 5, 1 + 0x1p-39 + 0x1p-30, 1e300 + 2e300};
  for (int r = 0; r < 3; ++r) {
    REQUIRE(v[size_t(r)] == sum);
    REQUIRE(m[size_t(r)] == std::vector<double>{4, 7, 1 + 0x1p-40, 2e300});
    REQUIRE(t[size_t(r)].dtype() == kF64);
    REQUIRE(t[size_t(r)].to_vector<double>() == sum);
  }
}

TEST_CASE("broadcast copies the root's tensors of any dtype, views included") {
  const int n = 3, root = 2;
  std::vector<Tensor> x(n), y(n), view(n);
  for (int r = 0; r < n; ++r) {
    x[size_t(r)] = full({4, 5}, double(r));
    y[size_t(r)] = full({3}, double(10 * r), kI64);
    view[size_t(r)] = x[size_t(r)].transpose(0, 1);  // non-contiguous: written through
  }
  Tensor w = full({2, 2}, 5.0);
  require_no_errors(run_ranks(n, [&](dist::ProcessGroup& pg) {
    const size_t r = size_t(pg.rank());
    pg.broadcast({view[r], y[r]}, root);
  }));
  for (int r = 0; r < n; ++r) {
    require_close(x[size_t(r)], full({4, 5}, 2.0));
    REQUIRE(y[size_t(r)].to_vector<int64_t>() == std::vector<int64_t>{20, 20, 20});
  }
}

TEST_CASE("averaged gradients of two half batches equal the gradient of the whole batch") {
  // Two replicas of one model; each rank's gradient comes from its half of an 8-sample
  // batch. The mean loss over 8 = the mean of the two halves' mean losses, so the average of
  // the gradients must be the whole batch's gradient.
  manual_seed(3);
  auto make = [] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<Linear>(LinearOptions(6, 5)));
    m->push_back(std::make_shared<ReLU>());
    m->push_back(std::make_shared<Linear>(LinearOptions(5, 3)));
    return m;
  };
  auto whole = make(), r0 = make(), r1 = make();
  r0->load_state_dict(whole->state_dict());
  r1->load_state_dict(whole->state_dict());
  Tensor x = randn({8, 6}), y = tensor({0, 1, 2, 0, 1, 2, 2, 1}, kI64);
  cross_entropy(whole->forward(x), y).backward();
  cross_entropy(r0->forward(x.slice(0, 0, 4)), y.slice(0, 0, 4)).backward();
  cross_entropy(r1->forward(x.slice(0, 4, 8)), y.slice(0, 4, 8)).backward();
  std::vector<std::shared_ptr<nn::Sequential>> replicas{r0, r1};
  std::vector<int> flags(2, -1);
  require_no_errors(run_ranks(2, [&](dist::ProcessGroup& pg) {
    // the flag rides along: one rank's true is every rank's answer
    flags[size_t(pg.rank())] = dist::average_gradients(pg, replicas[size_t(pg.rank())]->parameters(), pg.rank() == 1);
  }));
  REQUIRE(flags == std::vector<int>{1, 1});
  auto want = whole->parameters();
  for (auto& m : replicas) {
    auto got = m->parameters();
    for (size_t i = 0; i < want.size(); ++i) require_close(got[i].grad(), want[i].grad(), 1e-5, 1e-6);
  }
  REQUIRE(r0->parameters()[0].grad().to_vector<float>() == r1->parameters()[0].grad().to_vector<float>());
  require_no_errors(run_ranks(2, [&](dist::ProcessGroup& pg) {
    flags[size_t(pg.rank())] = dist::average_gradients(pg, replicas[size_t(pg.rank())]->parameters(), false);
  }));
  REQUIRE(flags == std::vector<int>{0, 0});
}

// A parameter only some ranks' data reached (a branch) has no gradient on the others: it
// counts as zero there (PyTorch's DDP), so every rank steps every parameter alike, rather
// than averaging another parameter's gradient of the same shape into it.
TEST_CASE("average_gradients: a gradient missing on some ranks counts as zero there") {
  std::vector<std::vector<Tensor>> params(3);
  for (auto& ps : params) ps = {zeros({4}).requires_grad_(true), zeros({4}).requires_grad_(true),
                                zeros({2}).requires_grad_(true)};
  params[0][0].set_grad(full({4}, 3.0));   // p0: ranks 0 and 2
  params[2][0].set_grad(full({4}, 6.0));
  params[1][1].set_grad(full({4}, 90.0));  // p1: rank 1 only; p2: none
  require_no_errors(run_ranks(3, [&](dist::ProcessGroup& pg) {
    dist::average_gradients(pg, params[size_t(pg.rank())]);
  }));
  for (auto& ps : params) {
    require_close(ps[0].grad(), full({4}, 3.0), 0, 0);
    require_close(ps[1].grad(), full({4}, 30.0), 0, 0);
    REQUIRE(!ps[2].grad().defined());
  }
}

// The mean is taken in the f32 carrier: 16-bit values whose sum would overflow get their mean.
TEST_CASE("all_reduce mean of f16 values whose sum overflows f16") {
  std::vector<Tensor> t(2);
  for (auto& x : t) x = full({5}, 40000.0, kF16);
  std::vector<std::vector<double>> v(2, std::vector<double>{1, 2});
  require_no_errors(run_ranks(2, [&](dist::ProcessGroup& pg) {
    pg.all_reduce({t[size_t(pg.rank())]}, dist::ReduceOp::mean);
    v[size_t(pg.rank())][0] += pg.rank();
    pg.all_reduce(v[size_t(pg.rank())], dist::ReduceOp::mean);
  }));
  for (auto& x : t) require_close(x.to(kF32), full({5}, 40000.0), 0, 0);
  for (auto& x : v) REQUIRE(x == std::vector<double>{1.5, 2});
}

// An infinite timeout waits for a rank that starts late (it overflowed the clock, and timed
// out at once).
TEST_CASE("an infinite timeout waits for a late rank") {
  std::vector<int> order;
  std::mutex m;
  auto errors = run_ranks(2, [&](dist::ProcessGroup& pg) {
    std::lock_guard<std::mutex> g(m);
    order.push_back(pg.rank());
  }, INFINITY, [](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(700));  // rank 1 waits
    dist::Options o;
    o.world_size = 2;
    o.rank = r;
    o.timeout_seconds = INFINITY;
    return o;
  });
  require_no_errors(errors);
  REQUIRE(order.size() == 2);
}

TEST_CASE("broadcast_module gives every rank rank 0's weights and buffers") {
  manual_seed(1);
  std::vector<std::shared_ptr<BatchNorm2d>> m;
  for (int r = 0; r < 3; ++r) {
    m.push_back(std::make_shared<BatchNorm2d>(4));
    m.back()->forward(add(randn({2, 4, 3, 3}), double(r)));  // running stats differ per rank
    for (auto& p : m.back()->parameters()) {
      NoGradGuard ng;
      p.copy_(randn(p.shape()));
    }
  }
  require_no_errors(run_ranks(3, [&](dist::ProcessGroup& pg) {
    dist::broadcast_module(pg, *m[size_t(pg.rank())]);
  }));
  auto want = m[0]->state_dict();
  for (int r = 1; r < 3; ++r) {
    auto got = m[size_t(r)]->state_dict();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) require_close(got[i].second.to(kF64), want[i].second.to(kF64), 0, 0);
  }
}

TEST_CASE("replicas_identical tells every rank whether all models are bit-identical") {
  manual_seed(4);
  std::vector<std::shared_ptr<Linear>> m;
  for (int r = 0; r < 3; ++r) m.push_back(std::make_shared<Linear>(LinearOptions(5, 3)));
  for (int r = 1; r < 3; ++r) m[size_t(r)]->load_state_dict(m[0]->state_dict());
  std::vector<int> same(3, -1), after(3, -1);
  require_no_errors(run_ranks(3, [&](dist::ProcessGroup& pg) {
    const size_t r = size_t(pg.rank());
    same[r] = dist::replicas_identical(pg, *m[r]);
    if (r == 2) {  // one bit of one weight on one rank
      NoGradGuard ng;
      float* w = m[r]->weight.data<float>();
      uint32_t bits;
      std::memcpy(&bits, w, 4);
      bits ^= 1;
      std::memcpy(w, &bits, 4);
    }
    after[r] = dist::replicas_identical(pg, *m[r]);
  }));
  REQUIRE(same == std::vector<int>{1, 1, 1});
  REQUIRE(after == std::vector<int>{0, 0, 0});
}

TEST_CASE("average_buffers: every rank ends with the mean of the running statistics") {
  std::vector<std::shared_ptr<BatchNorm2d>> m;
  Tensor want = zeros({4});
  for (int r = 0; r < 3; ++r) {
    m.push_back(std::make_shared<BatchNorm2d>(4));
    m.back()->forward(add(randn({2, 4, 3, 3}), double(3 * r)));
    want = add(want, mul(m.back()->running_mean, 1.0 / 3));
  }
  require_no_errors(run_ranks(3, [&](dist::ProcessGroup& pg) {
    dist::average_buffers(pg, *m[size_t(pg.rank())]);
  }));
  for (int r = 0; r < 3; ++r) {
    require_close(m[size_t(r)]->running_mean, want, 1e-6, 1e-6);
    REQUIRE(m[size_t(r)]->num_batches_tracked.to_vector<int64_t>() == std::vector<int64_t>{1});
  }
}

TEST_CASE("process group errors: bad rank, disagreeing world sizes, mismatched calls, a rank gone") {
  dist::Options bad;
  bad.world_size = 2;
  bad.rank = 2;
  require_contains(test::error_of([&] { dist::ProcessGroup pg(bad); }), "rank 2 is out of range for world size 2");

  auto sizes = run_ranks(2, [](dist::ProcessGroup&) {}, 3, [](int r) {
    dist::Options o;
    o.rank = r;
    o.world_size = r == 0 ? 2 : 3;
    o.timeout_seconds = 3;
    return o;
  });
  require_contains(sizes[0], "rank 1 was started with world size 3, rank 0 with 2");
  require_contains(sizes[1], "rank 1 was started with world size 3, rank 0 with 2");

  auto mismatch = run_ranks(3, [](dist::ProcessGroup& pg) {
    pg.all_reduce({zeros({pg.rank() == 1 ? 5 : 4})});
  });
  for (auto& e : mismatch) require_contains(e, "the ranks disagree");

  auto gone = run_ranks(2, [](dist::ProcessGroup& pg) {
    if (pg.rank() == 0) pg.all_reduce({zeros({10})});
  });
  require_contains(gone[0], "the connection to rank 1 closed");
  REQUIRE(gone[1].empty());

  dist::Options alone;
  alone.world_size = 2;
  alone.master_port = free_port();
  alone.timeout_seconds = 0.5;
  require_contains(test::error_of([&] { dist::ProcessGroup pg(alone); }), "timed out after 0.5 s waiting for 1 more rank(s)");
}

TEST_CASE("all_reduce of tensors larger than the sockets' buffers: partial sends, both directions at once") {
  for (int n : {2, 3}) {
    INFO("world " << n);
    const int64_t len = 3'000'001;  // 12 MB a rank
    std::vector<Tensor> t(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) t[size_t(r)] = add(arange(len, kF32), double(r));
    require_no_errors(run_ranks(n, [&](dist::ProcessGroup& pg) { pg.all_reduce({t[size_t(pg.rank())]}); }));
    // element i: sum over r of (i + r) = n i + n(n-1)/2, exact in f32 below 2^24
    Tensor want = add(mul(arange(len, kF32), double(n)), n * (n - 1) / 2.0);
    for (int r = 0; r < n; ++r) {
      Tensor head = t[size_t(r)].slice(0, 0, 1 << 20), tail = t[size_t(r)].slice(0, len - 1000, len);
      require_close(head, want.slice(0, 0, 1 << 20), 0, 0);
      require_close(tail, want.slice(0, len - 1000, len), 1e-7, 0);
    }
  }
}

TEST_CASE("the master skips connections that are not ranks, and a rank claimed twice is an error for all") {
  const int port = free_port();
  std::vector<std::string> errors(2);
  std::vector<double> sums(2);
  auto rank = [&](int r) {
    try {
      dist::Options o;
      o.world_size = 2;
      o.rank = r;
      o.master_port = port;
      o.timeout_seconds = 20;
      dist::ProcessGroup pg(o);
      std::vector<double> v{double(r + 1)};
      pg.all_reduce(v);
      sums[size_t(r)] = v[0];
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
  };
  std::thread master(rank, 0);
  // A port scan (connect, close) and a stranger sending three bytes: neither is a rank.
  for (const char* junk : {"", "abc"}) {
    for (int tries = 0; tries < 200; ++tries) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(port));
      bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (ok && *junk) REQUIRE(::send(fd, junk, 3, 0) == 3);
      ::close(fd);
      if (ok) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::thread other(rank, 1);
  master.join();
  other.join();
  require_no_errors(errors);
  REQUIRE(sums == std::vector<double>{3, 3});

  auto twice = run_ranks(3, [](dist::ProcessGroup&) {}, 5, [](int r) {
    dist::Options o;
    o.world_size = 3;
    o.rank = r == 2 ? 1 : r;
    o.timeout_seconds = 5;
    return o;
  });
  for (auto& e : twice) require_contains(e, "two processes claim rank 1");
}

TEST_CASE("different collectives, or the same bytes in other shapes, are an error on every rank") {
  auto kinds = run_ranks(2, [](dist::ProcessGroup& pg) {
    if (pg.rank() == 0) pg.barrier();
    else pg.all_reduce({zeros({1})});
  });
  for (auto& e : kinds) require_contains(e, "the ranks disagree on which collective they call");
  auto shapes = run_ranks(2, [](dist::ProcessGroup& pg) {
    if (pg.rank() == 0) pg.broadcast({zeros({2}), zeros({3})});
    else pg.broadcast({zeros({3}), zeros({2})});
  });
  for (auto& e : shapes) require_contains(e, "the ranks disagree on the tensors' shapes or dtypes");
  auto dtypes = run_ranks(2, [](dist::ProcessGroup& pg) {  // same bytes, other bits
    pg.broadcast({zeros({4}, pg.rank() == 0 ? kF16 : kBF16)});
  });
  for (auto& e : dtypes) require_contains(e, "the ranks disagree on the tensors' shapes or dtypes");
}

TEST_CASE("process group options come from torchrun's environment variables") {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("MASTER_ADDR", "10.1.2.3", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  dist::Options o = dist::options_from_env();
  CHECK(o.world_size == 4);
  CHECK(o.rank == 3);
  CHECK(o.master_addr == "10.1.2.3");
  CHECK(o.master_port == 1234);
  ::setenv("MASTER_PORT", "http", 1);
  require_contains(test::error_of([&] { dist::options_from_env(); }), "MASTER_PORT='http' is not a whole number");
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  o = dist::options_from_env();
  CHECK(o.world_size == 1);
  CHECK(o.rank == 0);
}

TEST_CASE("data loader shards: one step of all shards covers one batch of the whole") {
  auto ds = std::make_shared<data::TensorDataset>(arange(103, kF32).reshape({103, 1}), arange(103, kI64));
  data::DataLoaderOptions whole;
  whole.batch_size = 12;
  whole.seed = 5;
  auto order = data::DataLoader(ds, whole).order(2);
  data::DataLoaderOptions o = whole;
  o.batch_size = 4;
  o.shards = 3;
  std::vector<std::vector<int64_t>> batches0;  // step -> samples of all shards
  for (int64_t s = 0; s < 3; ++s) {
    o.shard = s;
    data::DataLoader dl(ds, o);
    REQUIRE(dl.size() == 34);  // 103 // 3: the last sample is dropped
    REQUIRE(dl.num_batches() == 9);
    dl.set_epoch(2);
    int64_t b = 0;
    for (auto& batch : dl) {
      if (size_t(b) >= batches0.size()) batches0.emplace_back();
      for (auto t : batch.target.to_vector<int64_t>()) batches0[size_t(b)].push_back(t);
      ++b;
    }
  }
  for (size_t b = 0; b + 1 < batches0.size(); ++b) {
    auto got = batches0[b];
    std::vector<int64_t> want(order.begin() + int64_t(b) * 12, order.begin() + int64_t(b + 1) * 12);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    REQUIRE(got == want);
  }
  o.even_shards = false;  // evaluation: every sample once, shards may differ by one
  int64_t total = 0;
  for (int64_t s = 0; s < 3; ++s) {
    o.shard = s;
    total += data::DataLoader(ds, o).size();
  }
  REQUIRE(total == 103);
  // an evaluation shard may be empty (fewer samples than ranks); a training shard may not
  auto two = std::make_shared<data::TensorDataset>(arange(2, kF32).reshape({2, 1}), arange(2, kI64));
  o.shard = 2;
  data::DataLoader empty(two, o);
  REQUIRE(empty.size() == 0);
  int64_t batches = 0;
  for (auto& batch : empty) batches += batch.data.numel() >= 0;
  REQUIRE(batches == 0);
  // shards past int64's middle: sample 0 is shard 0's, and n - s + k - 1 overflowed
  o.shards = INT64_MAX - 5;
  o.shard = 0;
  REQUIRE(data::DataLoader(two, o).size() == 1);
  o.shard = 1;
  REQUIRE(data::DataLoader(two, o).size() == 1);
  o.shard = INT64_MAX - 6;
  REQUIRE(data::DataLoader(two, o).size() == 0);
  o.shards = 3;
  o.shard = 2;
  o.even_shards = true;
  require_contains(test::error_of([&] { data::DataLoader dl(two, o); }), "2 samples cannot be split into 3 shards");
  o.even_shards = false;
  o.shard = 3;
  require_contains(test::error_of([&] { data::DataLoader dl(ds, o); }), "shard 3 of 3 is out of range");
}
