// Data-parallel training across processes and machines: a process group that connects its
// ranks over TCP (IPv4), sums tensors across them with a ring all-reduce, and broadcasts
// from one rank; plus the two things a training loop needs from it (the same initial
// weights everywhere, averaged gradients). Tensors on a GPU travel through host memory.
//
// Every rank constructs a ProcessGroup with the same world size and master address; rank 0
// listens there and hands every rank its ring neighbours. The environment names are
// torchrun's: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT.
#pragma once
#include <nn/tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nn {
class Module;
}

namespace nn::dist {

struct Options {
  int world_size = 1;
  int rank = 0;
  std::string master_addr = "127.0.0.1";  // a host name or IPv4 address rank 0 can be reached at
  int master_port = 29500;
  // How long to wait for the other ranks: at start-up, and for each collective (a rank
  // validating or checkpointing while the others wait counts against it). Infinity (or
  // anything beyond a century) waits forever.
  double timeout_seconds = 1800;
};

// Options from WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT; unset ones keep their defaults.
// Throws nn::Error naming the variable when a value is not a number or is out of range.
Options options_from_env();

// mean: the sum divided by the world size, in the f32/f64 carrier (a 16-bit tensor whose sum
// would overflow gets its mean).
enum class ReduceOp { sum, max, mean };

class ProcessGroup {
 public:
  // Connects all ranks (blocks until every rank has joined, or the timeout). A world of one
  // connects nothing. Throws nn::Error on a bad rank, a world size the ranks disagree on, a
  // rank already taken, or a timeout.
  explicit ProcessGroup(const Options& opts);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Reduces each tensor across ranks, in place: afterwards every rank holds the same values
  // (bit for bit). Floating tensors only (f16/bf16 are summed in f32); any device. Every
  // rank must pass the same number of elements in the same order; a mismatch is an error
  // on all of them, never a silent wrong answer.
  void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::sum);
  // The same for host values, summed in double precision.
  void all_reduce(std::vector<double>& values, ReduceOp op = ReduceOp::sum);
  // Copies `root`'s tensors into every other rank's, in place.
  void broadcast(const std::vector<Tensor>& tensors, int root = 0);
  // Returns once every rank has called it.
  void barrier();

  struct Impl;

 private:
  int rank_ = 0, size_ = 1;
  std::unique_ptr<Impl> impl_;
};

// Rank 0's parameters and buffers (state_dict) copied into every rank's module: the same
// starting weights everywhere.
void broadcast_module(ProcessGroup& pg, Module& module);
// True on every rank when all ranks' parameters and buffers are bit-identical, false on
// every rank otherwise (compares a 64-bit hash of the state_dict bytes). Data-parallel
// replicas must stay identical; checking it after an epoch costs one pass over the weights.
bool replicas_identical(ProcessGroup& pg, const Module& module);
// Replaces every floating buffer (batch norm's running statistics) by its mean over the ranks:
// each rank's statistics saw only its shard, and evaluation needs one set on every rank.
void average_buffers(ProcessGroup& pg, Module& module);
// Replaces each parameter's gradient by its mean over the ranks. A parameter without a
// gradient on some ranks (a branch their data did not take) counts as a zero gradient there
// and gets one (as in PyTorch's DDP); one without a gradient on every rank is left alone.
// `flag` rides along with the message that finds those: the result is true when any rank
// passed true, so the ranks can agree on a decision (stop after this step) cheaply.
bool average_gradients(ProcessGroup& pg, const std::vector<Tensor>& params, bool flag = false);

}  // namespace nn::dist
