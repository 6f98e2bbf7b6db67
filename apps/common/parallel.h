// Data-parallel runs of the apps: the --world-size/--rank/--master flags (or torchrun's
// environment variables), the process group, each rank's shard of the data, and sums of the
// numbers every rank measured. Alone (world size 1) everything here is a no-op.
#pragma once
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <memory>
#include <string>
#include <vector>

namespace apps {

void add_parallel_options(cxxopts::Options& opts);

class Parallel {
 public:
  // Joins the process group (blocks until every rank has joined). Ranks other than 0 send
  // their standard output to /dev/null: rank 0 speaks for the run; errors still reach
  // standard error from every rank.
  Parallel(const std::string& app, const cxxopts::ParseResult& args);
  // The process group the flags and environment ask for, without joining it.
  static nn::dist::Options options(const cxxopts::ParseResult& args);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }
  nn::dist::ProcessGroup* group() const { return pg_.get(); }

  // Makes `o` this rank's shard: equal shards for training (ranks step together), every
  // sample once for evaluation.
  void shard(nn::data::DataLoaderOptions& o, bool training) const;
  // How a banner states the batch: "128", or "128 per process (256 per step)".
  std::string batch_note(int64_t batch) const;
  // Sums (or maxes) host values over the ranks.
  void sum(std::vector<double>& v) const;
  void max(std::vector<double>& v) const;
  // Throws nn::Error when the ranks' models are not bit-identical (they must be after every
  // step of data-parallel training).
  void check_replicas(const nn::Module& model, const std::string& when) const;

 private:
  int rank_ = 0, size_ = 1;
  std::unique_ptr<nn::dist::ProcessGroup> pg_;
};

}  // namespace apps
