// CUDA kernel of the row gathers declared in gather.h: one warp copies one output row.
#include <cuda_runtime.h>

#include <cstdint>

#include "gather.h"

namespace salientpp {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;

// Copies rows in words of type Word (the widest that divides every row and base address).
template <typename Word>
__global__ void gather_rows_kernel(RowGather g, char* out, int64_t total) {
  const int64_t words = g.row_bytes / static_cast<int64_t>(sizeof(Word));
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; r < total; r += warps) {
    int64_t j = r;
    int s = 0;
    while (j >= g.sources[s].n) j -= g.sources[s++].n;  // at most kMaxRowSources steps
    const RowSource& src = g.sources[s];
    const int64_t row = src.idx != nullptr ? src.idx[j] : j;
    const int64_t at = src.pos != nullptr ? src.pos[j] : j;
    const char* from = row < src.split ? src.low + row * g.row_bytes : src.high + (row - src.split) * g.row_bytes;
    const Word* in = reinterpret_cast<const Word*>(from);
    Word* to = reinterpret_cast<Word*>(out + at * g.row_bytes);
    for (int64_t w = lane; w < words; w += kWarp) to[w] = in[w];
  }
}

bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The widest word (16, 8, 4, 2 or 1 bytes) dividing the row size and every base address.
int64_t word_bytes(const RowGather& g, const char* out) {
  for (int64_t w = 16; w > 1; w /= 2) {
    bool ok = g.row_bytes % w == 0 && aligned(out, w);
    for (int s = 0; s < g.num_sources && ok; ++s) {
      ok = aligned(g.sources[s].low, w) && (g.sources[s].high == nullptr || aligned(g.sources[s].high, w));
    }
    if (ok) return w;
  }
  return 1;
}

template <typename Word>
void launch(const RowGather& g, char* out, int64_t total, cudaStream_t stream) {
  const int64_t warps_per_block = kThreads / kWarp;
  const int64_t blocks = (total + warps_per_block - 1) / warps_per_block;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
  gather_rows_kernel<Word><<<grid, kThreads, 0, stream>>>(g, out, total);
}

}  // namespace

int gather_rows_cuda(const RowGather& g, char* out, void* stream) {
  int64_t total = 0;
  for (int s = 0; s < g.num_sources; ++s) total += g.sources[s].n;
  if (total == 0 || g.row_bytes == 0) return 0;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (word_bytes(g, out)) {
    case 16: launch<uint4>(g, out, total, st); break;
    case 8: launch<uint2>(g, out, total, st); break;
    case 4: launch<uint32_t>(g, out, total, st); break;
    case 2: launch<uint16_t>(g, out, total, st); break;
    default: launch<uint8_t>(g, out, total, st); break;
  }
  return static_cast<int>(cudaGetLastError());
}

const char* cuda_error_name(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace salientpp
