#pragma once
#include <torch/extension.h>

#include <optional>

namespace salientpp {

// out + i * row_bytes <- src + index[i] * row_bytes for i < n, on the calling thread.
// Indices must already be checked to lie in range.
void copy_rows(const char* src, int64_t row_bytes, const int64_t* index, int64_t n, char* out);

// out[i, :] = src[index[i], :] for a contiguous 2-D CPU tensor `src` and int64 `index`.
// Writes into `out` when given (e.g. a pinned staging buffer), else allocates.
torch::Tensor gather_rows(const torch::Tensor& src, const torch::Tensor& index,
                          std::optional<torch::Tensor> out);

}  // namespace salientpp
