// DataLoader: seeded per-epoch shuffling, batching, and a one-thread prefetcher that keeps up
// to two batches ready.
#include <nn/data.h>
#include <omp.h>

#include <random>

namespace nn::data {

namespace {
constexpr size_t kQueueDepth = 2;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions opts)
    : dataset_(std::move(dataset)), opts_(opts) {
  NN_CHECK(dataset_, "DataLoader: dataset is null");
  NN_CHECK(opts_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opts_.batch_size);
  NN_CHECK(dataset_->size() > 0, "DataLoader: the data set is empty");
  NN_CHECK(opts_.shards >= 1 && opts_.shard >= 0 && opts_.shard < opts_.shards, "DataLoader: shard ",
           opts_.shard, " of ", opts_.shards, " is out of range");
  // Ranks that step together need a batch each; an evaluation shard may be empty.
  NN_CHECK(size() > 0 || !opts_.even_shards, "DataLoader: ", dataset_->size(),
           " samples cannot be split into ", opts_.shards, " shards");
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), k = opts_.shards, s = opts_.shard;
  return opts_.even_shards ? n / k : s < n ? (n - s - 1) / k + 1 : 0;  // (n - s + k - 1 overflows)
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::num_batches() const {
  int64_t n = size(), b = opts_.batch_size;
  return opts_.drop_last ? n / b : n / b + (n % b != 0);  // (n + b - 1 overflows for a huge b)
}

void DataLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  NN_CHECK(epoch >= 0 && start_batch >= 0 && start_batch <= num_batches(),
           "DataLoader::set_epoch: epoch ", epoch, ", start batch ", start_batch, " out of range");
  epoch_ = epoch;
  start_batch_ = start_batch;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  std::vector<int64_t> idx(size_t(dataset_->size()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t(i);
  auto shard_of = [&](const std::vector<int64_t>& all) {
    if (opts_.shards == 1) return all;
    std::vector<int64_t> mine(static_cast<size_t>(size()));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = all[size_t(opts_.shard + int64_t(i) * opts_.shards)];
    return mine;
  };
  if (!opts_.shuffle) return shard_of(idx);
  // Fisher-Yates with mt19937_64 (fully specified by the standard, unlike std::shuffle), so
  // the order is the same with every compiler and library.
  std::mt19937_64 rng(opts_.seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch) + 1);
  for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[rng() % i]);
  return shard_of(idx);
}

Batch DataLoader::make_batch(int64_t b) const {
  const int64_t bs = opts_.batch_size;
  const int64_t lo = b * bs, hi = std::min<int64_t>(lo + bs, int64_t(order_.size()));
  return dataset_->get_epoch_batch(std::vector<int64_t>(order_.begin() + lo, order_.begin() + hi), order_epoch_);
}

void DataLoader::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  queue_.clear();
  stop_ = false;
}

DataLoader::Iterator DataLoader::begin() {
  stop_worker();  // an earlier iteration left unfinished
  order_ = order(epoch_);
  order_epoch_ = epoch_;
  const int64_t first = start_batch_, total = num_batches();
  ++epoch_;
  start_batch_ = 0;
  if (opts_.prefetch && first < total) {
    // A new thread's OpenMP teams take the process default (all cores), not the number of
    // threads set on this one (nn::set_num_threads): the worker uses this thread's.
    const int threads = omp_get_max_threads();
    worker_ = std::thread([this, first, total, threads] {
      omp_set_num_threads(threads);
      for (int64_t b = first; b < total; ++b) {
        Prepared p;
        try {
          p.batch = make_batch(b);
        } catch (...) {  // thrown where this batch is taken; the next ones still come
          p.error = std::current_exception();
        }
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < kQueueDepth; });
        if (stop_) return;
        queue_.push_back(std::move(p));
        cv_.notify_all();
      }
    });
  }
  Iterator it(this, first, ++iteration_);
  if (first < total) {
    try {
      it.current_ = next_batch(first);
    } catch (...) {  // (no iterator to step past it) the next begin() goes on after it
      if (first + 1 < total) set_epoch(order_epoch_, first + 1);
      throw;
    }
  }
  return it;
}

Batch DataLoader::next_batch(int64_t b) {
  if (!opts_.prefetch) return make_batch(b);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty(); });
  Prepared p = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  if (p.error) std::rethrow_exception(p.error);
  return std::move(p.batch);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  NN_CHECK(iteration_ == dl_->iteration_, "DataLoader: this iteration was ended by a newer "
           "begin() (a loop over the same loader inside it?): one iteration at a time");
  ++index_;
  current_ = Batch();  // (a batch that fails leaves no stale one behind)
  if (index_ < dl_->num_batches()) current_ = dl_->next_batch(index_);
  else {
    current_ = Batch();
    if (dl_->worker_.joinable()) dl_->worker_.join();
  }
  return *this;
}

}  // namespace nn::data
