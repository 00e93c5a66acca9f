// CUDA kernels of the model step declared in model_kernels.h. Each block takes destination rows
// in turn and its threads take the columns, so consecutive threads read consecutive elements of
// a source row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model_kernels.h"

namespace salientpp {
namespace {

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// The accumulation type of each element type: float for the 16-bit ones, as at::opmath_type.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename To, typename From> __device__ __forceinline__ To convert(From v) { return static_cast<To>(v); }
template <> __device__ __forceinline__ float convert<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float convert<float, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ __forceinline__ __half convert<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// SplitMix64's output function of (seed, counter), as mix() in model_ops.cpp.
__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename in_t, typename out_t>
__global__ void aggregate_kernel(const int64_t* rp, const int64_t* cl, const in_t* x, out_t* out, int64_t num_dst,
                                 int64_t f, bool mean) {
  using acc_t = typename Acc<in_t>::type;
  for (int64_t d = blockIdx.x; d < num_dst; d += gridDim.x) {
    const int64_t begin = rp[d], end = rp[d + 1];
    const acc_t s = (mean && end > begin) ? acc_t(1) / static_cast<acc_t>(end - begin) : acc_t(1);
    for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
      acc_t acc = acc_t(0);
      for (int64_t e = begin; e < end; ++e) acc += convert<acc_t>(x[cl[e] * f + c]);
      out[d * f + c] = convert<out_t>(acc * s);
    }
  }
}

template <typename in_t>
__global__ void aggregate_backward_kernel(const int64_t* rp, const int64_t* cl, const in_t* g,
                                          typename Acc<in_t>::type* acc, int64_t num_dst, int64_t f, bool mean) {
  using acc_t = typename Acc<in_t>::type;
  for (int64_t d = blockIdx.x; d < num_dst; d += gridDim.x) {
    const int64_t begin = rp[d], end = rp[d + 1];
    if (end == begin) continue;
    const acc_t s = mean ? acc_t(1) / static_cast<acc_t>(end - begin) : acc_t(1);
    for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
      const acc_t term = convert<acc_t>(g[d * f + c]) * s;
      for (int64_t e = begin; e < end; ++e) atomicAdd(acc + cl[e] * f + c, term);
    }
  }
}

// Each thread takes a pair of elements (2j, 2j + 1), whose uniforms are the low and high halves
// of one hash, as on the CPU.
template <typename T>
__global__ void dropout_kernel(const T* x, const T* ref, T* out, int64_t n, uint64_t seed, uint32_t threshold,
                               double scale_in, bool relu, bool hash) {
  using acc_t = typename Acc<T>::type;
  const acc_t scale = static_cast<acc_t>(scale_in);
  const int64_t pairs = (n + 1) / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < pairs; j += stride) {
    const uint64_t h = hash ? mix(seed, static_cast<uint64_t>(j)) : 0;
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 2 * j + half;
      if (i >= n) break;
      const uint32_t u = static_cast<uint32_t>(half ? (h >> 32) : h);
      acc_t factor = (!hash || u >= threshold) ? scale : acc_t(0);
      if (relu && !(convert<acc_t>(ref[i]) > acc_t(0))) factor = acc_t(0);
      out[i] = convert<T>(convert<acc_t>(x[i]) * factor);
    }
  }
}

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(work < 1 ? 1 : (work < kMaxBlocks ? work : kMaxBlocks));
}

unsigned threads_for(int64_t f) {
  const int64_t warps = (f + 31) / 32;
  return static_cast<unsigned>(warps * 32 < kMaxThreads ? warps * 32 : kMaxThreads);
}

template <typename in_t>
int aggregate_typed(const int64_t* rp, const int64_t* cl, const void* x, void* out, int64_t num_dst, int64_t f,
                    bool mean, bool widen, cudaStream_t stream) {
  using acc_t = typename Acc<in_t>::type;
  const in_t* xp = static_cast<const in_t*>(x);
  if (widen) {
    aggregate_kernel<in_t, acc_t><<<blocks_for(num_dst), threads_for(f), 0, stream>>>(
        rp, cl, xp, static_cast<acc_t*>(out), num_dst, f, mean);
  } else {
    aggregate_kernel<in_t, in_t><<<blocks_for(num_dst), threads_for(f), 0, stream>>>(
        rp, cl, xp, static_cast<in_t*>(out), num_dst, f, mean);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename in_t>
int aggregate_backward_typed(const int64_t* rp, const int64_t* cl, const void* g, void* acc, int64_t num_dst,
                             int64_t f, bool mean, cudaStream_t stream) {
  using acc_t = typename Acc<in_t>::type;
  aggregate_backward_kernel<in_t><<<blocks_for(num_dst), threads_for(f), 0, stream>>>(
      rp, cl, static_cast<const in_t*>(g), static_cast<acc_t*>(acc), num_dst, f, mean);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int dropout_typed(const void* x, const void* ref, void* out, int64_t n, uint64_t seed, uint32_t threshold,
                  double scale, bool relu, bool hash, cudaStream_t stream) {
  if (n == 0) return 0;
  dropout_kernel<T><<<blocks_for(((n + 1) / 2 + kMaxThreads - 1) / kMaxThreads), kMaxThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(ref), static_cast<T*>(out), n, seed, threshold, scale, relu,
      hash);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int csr_aggregate_cuda(const int64_t* rowptr, const int64_t* col, const void* x, void* out, int64_t num_dst,
                       int64_t f, KernelDtype dtype, bool mean, bool widen, void* stream) {
  if (num_dst == 0 || f == 0) return 0;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KernelDtype::kFloat32: return aggregate_typed<float>(rowptr, col, x, out, num_dst, f, mean, widen, st);
    case KernelDtype::kFloat64: return aggregate_typed<double>(rowptr, col, x, out, num_dst, f, mean, widen, st);
    case KernelDtype::kFloat16: return aggregate_typed<__half>(rowptr, col, x, out, num_dst, f, mean, widen, st);
    case KernelDtype::kBFloat16:
      return aggregate_typed<__nv_bfloat16>(rowptr, col, x, out, num_dst, f, mean, widen, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int csr_aggregate_backward_cuda(const int64_t* rowptr, const int64_t* col, const void* grad_out, void* acc,
                                int64_t num_dst, int64_t f, KernelDtype dtype, bool mean, void* stream) {
  if (num_dst == 0 || f == 0) return 0;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KernelDtype::kFloat32: return aggregate_backward_typed<float>(rowptr, col, grad_out, acc, num_dst, f, mean, st);
    case KernelDtype::kFloat64:
      return aggregate_backward_typed<double>(rowptr, col, grad_out, acc, num_dst, f, mean, st);
    case KernelDtype::kFloat16:
      return aggregate_backward_typed<__half>(rowptr, col, grad_out, acc, num_dst, f, mean, st);
    case KernelDtype::kBFloat16:
      return aggregate_backward_typed<__nv_bfloat16>(rowptr, col, grad_out, acc, num_dst, f, mean, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int dropout_cuda(const void* x, const void* ref, void* out, int64_t n, KernelDtype dtype, uint64_t seed,
                 uint32_t threshold, double scale, bool relu, bool hash, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KernelDtype::kFloat32: return dropout_typed<float>(x, ref, out, n, seed, threshold, scale, relu, hash, st);
    case KernelDtype::kFloat64: return dropout_typed<double>(x, ref, out, n, seed, threshold, scale, relu, hash, st);
    case KernelDtype::kFloat16: return dropout_typed<__half>(x, ref, out, n, seed, threshold, scale, relu, hash, st);
    case KernelDtype::kBFloat16:
      return dropout_typed<__nv_bfloat16>(x, ref, out, n, seed, threshold, scale, relu, hash, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace salientpp
