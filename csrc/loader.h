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

// How many nice steps low-priority workers run below the thread that created them (at most
// nice 19). From nice 0, Linux weighs a nice-5 thread at 335 against a default thread's 1024, so
// a worker sharing a core with a training thread gets a quarter of it at most, and under two
// busy outside processes it still gets the few percent of a core that sampling needs. At nice
// 19 (weight 15) it got nothing there, and the training thread sampled most batches itself while
// its other torch thread idled (docs/training.md, "The sampler's nice value"). Relative, because
// an unprivileged thread may raise its nice value but not lower it.
constexpr int kSamplerNiceOffset = 5;

// Moves the calling thread kSamplerNiceOffset nice steps down (at most to nice 19). Linux keeps a
// nice value per thread, inherited from the thread that created it; a failure only costs overlap,
// so it is ignored.
void lower_thread_priority();

// Batch i holds order[bounds[i], bounds[i + 1]) and is sampled with the random stream (seed, i),
// so its content depends neither on the number of threads nor on timing. `bounds` (int64
// [num_batches + 1], non-decreasing, within [0, len(order)]) is chosen by the caller: fixed-size
// batches, or S balanced ones for ranks in lockstep; a batch may be empty (0 seeds, 0 nodes).
// Iteration starts at batch `first_batch` (a resumed epoch), with the same batches after it.
// Workers start batch i only once batch i - read_ahead has been taken, so at most
// `read_ahead` batches are in flight or waiting. Waits block on condition variables.
//
// The consumer never waits for a batch no worker has started: it samples that batch itself.
// With `low_priority`, the workers run kSamplerNiceOffset nice steps below the thread that
// created them, so they take mostly the cycles the consumer's thread leaves (while it waits on
// peers, say). For a batch a worker has started, the consumer waits at most as long as its own
// last inline sample took (its core is the worker's meanwhile), then samples the batch again
// itself (the same batch: its content depends only on (seed, i)) and the worker's copy is
// dropped. So a worker starved by other work costs the consumer at most one extra sampling time
// per batch.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Sampler> sampler, torch::Tensor order, torch::Tensor bounds, uint64_t seed,
              Labels labels, std::optional<FetchContext> fetch, int64_t num_threads, int64_t read_ahead,
              int64_t first_batch = 0, bool low_priority = false);
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
  // Samples batch i on the calling thread.
  Batch sample(int64_t i, Workspace& ws) const;

  std::shared_ptr<const Sampler> sampler_;
  torch::Tensor order_;
  torch::Tensor bounds_;
  int64_t num_batches_;
  uint64_t seed_;
  Labels labels_;
  std::optional<FetchContext> fetch_;
  bool low_priority_;
  std::unique_ptr<Sampler::Lease> inline_lease_;  // the consumer's workspace, made on first use
  double sample_seconds_ = 0.0;  // how long the consumer's last inline sample took (guarded by mutex_)

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
