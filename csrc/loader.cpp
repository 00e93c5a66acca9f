#include "loader.h"

#include <algorithm>

namespace salientpp {

BatchLoader::BatchLoader(std::shared_ptr<const Sampler> sampler, torch::Tensor order, torch::Tensor bounds,
                         uint64_t seed, Labels labels, std::optional<FetchContext> fetch, int64_t num_threads,
                         int64_t queue_depth, int64_t first_batch)
    : sampler_(std::move(sampler)),
      order_(std::move(order)),
      bounds_(std::move(bounds)),
      seed_(seed),
      labels_(std::move(labels)),
      fetch_(std::move(fetch)) {
  TORCH_CHECK(order_.dim() == 1 && order_.scalar_type() == torch::kInt64 && order_.is_contiguous(),
              "order must be a contiguous 1-D int64 tensor");
  TORCH_CHECK(bounds_.dim() == 1 && bounds_.scalar_type() == torch::kInt64 && bounds_.is_contiguous() &&
                  bounds_.device().is_cpu() && bounds_.size(0) >= 1,
              "bounds must be a contiguous 1-D int64 CPU tensor with num_batches + 1 >= 1 entries");
  TORCH_CHECK(num_threads >= 1 && queue_depth >= 1, "num_threads and queue_depth must be >= 1");
  const int64_t n = order_.size(0);
  const int64_t* b = bounds_.data_ptr<int64_t>();
  num_batches_ = bounds_.size(0) - 1;
  TORCH_CHECK(b[0] >= 0 && b[num_batches_] <= n, "bounds must lie within [0, ", n, "]");
  for (int64_t i = 0; i < num_batches_; ++i) TORCH_CHECK(b[i] <= b[i + 1], "bounds must be non-decreasing");
  TORCH_CHECK(first_batch >= 0 && first_batch <= num_batches_, "first_batch must lie in [0, ", num_batches_, "]");
  next_claim_ = consumed_ = first_batch;
  slots_.resize(queue_depth);
  const int64_t workers = std::max<int64_t>(1, std::min(num_threads, num_batches_ - first_batch));
  threads_.reserve(workers);
  for (int64_t t = 0; t < workers; ++t) threads_.emplace_back(&BatchLoader::work, this);
}

BatchLoader::~BatchLoader() { close(); }

void BatchLoader::work() {
  Sampler::Lease lease(*sampler_);
  const int64_t depth = static_cast<int64_t>(slots_.size());
  const int64_t* order = order_.data_ptr<int64_t>();
  const int64_t* bounds = bounds_.data_ptr<int64_t>();
  while (true) {
    int64_t i;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_cv_.wait(lock, [&] { return stop_ || next_claim_ >= num_batches_ || next_claim_ < consumed_ + depth; });
      if (stop_ || next_claim_ >= num_batches_) return;
      i = next_claim_++;
    }
    std::optional<Batch> batch;
    std::exception_ptr error;
    try {
      const int64_t begin = bounds[i];
      batch = sampler_->sample(order + begin, bounds[i + 1] - begin, seed_, static_cast<uint64_t>(i), labels_, fetch_,
                               lease.get());
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Slot& slot = slots_[i % depth];
      slot.batch = std::move(batch);
      slot.error = error;
      slot.ready = true;
    }
    ready_cv_.notify_all();
  }
}

std::optional<Batch> BatchLoader::next() {
  std::optional<Batch> batch;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_ || consumed_ >= num_batches_) return std::nullopt;
    Slot& slot = slots_[consumed_ % static_cast<int64_t>(slots_.size())];
    ready_cv_.wait(lock, [&] { return stop_ || slot.ready; });
    if (stop_) return std::nullopt;
    batch = std::move(slot.batch);
    error = slot.error;
    slot = Slot{};
    ++consumed_;
  }
  space_cv_.notify_all();
  if (error) std::rethrow_exception(error);
  return batch;
}

void BatchLoader::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  space_cv_.notify_all();
  ready_cv_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  for (Slot& slot : slots_) slot = Slot{};
}

}  // namespace salientpp
