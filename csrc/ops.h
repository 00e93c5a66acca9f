#pragma once
#include <torch/extension.h>

#include <optional>

namespace salientpp {

// out[i, :] = src[index[i], :] for a contiguous 2-D CPU tensor `src` and int64 `index`.
// Writes into `out` when given (e.g. a pinned staging buffer), else allocates.
torch::Tensor gather_rows(const torch::Tensor& src, const torch::Tensor& index,
                          std::optional<torch::Tensor> out);

}  // namespace salientpp
