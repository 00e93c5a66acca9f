// Random numbers for the sampler: SplitMix64 streams keyed by (seed, batch index).
#pragma once
#include <cstdint>

namespace salientpp {

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit generator that passes BigCrush; cheap to seed,
// so every batch gets its own independent stream.
class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}

  // A stream determined only by (seed, stream); nearby seeds and streams give unrelated states.
  static Rng stream(uint64_t seed, uint64_t stream) {
    Rng a(seed);
    Rng b(a.next() ^ (stream * 0xd1b54a32d192ed03ULL));
    return Rng(b.next());
  }

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Exactly uniform integer in [0, n) for n >= 1 (Lemire's multiply-and-reject method).
  uint64_t below(uint64_t n) {
    __uint128_t m = static_cast<__uint128_t>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: the biased low values to reject
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace salientpp
