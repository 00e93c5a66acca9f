// A pool of worker threads that samples the batches of one epoch into a bounded, ordered queue.
#pragma once
#include <torch/extension.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "sampler.h"

namespace salientpp {

// Batch i holds order[bounds[i], bounds[i + 1]) and is sampled with the random stream (seed, i),
// so its content depends neither on the number of threads nor on timing. `bounds` (int64
// [num_batches + 1], non-decreasing, within [0, len(order)]) is chosen by the caller: fixed-size
// batches, or S balanced ones for ranks in lockstep; a batch may be empty (0 seeds, 0 nodes).
// Iteration starts at batch `first_batch` (a resumed epoch), with the same batches after it.
// Workers start batch i only once batch i - queue_depth has been taken, so at most
// `queue_depth` batches are in flight or waiting. Waits block on condition variables.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Sampler> sampler, torch::Tensor order, torch::Tensor bounds, uint64_t seed,
              Labels labels, std::optional<FetchContext> fetch, int64_t num_threads, int64_t queue_depth,
              int64_t first_batch = 0);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  int64_t num_batches() const { return num_batches_; }

  // The next batch in order, or nothing after the last one (or after close). Rethrows a
  // worker's exception for the batch that raised it.
  std::optional<Batch> next();

  // Stops the workers (each finishes at most the batch in hand) and joins them. Idempotent.
  void close();

 private:
  struct Slot {
    bool ready = false;
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void work();

  std::shared_ptr<const Sampler> sampler_;
  torch::Tensor order_;
  torch::Tensor bounds_;
  int64_t num_batches_;
  uint64_t seed_;
  Labels labels_;
  std::optional<FetchContext> fetch_;

  std::mutex mutex_;
  std::condition_variable space_cv_;  // workers wait for a free slot
  std::condition_variable ready_cv_;  // the consumer waits for its batch
  std::vector<Slot> slots_;
  int64_t next_claim_ = 0;
  int64_t consumed_ = 0;
  bool stop_ = false;
  std::mutex join_mutex_;  // serialises concurrent close() calls
  std::vector<std::thread> threads_;
};

}  // namespace salientpp
