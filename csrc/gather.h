// Row gathers shared by the CPU code (gather_ops.cpp) and the CUDA kernels (gather.cu).
//
// Plain C++ with raw pointers and no torch headers, so that gather.cu compiles with nvcc alone.
#pragma once

#include <cstdint>

namespace salientpp {

// Sources one gather launch may combine (the fused assembly uses four).
constexpr int kMaxRowSources = 8;

// One source of rows: out[pos[j]] <- row idx[j] of a table split in two tiers, for j < n.
// Row r lives in `low` when r < split and at row r - split of `high` otherwise, so the owned rows
// (device tier, then pinned host tier) are one source. A null pos or idx means the identity.
// On CUDA, `low`, `high` and `out` may be device memory or pinned host memory (read through
// unified addressing); pos and idx are device memory.
struct RowSource {
  const char* low = nullptr;
  const char* high = nullptr;
  int64_t split = INT64_MAX;
  const int64_t* idx = nullptr;
  const int64_t* pos = nullptr;
  int64_t n = 0;
};

struct RowGather {
  RowSource sources[kMaxRowSources];
  int num_sources = 0;
  int64_t row_bytes = 0;  // bytes of one row, the same in every table and in out
};

// Every source's rows into out (out_bytes long), on the calling thread pool (OpenMP). Indices
// must be in range.
void gather_rows_cpu(const RowGather& gather, char* out, int64_t out_bytes);

// Rows j in [begin, end) of one source into out (out_bytes long), on the calling thread.
// - It prefetches the rows a few steps ahead: the rows are scattered in memory, so each copy
//   would otherwise wait for main memory in turn (1.8x faster for 400-byte rows of a 480 MB table).
// - An out larger than kStreamBytes is written with streaming (non-temporal) stores, which do not
//   read each destination line before overwriting it. Such an out leaves the cache before the
//   model reads it anyway. 1.6x faster for 400-byte rows into a 220 MB x, the size of a `products`
//   batch, and the model's later pass over x was not slower.
void copy_source_rows(const RowSource& src, int64_t row_bytes, char* out, int64_t out_bytes, int64_t begin,
                      int64_t end);

// The same on a CUDA stream (a cudaStream_t passed as void*); returns a cudaError_t as int
// (0 on success). Asynchronous: the caller orders its consumers after the stream.
int gather_rows_cuda(const RowGather& gather, char* out, void* stream);

// cudaGetErrorString of an error gather_rows_cuda returned.
const char* cuda_error_name(int error);

}  // namespace salientpp
