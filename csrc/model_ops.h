// The model step's kernels: aggregation over an MFG's CSR and a fused (ReLU +) dropout whose mask
// comes from a counter-based generator. On CPU tensors they run here; on CUDA tensors their twins
// in model_kernels.cu run on the CUDA stream `stream` (a cudaStream_t as an integer, 0: the
// default stream), asynchronously, with the same results (the aggregation's gradient up to the
// order of its additions).
#pragma once
#include <torch/extension.h>

#include <cstdint>

namespace salientpp {

// out [num_dst, F] (x's dtype, or with `widen` the accumulation type: float for bfloat16/half,
// so 16-bit input rows are read in place into float32 output without a float32 copy of x):
// out[d] = s_d * sum of x[col[e]] over e in [rowptr[d], rowptr[d+1]),
// s_d = 1 / degree (0 for no edges) when `mean`, else 1. rowptr int64 [num_dst + 1], col int64 [E]
// with entries in [0, x.size(0)), x [num_src, F] float/double/bfloat16/half. Sums are kept in
// float (double for double) and each output row is written by one thread, so the result does
// not depend on the number of threads.
torch::Tensor csr_aggregate(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& x, bool mean,
                            bool widen, int64_t stream = 0);

// The gradient of csr_aggregate with respect to x: grad_x [num_src, F], grad_x[col[e]] += s_d *
// grad_out[d]. Threads split the F columns (so no two threads add to the same element), and each
// element receives its terms in edge order, whatever the number of threads.
torch::Tensor csr_aggregate_backward(const torch::Tensor& rowptr, const torch::Tensor& col,
                                     const torch::Tensor& grad_out, int64_t num_src, bool mean, int64_t stream = 0);

// out = (relu ? max(x, 0) : x) * keep / (1 - p) where keep_i = [u(seed, i) >= p] and u(seed, i) is
// a uniform 32-bit number from the counter-based hash of (seed, i / 2) (two per 64-bit hash), i
// the flat index. The mask needs no storage: it is recomputed from (seed, i) for the gradient.
torch::Tensor dropout_forward(const torch::Tensor& x, double p, uint64_t seed, bool relu, int64_t stream = 0);

// The gradient of dropout_forward: grad_out * keep / (1 - p), and 0 where out <= 0 when relu
// (out > 0 exactly where x > 0 and the element was kept). `out` is the forward's output (used
// only when relu).
torch::Tensor dropout_backward(const torch::Tensor& grad_out, const torch::Tensor& out, double p, uint64_t seed,
                               bool relu, int64_t stream = 0);

// The keep mask alone (bool, x's shape), for tests and the reference implementation.
torch::Tensor dropout_mask(at::IntArrayRef shape, double p, uint64_t seed);

// bool [n, width]: element (r, c) kept (true) when uniform32(seed, ids[r] * width + c) >= p * 2^32,
// the mask dropout_mask would give element ids[r] * width + c of a larger tensor: whoever holds a
// row with a given id draws the same mask for it (full-graph training's recomputed rows).
torch::Tensor keyed_dropout_mask(const torch::Tensor& ids, int64_t width, double p, uint64_t seed);

}  // namespace salientpp
