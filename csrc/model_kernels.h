// CUDA kernels of the model step (model_kernels.cu), the device twins of the CPU kernels in
// model_ops.cpp: aggregation over an MFG's CSR and the fused (ReLU +) dropout.
//
// Plain C++ with raw pointers and no torch headers, so that model_kernels.cu compiles with nvcc
// alone. Every function launches on the given stream (a cudaStream_t passed as void*), returns a
// cudaError_t as int (0 on success; cuda_error_name in gather.h names it) and is asynchronous.
#pragma once

#include <cstdint>

namespace salientpp {

// The element types of the kernels (torch's float32, float64, float16 and bfloat16).
enum class KernelDtype : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };

// out [num_dst, f] = s_d * sum of x[col[e]] over e in [rowptr[d], rowptr[d+1]), s_d = 1 / degree
// (0 rows without edges) when `mean`, else 1. Sums are kept in float (double for float64) in edge
// order, as the CPU kernel keeps them, so the two give the same bits. `out` has x's dtype, or
// with `widen` float32 (16-bit x read in place). rowptr, col, x and out are device memory.
int csr_aggregate_cuda(const int64_t* rowptr, const int64_t* col, const void* x, void* out, int64_t num_dst,
                       int64_t f, KernelDtype dtype, bool mean, bool widen, void* stream);

// The gradient with respect to x: acc [num_src, f], zeroed by the caller, in float (double for
// float64) += s_d * grad_out[d] at row col[e] for every edge (atomic adds: the order of the
// terms, and so the last bits, may differ from the CPU kernel's).
int csr_aggregate_backward_cuda(const int64_t* rowptr, const int64_t* col, const void* grad_out, void* acc,
                                int64_t num_dst, int64_t f, KernelDtype dtype, bool mean, void* stream);

// out[i] = x[i] * factor_i for the n elements: factor_i = scale when element i is kept (its
// uniform32(seed, i) >= threshold; every element unless `hash`), times [ref[i] > 0] with `relu`.
// The same counter-based hash as the CPU kernel, so the masks are equal bit for bit.
int dropout_cuda(const void* x, const void* ref, void* out, int64_t n, KernelDtype dtype, uint64_t seed,
                 uint32_t threshold, double scale, bool relu, bool hash, void* stream);

}  // namespace salientpp
