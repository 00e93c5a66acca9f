#include "gather_ops.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "gather.h"

namespace salientpp {

// Rows ahead of the copy whose lines are prefetched, and how many bytes of each (the hardware
// prefetcher follows a row once its first lines are in flight).
constexpr int64_t kPrefetchRows = 8;
constexpr int64_t kPrefetchBytes = 512;

// Outputs larger than this are written with streaming stores (half this machine's 32 MiB
// last-level cache: a larger one does not stay there until the model reads it).
constexpr int64_t kStreamBytes = int64_t{16} << 20;

namespace {

#if defined(__SSE2__)
// Streaming stores of 16 bytes need 16-byte aligned destinations: every row of out is one when
// out is and rows are a multiple of 16 bytes long (any float32 width that is a multiple of 4).
bool streams(const char* out, int64_t out_bytes, int64_t row_bytes) {
  return out_bytes > kStreamBytes && row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
}

void stream_row(char* to, const char* from, int64_t row_bytes) {
  for (int64_t b = 0; b < row_bytes; b += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + b), _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + b)));
  }
}

// Streaming stores are weakly ordered: make them visible before the copy returns.
void stream_fence() { _mm_sfence(); }
#else
// Without SSE2 (not x86-64) every copy is a plain one.
bool streams(const char*, int64_t, int64_t) { return false; }
void stream_row(char* to, const char* from, int64_t row_bytes) { std::memcpy(to, from, row_bytes); }
void stream_fence() {}
#endif

}  // namespace

void copy_source_rows(const RowSource& src, int64_t row_bytes, char* out, int64_t out_bytes, int64_t begin,
                      int64_t end) {
  auto from = [&](int64_t j) {
    const int64_t row = src.idx != nullptr ? src.idx[j] : j;
    return row < src.split ? src.low + row * row_bytes : src.high + (row - src.split) * row_bytes;
  };
  auto to = [&](int64_t j) { return out + (src.pos != nullptr ? src.pos[j] : j) * row_bytes; };
  const int64_t lines = std::min(row_bytes, kPrefetchBytes);
  const bool stream = streams(out, out_bytes, row_bytes);
  for (int64_t j = begin; j < end; ++j) {
    if (j + kPrefetchRows < end) {
      const char* ahead_from = from(j + kPrefetchRows);
      char* ahead_to = stream ? nullptr : to(j + kPrefetchRows);  // streaming stores read no destination line
      for (int64_t b = 0; b < lines; b += 64) {
        __builtin_prefetch(ahead_from + b, 0);
        if (ahead_to != nullptr) __builtin_prefetch(ahead_to + b, 1);
      }
    }
    if (stream) {
      stream_row(to(j), from(j), row_bytes);
    } else {
      std::memcpy(to(j), from(j), row_bytes);
    }
  }
  if (stream) stream_fence();
}

void gather_rows_cpu(const RowGather& g, char* out, int64_t out_bytes) {
  constexpr int64_t kGrainBytes = 1 << 16;
  const int64_t grain = std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(g.row_bytes, 1));
  for (int s = 0; s < g.num_sources; ++s) {
    const RowSource& src = g.sources[s];
    at::parallel_for(0, src.n, grain, [&](int64_t begin, int64_t end) {
      copy_source_rows(src, g.row_bytes, out, out_bytes, begin, end);
    });
  }
}

#ifndef SALIENTPP_WITH_CUDA
int gather_rows_cuda(const RowGather&, char*, void*) { return -1; }
const char* cuda_error_name(int) { return "this build of the extension has no CUDA kernels"; }
#endif

namespace {

const int64_t* index_ptr(const std::optional<torch::Tensor>& t, const char* name, const torch::Device& device) {
  if (!t.has_value()) return nullptr;
  TORCH_CHECK(t->dim() == 1 && t->scalar_type() == torch::kInt64 && t->is_contiguous(), name,
              " must be a contiguous 1-D int64 tensor");
  TORCH_CHECK(t->device() == device, name, " must be on ", device, ", got ", t->device());
  return t->data_ptr<int64_t>();
}

void check_range(const int64_t* index, int64_t n, int64_t limit, const char* name) {
  for (int64_t j = 0; j < n; ++j) {
    TORCH_CHECK(index[j] >= 0 && index[j] < limit, name, "[", j, "] = ", index[j], " is outside [0, ", limit, ")");
  }
}

}  // namespace

void gather_rows(torch::Tensor out, const std::vector<RowSourceArgs>& sources, int64_t stream) {
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous(), "out must be a contiguous [rows, F] tensor");
  TORCH_CHECK(sources.size() <= static_cast<size_t>(kMaxRowSources), "at most ", kMaxRowSources,
              " row sources per gather, got ", sources.size());
  const bool cuda = out.is_cuda();
  TORCH_CHECK(cuda || out.is_cpu(), "out must be a CPU or CUDA tensor, got ", out.device());
  RowGather g;
  g.row_bytes = out.size(1) * out.element_size();
  g.num_sources = static_cast<int>(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    const auto& [low, high, idx, pos] = sources[s];
    int64_t rows = 0;
    for (const torch::Tensor* table : {&low, high.has_value() ? &*high : nullptr}) {
      if (table == nullptr) continue;
      TORCH_CHECK(table->dim() == 2 && table->is_contiguous() && table->size(1) == out.size(1) &&
                      table->scalar_type() == out.scalar_type(),
                  "every table must be a contiguous [rows, ", out.size(1), "] ", out.scalar_type(), " tensor like out");
      TORCH_CHECK(table->device() == out.device() || table->numel() == 0 ||
                      (cuda && table->is_cpu() && table->is_pinned()),
                  "a table must be on out's device (", out.device(), ") or, with CUDA, in pinned host memory");
      rows += table->size(0);
    }
    RowSource& src = g.sources[s];
    src.low = static_cast<const char*>(low.data_ptr());
    if (high.has_value()) {
      src.high = static_cast<const char*>(high->data_ptr());
      src.split = low.size(0);
    }
    src.idx = index_ptr(idx, "idx", out.device());
    src.pos = index_ptr(pos, "pos", out.device());
    src.n = idx.has_value() ? idx->size(0) : pos.has_value() ? pos->size(0) : rows;
    TORCH_CHECK(!idx.has_value() || !pos.has_value() || idx->size(0) == pos->size(0),
                "idx and pos of a source must have the same length, got ", idx->size(0), " and ", pos->size(0));
    TORCH_CHECK(idx.has_value() || src.n == rows, "a source without idx takes its table's ", rows,
                " rows in order, but ", src.n, " positions were given");
    TORCH_CHECK(pos.has_value() || src.n == out.size(0), "a source without pos fills out's ", out.size(0),
                " rows in order, but it has ", src.n);
    if (!cuda) {
      check_range(src.idx, idx.has_value() ? src.n : 0, rows, "idx");
      check_range(src.pos, pos.has_value() ? src.n : 0, out.size(0), "pos");
    }
  }
  char* dst = static_cast<char*>(out.data_ptr());
  if (!cuda) {
    gather_rows_cpu(g, dst, out.size(0) * g.row_bytes);
    return;
  }
  const int error = gather_rows_cuda(g, dst, reinterpret_cast<void*>(stream));
  TORCH_CHECK(error == 0, "the CUDA row gather failed: ", cuda_error_name(error));
}

}  // namespace salientpp
