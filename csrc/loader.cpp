#include "loader.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace salientpp {

BatchLoader::BatchLoader(std::shared_ptr<const Sampler> sampler, torch::Tensor order, torch::Tensor bounds,
                         uint64_t seed, Labels labels, std::optional<FetchContext> fetch, int64_t num_threads,
                         int64_t read_ahead, int64_t first_batch, bool low_priority)
    : sampler_(std::move(sampler)),
      order_(std::move(order)),
      bounds_(std::move(bounds)),
      seed_(seed),
      labels_(std::move(labels)),
      fetch_(std::move(fetch)),
      low_priority_(low_priority) {
  TORCH_CHECK(order_.dim() == 1 && order_.scalar_type() == torch::kInt64 && order_.is_contiguous(),
              "order must be a contiguous 1-D int64 tensor");
  TORCH_CHECK(bounds_.dim() == 1 && bounds_.scalar_type() == torch::kInt64 && bounds_.is_contiguous() &&
                  bounds_.device().is_cpu() && bounds_.size(0) >= 1,
              "bounds must be a contiguous 1-D int64 CPU tensor with num_batches + 1 >= 1 entries");
  TORCH_CHECK(num_threads >= 1 && read_ahead >= 1, "num_threads and read_ahead must be >= 1");
  const int64_t n = order_.size(0);
  const int64_t* b = bounds_.data_ptr<int64_t>();
  num_batches_ = bounds_.size(0) - 1;
  TORCH_CHECK(b[0] >= 0 && b[num_batches_] <= n, "bounds must lie within [0, ", n, "]");
  for (int64_t i = 0; i < num_batches_; ++i) TORCH_CHECK(b[i] <= b[i + 1], "bounds must be non-decreasing");
  TORCH_CHECK(first_batch >= 0 && first_batch <= num_batches_, "first_batch must lie in [0, ", num_batches_, "]");
  next_claim_ = consumed_ = first_batch;
  slots_.resize(read_ahead);
  const int64_t workers = std::max<int64_t>(1, std::min(num_threads, num_batches_ - first_batch));
  threads_.reserve(workers);
  for (int64_t t = 0; t < workers; ++t) threads_.emplace_back(&BatchLoader::work, this);
}

BatchLoader::~BatchLoader() { close(); }

Batch BatchLoader::sample(int64_t i, Workspace& ws) const {
  const int64_t* bounds = bounds_.data_ptr<int64_t>();
  return sampler_->sample(order_.data_ptr<int64_t>() + bounds[i], bounds[i + 1] - bounds[i], seed_,
                          static_cast<uint64_t>(i), labels_, fetch_, ws);
}

void lower_thread_priority() {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(19, nice + kSamplerNiceOffset));
}

void BatchLoader::work() {
  if (low_priority_) lower_thread_priority();
  Sampler::Lease lease(*sampler_);
  const int64_t depth = static_cast<int64_t>(slots_.size());
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
      batch = sample(i, lease.get());
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (i < consumed_) continue;  // the consumer sampled it itself meanwhile
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
  int64_t i = -1;  // >= 0: sample batch i here
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_ || consumed_ >= num_batches_) return std::nullopt;
    Slot& slot = slots_[consumed_ % static_cast<int64_t>(slots_.size())];
    const bool claimed = next_claim_ > consumed_;
    if (claimed && !slot.ready && low_priority_) {
      // While this thread waits, the worker has its core: give it about one batch's sampling time.
      ready_cv_.wait_for(lock, std::chrono::duration<double>(sample_seconds_), [&] { return stop_ || slot.ready; });
    }
    if (stop_) return std::nullopt;
    if (!slot.ready && (!claimed || low_priority_)) {
      i = consumed_;
      next_claim_ = std::max(next_claim_, i + 1);  // no worker starts it now
    } else {
      ready_cv_.wait(lock, [&] { return stop_ || slot.ready; });
      if (stop_) return std::nullopt;
      batch = std::move(slot.batch);
      error = slot.error;
      slot = Slot{};
      ++consumed_;
    }
  }
  if (i >= 0) {
    if (!inline_lease_) inline_lease_ = std::make_unique<Sampler::Lease>(*sampler_);
    const auto start = std::chrono::steady_clock::now();
    try {
      batch = sample(i, inline_lease_->get());
    } catch (...) {
      error = std::current_exception();
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return std::nullopt;
    slots_[i % static_cast<int64_t>(slots_.size())] = Slot{};  // a worker may have finished it meanwhile
    ++consumed_;
    sample_seconds_ = took.count();
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
  inline_lease_.reset();
}

}  // namespace salientpp
