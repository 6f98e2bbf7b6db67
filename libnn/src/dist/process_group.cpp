// The process group: rendezvous through rank 0, then a ring (each rank talks to rank+1 and
// rank-1 only). All-reduce is the bandwidth-optimal ring: a reduce-scatter then an
// all-gather, each n-1 steps of one chunk, so every rank sends 2(n-1)/n of the data
// whatever n is. Each reduced chunk is summed once and then copied, so all ranks end with
// identical bits.
#include <nn/autograd.h>
#include <nn/dist.h>
#include <nn/error.h>
#include <nn/module.h>
#include <nn/ops.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "dist/net.h"

namespace nn::dist {

namespace {

constexpr uint32_t kMagic = 0x4c4e4e31;  // "LNN1"

struct Hello {
  uint32_t magic;
  int32_t world_size, rank, port;
};
struct Entry {
  uint32_t ip;  // 0: the master's address, as the peer reached it
  int32_t port;
};

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// FNV-1a, 64 bits.
constexpr uint64_t kFnvStart = 1469598103934665603ull;
uint64_t fnv(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  NN_CHECK(end && *end == 0 && x >= lo && x <= hi, "environment variable ", name, "='", v,
           "' is not a whole number from ", lo, " to ", hi);
  return int(x);
}

}  // namespace

Options options_from_env() {
  Options o;
  o.world_size = env_int("WORLD_SIZE", o.world_size, 1, 1 << 20);
  o.rank = env_int("RANK", o.rank, 0, (1 << 20) - 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", o.master_port, 1, 65535);
  return o;
}

struct ProcessGroup::Impl {
  double timeout = 0;
  int rank = 0, size = 1;
  net::Socket next, prev;  // to rank+1, from rank-1
  // Kept between calls: fresh large buffers cost a page fault per 4 KiB every step.
  std::vector<char> staging, scratch;
  template <typename T>
  T* grow(std::vector<char>& v, size_t n) {
    if (v.size() < n * sizeof(T)) v.resize(n * sizeof(T));
    return reinterpret_cast<T*>(v.data());
  }

  // One ring step: send [s, s+sn) to the next rank while receiving rn elements from the
  // previous one.
  template <typename T>
  void step(const T* s, size_t sn, T* r, size_t rn) {
    net::exchange(next, s, sn * sizeof(T), rank_name((rank + 1) % size), prev, r, rn * sizeof(T),
                  rank_name((rank + size - 1) % size), timeout);
  }

  template <typename T>
  void ring_all_reduce(T* data, size_t n, ReduceOp op) {
    const int p = size;
    auto lo = [&](int c) { return n * size_t(c) / size_t(p); };
    auto len = [&](int c) { return lo(c + 1) - lo(c); };
    T* tmp = grow<T>(scratch, len(p - 1) + 1);
    auto mod = [&](int x) { return ((x % p) + p) % p; };
    // Reduce-scatter: after step s, chunk (rank - s - 1) holds the reduction of s + 2 ranks.
    for (int s = 0; s < p - 1; ++s) {
      const int sc = mod(rank - s), rc = mod(rank - s - 1);
      step(data + lo(sc), len(sc), tmp, len(rc));
      T* d = data + lo(rc);
      if (op == ReduceOp::max)
        for (size_t i = 0; i < len(rc); ++i) d[i] = std::max(d[i], tmp[i]);
      else
        for (size_t i = 0; i < len(rc); ++i) d[i] += tmp[i];
    }
    if (op == ReduceOp::mean) {  // the chunk this rank completed, divided once, here
      const int own = mod(rank + 1);
      const T inv = T(1.0 / double(p));
      T* d = data + lo(own);
      for (size_t i = 0; i < len(own); ++i) d[i] *= inv;
    }
    // All-gather: rank r now owns chunk r + 1 complete; pass the complete chunks round.
    for (int s = 0; s < p - 1; ++s) {
      const int sc = mod(rank + 1 - s), rc = mod(rank - s);
      step(data + lo(sc), len(sc), data + lo(rc), len(rc));
    }
  }

  // Every rank must make the same collective call with the same shape of data. Checked
  // first, by a tiny all-reduce of a fixed-length key and its negation under max, so a
  // mismatch is one error on every rank at once (a key of varying length would itself
  // desynchronise the ring). The key: which collective, its element or byte count, its op
  // or root, and a hash of the tensors' dtypes and shapes (48 bits: exact in a double).
  enum Kind { kValues = 1, kTensors, kBroadcast };
  void agree(Kind kind, double count, double op_or_root, const std::vector<Tensor>& tensors = {}) {
    uint64_t h = kFnvStart;
    for (const Tensor& t : tensors) {
      h = fnv(fnv(h, uint64_t(t.dtype())), uint64_t(t.dim()));
      for (int64_t d : t.shape()) h = fnv(h, uint64_t(d));
    }
    const double key[4] = {double(kind), count, op_or_root, double(h >> 16)};
    double v[8];
    for (int i = 0; i < 4; ++i) v[i] = key[i], v[4 + i] = -key[i];
    ring_all_reduce(v, 8, ReduceOp::max);
    static const char* what[] = {"which collective they call", "the element or byte count",
                                 "the op or root", "the tensors' shapes or dtypes"};
    const char* mine = kind == kValues ? "all_reduce of values" : kind == kTensors ? "all_reduce of tensors" : "broadcast";
    for (int i = 0; i < 4; ++i)
      NN_CHECK(v[i] == -v[4 + i], "the ranks disagree on ", what[i], " (rank ", rank, " called ", mine,
               "); every rank must make the same calls with the same tensors");
  }
};

ProcessGroup::ProcessGroup(const Options& o) : rank_(o.rank), size_(o.world_size) {
  NN_CHECK(o.world_size >= 1, "world size must be at least 1, got ", o.world_size);
  NN_CHECK(o.rank >= 0 && o.rank < o.world_size, "rank ", o.rank, " is out of range for world size ",
           o.world_size, " (ranks are 0 to ", o.world_size - 1, ")");
  NN_CHECK(o.master_port >= 1 && o.master_port <= 65535, "master port ", o.master_port,
           " is out of range (1 to 65535)");
  NN_CHECK(o.timeout_seconds > 0, "the timeout must be positive, got ", o.timeout_seconds);
  impl_ = std::make_unique<Impl>();
  impl_->timeout = o.timeout_seconds;
  impl_->rank = rank_;
  impl_->size = size_;
  if (size_ == 1) return;
  const double t = o.timeout_seconds;
  net::Socket ring = net::listen_on(0);
  const int ring_port = net::local_port(ring);
  std::vector<Entry> table(static_cast<size_t>(size_));
  const uint32_t master_ip = net::resolve(o.master_addr);
  const std::string master = "rank 0 (the master, " + o.master_addr + ":" + std::to_string(o.master_port) + ")";
  if (rank_ == 0) {
    net::Socket listener = net::listen_on(o.master_port);
    std::vector<net::Socket> peers(static_cast<size_t>(size_)), refused;
    table[0] = {0, ring_port};
    std::string problem;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(t);
    for (int joined = 1; joined < size_;) {
      const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      uint32_t ip = 0;
      net::Socket s = net::accept_one(listener, std::max(left, 0.001),
                                      std::to_string(size_ - joined) + " more rank(s) to join on port " +
                                          std::to_string(o.master_port), &ip, t);
      // Something that is not one of our ranks (a port scan, a health check, another
      // program) sends no hello, a short one or a wrong one within a few seconds: skipped.
      Hello h{};
      try {
        net::recv_all(s, &h, sizeof h, std::min(t, 5.0), "a joining rank");
      } catch (const Error&) {
        continue;
      }
      if (h.magic != kMagic) continue;
      if (h.world_size != size_)
        problem = detail::cat("rank ", h.rank, " was started with world size ", h.world_size,
                              ", rank 0 with ", size_);
      else if (h.rank <= 0 || h.rank >= size_ || peers[size_t(h.rank)].valid())
        problem = h.rank == 0 || (h.rank > 0 && h.rank < size_)
                      ? detail::cat("two processes claim rank ", h.rank)
                      : detail::cat("rank ", h.rank, " is out of range for world size ", size_);
      if (!problem.empty()) {  // tell everyone who joined so far, then stop
        refused.push_back(std::move(s));
        int32_t len = int32_t(problem.size());
        for (auto* group : {&peers, &refused})
          for (auto& p : *group)
            if (p.valid()) {
              try {
                net::send_all(p, &len, sizeof len, 5, "a joining rank");
                net::send_all(p, problem.data(), problem.size(), 5, "a joining rank");
              } catch (const Error&) {
              }
            }
        NN_ERROR("cannot form the process group: ", problem);
      }
      table[size_t(h.rank)] = {ip, h.port};
      peers[size_t(h.rank)] = std::move(s);
      ++joined;
    }
    for (int r = 1; r < size_; ++r) {
      int32_t ok = 0;
      net::send_all(peers[size_t(r)], &ok, sizeof ok, t, rank_name(r));
      net::send_all(peers[size_t(r)], table.data(), table.size() * sizeof(Entry), t, rank_name(r));
    }
  } else {
    net::Socket s = net::connect_to(master_ip, o.master_port, t, master);
    Hello h{kMagic, size_, rank_, ring_port};
    net::send_all(s, &h, sizeof h, t, master);
    int32_t status = 0;
    net::recv_all(s, &status, sizeof status, t, master);
    if (status != 0) {
      std::string why(size_t(std::clamp(status, 0, 4096)), '\0');
      net::recv_all(s, why.data(), why.size(), t, master);
      NN_ERROR("cannot form the process group: ", why);
    }
    net::recv_all(s, table.data(), table.size() * sizeof(Entry), t, master);
    for (auto& e : table)
      if (e.ip == 0) e.ip = master_ip;
  }
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  const Entry& n = table[size_t(next)];
  impl_->next = net::connect_to(n.ip, n.port, t, rank_name(next));
  const uint32_t me[2] = {kMagic, uint32_t(rank_)};
  net::send_all(impl_->next, me, sizeof me, t, rank_name(next));
  // As on the master port, a connection that does not introduce itself as rank-1 within a
  // few seconds (a port scan) is skipped.
  const auto ring_deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(t);
  while (!impl_->prev.valid()) {
    const double left = std::chrono::duration<double>(ring_deadline - std::chrono::steady_clock::now()).count();
    net::Socket s = net::accept_one(ring, std::max(left, 0.001), rank_name(prev) + " to connect", nullptr, t);
    uint32_t who[2] = {0, 0};
    try {
      net::recv_all(s, who, sizeof who, std::min(t, 5.0), rank_name(prev));
    } catch (const Error&) {
      continue;
    }
    if (who[0] == kMagic && who[1] == uint32_t(prev)) impl_->prev = std::move(s);
  }
  barrier();
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::all_reduce(std::vector<double>& values, ReduceOp op) {
  if (size_ == 1) return;
  impl_->agree(Impl::kValues, double(values.size()), double(op));
  impl_->ring_all_reduce(values.data(), values.size(), op);
}

void ProcessGroup::all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) {
  bool wide = false;
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    NN_CHECK(t.defined(), "all_reduce: an undefined tensor");
    NN_CHECK(is_floating(t.dtype()), "all_reduce takes floating tensors, got ", dtype_name(t.dtype()));
    wide = wide || t.dtype() == DType::f64;
    total += t.numel();
  }
  if (size_ == 1) return;
  impl_->agree(Impl::kTensors, double(total), double(op) + 4 * double(wide), tensors);
  NoGradGuard ng;
  const DType carrier = wide ? DType::f64 : DType::f32;
  // `total` carrier values at p, reduced across the ranks in place
  auto reduce = [&](void* p) {
    if (wide) impl_->ring_all_reduce(static_cast<double*>(p), size_t(total), op);
    else impl_->ring_all_reduce(static_cast<float*>(p), size_t(total), op);
  };
  // One contiguous CPU tensor of the carrier type is reduced where it lies; anything else is
  // gathered into one host buffer: one ring pass, however many gradients there are.
  const Tensor& t0 = tensors.empty() ? Tensor() : tensors[0];
  if (tensors.size() == 1 && t0.device().is_cpu() && t0.dtype() == carrier && t0.is_contiguous()) {
    t0.storage()->bump_version();  // reduced in place (see Storage::version)
    reduce(t0.data_ptr());
    return;
  }
  char* buf = impl_->grow<char>(impl_->staging, size_t(total) * element_size(carrier));
  // Tensors on one GPU (a model's gradients) are packed there and move as one download and
  // one upload, not two copies and host waits per tensor (ResNet-50 has 161 gradients)
  const bool one_gpu = total > 0 && t0.device().is_cuda() &&
                       std::all_of(tensors.begin(), tensors.end(),
                                   [&](const Tensor& t) { return t.device() == t0.device(); });
  if (one_gpu) {
    std::vector<Tensor> flat;
    for (const Tensor& t : tensors) flat.push_back(t.reshape({t.numel()}).to(carrier));
    const Tensor h = concat(flat, 0).to(kCPU);
    std::memcpy(buf, h.data_ptr(), h.nbytes());
    reduce(buf);
    const Tensor back = from_blob(buf, {total}, carrier, t0.device());  // one upload
    int64_t at = 0;
    for (const Tensor& t : tensors) {
      const_cast<Tensor&>(t).copy_(back.narrow(0, at, t.numel()).reshape(t.shape()));
      at += t.numel();
    }
    return;
  }
  size_t off = 0;
  for (const Tensor& t : tensors) {
    Tensor h = t.to(kCPU).to(carrier).contiguous();
    if (h.nbytes()) std::memcpy(buf + off, h.data_ptr(), h.nbytes());  // an empty tensor has no data
    off += h.nbytes();
  }
  reduce(buf);
  off = 0;
  for (const Tensor& t : tensors) {
    Tensor view = from_blob(buf + off, t.shape(), carrier);
    const_cast<Tensor&>(t).copy_(view);
    off += size_t(t.numel()) * element_size(carrier);
  }
}

void ProcessGroup::broadcast(const std::vector<Tensor>& tensors, int root) {
  NN_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is out of range for world size ", size_);
  if (size_ == 1) return;
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    NN_CHECK(t.defined(), "broadcast: an undefined tensor");
    bytes += int64_t(t.nbytes());
  }
  impl_->agree(Impl::kBroadcast, double(bytes), double(root), tensors);
  NoGradGuard ng;
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  const bool forward = next != root;
  for (const Tensor& t : tensors) {
    // A contiguous CPU tensor is received in place; others through a host copy.
    Tensor h = t.to(kCPU).contiguous();
    if (rank_ != root) {
      h.storage()->bump_version();  // h may be t itself, received in place
      net::recv_all(impl_->prev, h.data_ptr(), h.nbytes(), impl_->timeout, rank_name(prev));
    }
    if (forward) net::send_all(impl_->next, h.data_ptr(), h.nbytes(), impl_->timeout, rank_name(next));
    if (rank_ != root && h.data_ptr() != t.data_ptr()) const_cast<Tensor&>(t).copy_(h);
  }
}

void ProcessGroup::barrier() {
  std::vector<double> v{0};
  all_reduce(v);
}

void broadcast_module(ProcessGroup& pg, Module& module) {
  std::vector<Tensor> ts;
  for (auto& [name, t] : module.state_dict()) ts.push_back(t);
  pg.broadcast(ts, 0);
}

bool replicas_identical(ProcessGroup& pg, const Module& module) {
  uint64_t h = kFnvStart;
  for (auto& [name, t] : module.state_dict()) {
    Tensor c = t.to(kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = c.nbytes();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {  // eight bytes a step: this runs over every weight each epoch
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = fnv(h, w);
    }
    for (; i < n; ++i) h = fnv(h, p[i]);
  }
  // In two 32-bit halves, exact in doubles; max(h) == -max(-h) means every rank has h.
  const double hi = double(h >> 32), lo = double(h & 0xffffffffu);
  std::vector<double> v{hi, lo, -hi, -lo};
  pg.all_reduce(v, ReduceOp::max);
  return v[0] == -v[2] && v[1] == -v[3];
}

void average_buffers(ProcessGroup& pg, Module& module) {
  if (pg.size() == 1) return;
  std::vector<Tensor> bufs;
  std::set<const void*> seen;
  for (auto& [name, b] : module.named_buffers())
    if (is_floating(b.dtype()) && seen.insert(b.data_ptr()).second) bufs.push_back(b);
  pg.all_reduce(bufs, ReduceOp::mean);
}

bool average_gradients(ProcessGroup& pg, const std::vector<Tensor>& params, bool flag) {
  if (pg.size() == 1) return flag;
  std::vector<Tensor> ps;
  std::set<const TensorImpl*> seen;  // a parameter listed twice is averaged once
  for (const Tensor& p : params)
    if (seen.insert(p.impl()).second) ps.push_back(p);
  // Which parameters have a gradient on any rank (a branch one rank's data did not take
  // leaves it undefined there), and the flag, in one message.
  std::vector<double> any(ps.size() + 1);
  for (size_t i = 0; i < ps.size(); ++i) any[i] = ps[i].grad().defined() ? 1 : 0;
  any.back() = flag ? 1 : 0;
  pg.all_reduce(any, ReduceOp::max);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (any[i] == 0) continue;
    if (!ps[i].grad().defined()) ps[i].set_grad(zeros_like(ps[i]));  // contributes nothing
    grads.push_back(ps[i].grad());
  }
  pg.all_reduce(grads, ReduceOp::mean);
  return any.back() > 0;
}

}  // namespace nn::dist
