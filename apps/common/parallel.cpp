#include "common/parallel.h"

#include <cstdio>

#include "common/cli.h"

namespace apps {

void add_parallel_options(cxxopts::Options& opts) {
  opts.add_options("data parallel")
      ("world-size", "processes training together, on one machine or several (default: "
                     "$WORLD_SIZE, else 1); --batch-size is per process",
       cxxopts::value<int>())
      ("rank", "this process's rank, 0 to world-size - 1 (default: $RANK, else 0)", cxxopts::value<int>())
      ("master", "ADDR:PORT where rank 0 listens (default: $MASTER_ADDR:$MASTER_PORT, else "
                 "127.0.0.1:29500)",
       cxxopts::value<std::string>())
      ("dist-timeout", "seconds to wait for the other ranks before giving up",
       cxxopts::value<double>()->default_value("1800"));
}

nn::dist::Options Parallel::options(const cxxopts::ParseResult& a) {
  nn::dist::Options o;
  try {
    o = nn::dist::options_from_env();
  } catch (const nn::Error& e) {  // a bad $WORLD_SIZE, $RANK or $MASTER_PORT is bad usage too
    throw UsageError(e.what());
  }
  if (a.count("world-size")) o.world_size = a["world-size"].as<int>();
  if (a.count("rank")) o.rank = a["rank"].as<int>();
  if (a.count("master")) {
    const std::string m = a["master"].as<std::string>();
    const size_t colon = m.rfind(':');
    int port = 0;
    try {
      if (colon != std::string::npos && colon + 1 < m.size()) port = std::stoi(m.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (colon == 0 || port < 1 || port > 65535 || m.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      throw UsageError("--master must be ADDR:PORT with a port from 1 to 65535, got '" + m + "'");
    o.master_addr = m.substr(0, colon);
    o.master_port = port;
  }
  o.timeout_seconds = check_positive("dist-timeout", a["dist-timeout"].as<double>());
  check_positive("world-size", o.world_size);
  // (either may come from the environment, as a launcher sets them: say which)
  auto from = [&](const char* flag, const char* env) -> std::string {
    if (a.count(flag)) return std::string("--") + flag;
    const char* v = std::getenv(env);
    return v && *v ? std::string("$") + env : std::string("--") + flag + "'s default";
  };
  if (o.rank < 0 || o.rank >= o.world_size)
    throw UsageError(from("rank", "RANK") + " must be from 0 to " + std::to_string(o.world_size - 1) +
                     " for world size " + std::to_string(o.world_size) + " (" +
                     from("world-size", "WORLD_SIZE") + "), got " + std::to_string(o.rank));
  return o;
}

Parallel::Parallel(const std::string& app, const cxxopts::ParseResult& a) {
  const nn::dist::Options o = options(a);
  rank_ = o.rank;
  size_ = o.world_size;
  if (size_ == 1) return;
  if (rank_ > 0) std::fflush(stdout), std::freopen("/dev/null", "w", stdout);
  std::printf("%s: data parallel over %d processes, master %s:%d (waiting for them to join)\n",
              app.c_str(), size_, o.master_addr.c_str(), o.master_port);
  std::fflush(stdout);
  pg_ = std::make_unique<nn::dist::ProcessGroup>(o);
}

void Parallel::shard(nn::data::DataLoaderOptions& o, bool training) const {
  o.shards = size_;
  o.shard = rank_;
  o.even_shards = training;
}

std::string Parallel::batch_note(int64_t batch) const {
  if (size_ == 1) return std::to_string(batch);
  return std::to_string(batch) + " per process (" + std::to_string(batch * size_) + " per step)";
}

void Parallel::sum(std::vector<double>& v) const {
  if (pg_) pg_->all_reduce(v);
}

void Parallel::max(std::vector<double>& v) const {
  if (pg_) pg_->all_reduce(v, nn::dist::ReduceOp::max);
}

void Parallel::check_replicas(const nn::Module& model, const std::string& when) const {
  if (!pg_) return;
  NN_CHECK(nn::dist::replicas_identical(*pg_, model), "the ranks' models differ ", when,
           " (data-parallel replicas must stay identical; this is a bug in libnn)");
}

}  // namespace apps
