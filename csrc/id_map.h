// Maps from global vertex id (int64 >= 0) to batch-local index: an open-addressing hash map sized
// by the largest batch, and a direct table sized by the graph.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace salientpp {

// A batch-local index as both maps store it (int32), or an error for a batch past 2^31 nodes.
inline int32_t local_index(int64_t value) {
  if (value > std::numeric_limits<int32_t>::max()) {
    throw std::length_error("a batch reached more than 2^31 nodes; use smaller batches or fanouts");
  }
  return static_cast<int32_t>(value);
}

// Linear probing with Fibonacci hashing, kept at most half full. Its memory follows the
// largest batch seen, not the number of graph vertices. A slot belongs to the current batch
// only when its stamp equals the map's stamp, so `clear` is O(1) instead of a pass over memory.
class IdMap {
 public:
  // Empties the map and makes room for `expected` keys without rehashing.
  void clear(int64_t expected) {
    size_t cap = 1024;
    while (cap < 2 * static_cast<size_t>(expected)) cap <<= 1;
    if (cap > slots_.size()) {
      slots_.assign(cap, Slot{});
      set_capacity(cap);
      stamp_ = 1;
    } else if (++stamp_ == 0) {  // the stamp wrapped: old stamps could look current again
      std::fill(slots_.begin(), slots_.end(), Slot{});
      stamp_ = 1;
    }
    size_ = 0;
  }

  // Starts loading the bucket of `key` into the cache (a hint; the map is unchanged).
  void prefetch(int64_t key) const { __builtin_prefetch(&slots_[bucket(key)]); }

  // Returns the value stored for `key`, inserting `value` first when `key` is absent.
  int64_t get_or_insert(int64_t key, int64_t value) {
    size_t i = bucket(key);
    while (true) {
      Slot& s = slots_[i];
      if (s.stamp != stamp_) {
        s = Slot{key, local_index(value), stamp_};
        if (2 * ++size_ > capacity_) grow();
        return value;
      }
      if (s.key == key) return s.value;
      i = (i + 1) & mask_;
    }
  }

 private:
  struct Slot {
    int64_t key = 0;
    int32_t value = 0;
    uint32_t stamp = 0;  // 0 is never current
  };

  size_t bucket(int64_t key) const {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  void set_capacity(size_t cap) {
    capacity_ = cap;
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    size_ = 0;
  }

  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    const uint32_t current = stamp_;
    slots_.assign(old.size() * 2, Slot{});
    set_capacity(slots_.size());
    stamp_ = 1;
    for (const Slot& s : old) {
      if (s.stamp != current) continue;
      size_t i = bucket(s.key);
      while (slots_[i].stamp == stamp_) i = (i + 1) & mask_;
      slots_[i] = Slot{s.key, s.value, stamp_};
      ++size_;
    }
  }

  std::vector<Slot> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
  uint32_t stamp_ = 0;
};

// The same map as a direct table of one slot per vertex id in [0, num_nodes): a lookup reads one
// slot, with no hashing, probing or key comparison, and a slot is 8 bytes instead of 16. Its
// memory is 8 bytes per graph vertex whatever the batch size, so it suits graphs up to
// kDenseIdMapMaxNodes vertices (IdMap above that).
class DenseIdMap {
 public:
  explicit DenseIdMap(int64_t num_nodes) : num_nodes_(num_nodes) {}

  void clear(int64_t /*expected*/) {
    if (slots_.empty()) {
      slots_.assign(static_cast<size_t>(num_nodes_), Slot{});
      stamp_ = 1;
    } else if (++stamp_ == 0) {
      std::fill(slots_.begin(), slots_.end(), Slot{});
      stamp_ = 1;
    }
  }

  void prefetch(int64_t key) const { __builtin_prefetch(&slots_[static_cast<size_t>(key)]); }

  // `key` must lie in [0, num_nodes) (the sampler checks every id before it looks it up).
  int64_t get_or_insert(int64_t key, int64_t value) {
    Slot& s = slots_[static_cast<size_t>(key)];
    if (s.stamp == stamp_) return s.value;
    s = Slot{local_index(value), stamp_};
    return value;
  }

 private:
  struct Slot {
    int32_t value = 0;
    uint32_t stamp = 0;  // 0 is never current
  };

  int64_t num_nodes_;
  std::vector<Slot> slots_;
  uint32_t stamp_ = 0;
};

}  // namespace salientpp
