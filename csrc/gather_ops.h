// Torch entry point of the row gathers (gather.h): checks tensors once, then runs the CPU
// reference or the CUDA kernel.
#pragma once
#include <torch/extension.h>

#include <optional>
#include <tuple>
#include <vector>

namespace salientpp {

// (low, high, idx, pos): out[pos[j]] <- cat(low, high)[idx[j]]; a missing idx or pos is the identity.
using RowSourceArgs =
    std::tuple<torch::Tensor, std::optional<torch::Tensor>, std::optional<torch::Tensor>, std::optional<torch::Tensor>>;

// Writes every source's rows into out ([rows, F], contiguous). On CPU the indices are checked and
// the copy runs on torch's intra-op threads; on CUDA the kernel is queued on `stream` (a
// cudaStream_t as an integer) and the indices are trusted (they come from the row-origin finder,
// which checked them on the host).
void gather_rows(torch::Tensor out, const std::vector<RowSourceArgs>& sources, int64_t stream);

}  // namespace salientpp
