// Open-addressing hash map from global vertex id (int64 >= 0) to batch-local index.
#pragma once
#include <cstdint>
#include <vector>

namespace salientpp {

// Linear probing with Fibonacci hashing, kept at most half full. Its memory follows the
// largest batch seen, not the number of graph vertices; `clear` costs O(capacity).
class IdMap {
 public:
  // Empties the map and makes room for `expected` keys without rehashing.
  void clear(int64_t expected) {
    size_t cap = 1024;
    while (cap < 2 * static_cast<size_t>(expected)) cap <<= 1;
    if (cap > slots_.size()) {
      slots_.assign(cap, Slot{kEmpty, 0});
      set_capacity(cap);
    } else {
      std::fill(slots_.begin(), slots_.begin() + capacity_, Slot{kEmpty, 0});
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
      if (s.key == key) return s.value;
      if (s.key == kEmpty) {
        s.key = key;
        s.value = value;
        if (2 * ++size_ > capacity_) grow();
        return value;
      }
      i = (i + 1) & mask_;
    }
  }

 private:
  struct Slot {
    int64_t key;
    int64_t value;
  };
  static constexpr int64_t kEmpty = -1;

  size_t bucket(int64_t key) const {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  void set_capacity(size_t cap) {
    capacity_ = cap;
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
  }

  void grow() {
    std::vector<Slot> old(slots_.begin(), slots_.begin() + capacity_);
    const size_t cap = capacity_ * 2;
    if (cap > slots_.size()) slots_.resize(cap);
    std::fill(slots_.begin(), slots_.begin() + cap, Slot{kEmpty, 0});
    set_capacity(cap);
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = bucket(s.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace salientpp
