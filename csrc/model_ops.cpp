#include "model_ops.h"

#include "gather.h"
#include "model_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace salientpp {

namespace {

// Rows per parallel task of the aggregation, and elements per task of the dropout.
constexpr int64_t kRowGrain = 64;
constexpr int64_t kElementGrain = 1 << 15;
// Columns per task of the aggregation's gradient: narrower slices would share cache lines.
constexpr int64_t kColumnGrain = 16;

// The hot loops are compiled for AVX-512 and AVX2 besides the baseline, and the best one this CPU
// runs is picked at load time (GCC function multi-versioning), so the extension stays portable.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SALIENTPP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SALIENTPP_CLONES
#endif

void check_csr(const torch::Tensor& rowptr, const torch::Tensor& col, int64_t num_src) {
  TORCH_CHECK(rowptr.device().is_cpu() && col.device().is_cpu(), "rowptr and col must be CPU tensors");
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.scalar_type() == torch::kInt64 && rowptr.is_contiguous() &&
                  rowptr.size(0) >= 1,
              "rowptr must be a contiguous 1-D int64 tensor with num_dst + 1 >= 1 entries");
  TORCH_CHECK(col.dim() == 1 && col.scalar_type() == torch::kInt64 && col.is_contiguous(),
              "col must be a contiguous 1-D int64 tensor");
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  const int64_t num_dst = rowptr.size(0) - 1;
  TORCH_CHECK(rp[0] == 0 && rp[num_dst] == col.size(0), "rowptr must start at 0 and end at len(col)");
  for (int64_t d = 0; d < num_dst; ++d) TORCH_CHECK(rp[d] <= rp[d + 1], "rowptr must be non-decreasing");
  if (col.numel() > 0) {
    const auto [lo, hi] = torch::aminmax(col);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < num_src, "col must lie in [0, ", num_src, ")");
  }
}

// SplitMix64's output function of (seed, counter): a counter-based generator (each value is a
// function of its index alone), so any element range can be drawn by any thread.
inline uint64_t mix(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Element i's 32-bit uniform: the low half of mix(seed, i / 2) for even i, the high half for odd.
inline uint32_t uniform32(uint64_t seed, int64_t i) {
  const uint64_t h = mix(seed, static_cast<uint64_t>(i) >> 1);
  return static_cast<uint32_t>((i & 1) ? (h >> 32) : h);
}

uint32_t threshold_of(double p) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "the dropout probability must lie in [0, 1), got ", p);
  return static_cast<uint32_t>(std::min(4294967295.0, std::round(p * 4294967296.0)));
}

// out[i] = f(x[i]) * factor_i for i in [begin, end): factor_i = `scale` when element i is kept
// (its uniform >= threshold; every element without kHash), times [ref[i] > 0] with kRelu. Two
// elements per hash. The forward passes ref = x (ReLU); the backward passes ref = out, which is
// > 0 exactly where the forward kept a positive x, so it needs no hashing.
template <typename scalar_t, bool kRelu, bool kHash>
SALIENTPP_CLONES void dropout_range(const scalar_t* __restrict__ x, const scalar_t* __restrict__ ref,
                                    scalar_t* __restrict__ out, int64_t begin, int64_t end, uint64_t seed,
                                    uint32_t threshold, at::opmath_type<scalar_t> scale) {
  using acc_t = at::opmath_type<scalar_t>;  // float for the 16-bit types, else the type itself
  auto put = [&](int64_t i, uint32_t u) {
    acc_t f = (!kHash || u >= threshold) ? scale : acc_t(0);
    if (kRelu) f = static_cast<acc_t>(ref[i]) > acc_t(0) ? f : acc_t(0);
    out[i] = static_cast<scalar_t>(static_cast<acc_t>(x[i]) * f);
  };
  int64_t i = begin;
  if (!kHash) {
    for (; i < end; ++i) put(i, 0);
    return;
  }
  if (i < end && (i & 1)) {
    put(i, uniform32(seed, i));
    ++i;
  }
  const int64_t pairs = (end - i) / 2, first_pair = i >> 1;
  for (int64_t j = 0; j < pairs; ++j) {
    const uint64_t h = mix(seed, static_cast<uint64_t>(first_pair + j));
    put(i + 2 * j, static_cast<uint32_t>(h));
    put(i + 2 * j + 1, static_cast<uint32_t>(h >> 32));
  }
  i += 2 * pairs;
  if (i < end) put(i, uniform32(seed, i));
}

// dropout_range with its flags chosen at run time.
template <typename scalar_t>
void dropout_dispatch(const scalar_t* x, const scalar_t* ref, scalar_t* out, int64_t n, uint64_t seed,
                      uint32_t threshold, at::opmath_type<scalar_t> scale, bool relu, bool hash) {
  at::parallel_for(0, n, kElementGrain, [&](int64_t begin, int64_t end) {
    if (relu && hash) dropout_range<scalar_t, true, true>(x, ref, out, begin, end, seed, threshold, scale);
    if (relu && !hash) dropout_range<scalar_t, true, false>(x, ref, out, begin, end, seed, threshold, scale);
    if (!relu && hash) dropout_range<scalar_t, false, true>(x, ref, out, begin, end, seed, threshold, scale);
    if (!relu && !hash) dropout_range<scalar_t, false, false>(x, ref, out, begin, end, seed, threshold, scale);
  });
}

// out[d] = s_d * sum of x[col[e]] for destinations d in [begin, end), written as out_t.
template <typename scalar_t, typename acc_t, typename out_t>
SALIENTPP_CLONES void aggregate_rows(const int64_t* rp, const int64_t* cl, const scalar_t* x, out_t* out, int64_t f,
                                     int64_t begin, int64_t end, bool mean, acc_t* acc) {
  for (int64_t d = begin; d < end; ++d) {
    for (int64_t c = 0; c < f; ++c) acc[c] = acc_t(0);
    for (int64_t e = rp[d]; e < rp[d + 1]; ++e) {
      const scalar_t* row = x + cl[e] * f;
      for (int64_t c = 0; c < f; ++c) acc[c] += static_cast<acc_t>(row[c]);
    }
    const int64_t deg = rp[d + 1] - rp[d];
    const acc_t s = (mean && deg > 0) ? acc_t(1) / static_cast<acc_t>(deg) : acc_t(1);
    out_t* o = out + d * f;
    for (int64_t c = 0; c < f; ++c) o[c] = static_cast<out_t>(acc[c] * s);
  }
}

// acc[col[e], c0:c1] += s_d * g[d, c0:c1] over every edge, in edge order.
template <typename scalar_t, typename acc_t>
SALIENTPP_CLONES void aggregate_grad_columns(const int64_t* rp, const int64_t* cl, const scalar_t* g, acc_t* acc,
                                             int64_t f, int64_t num_dst, int64_t c0, int64_t c1, bool mean) {
  for (int64_t d = 0; d < num_dst; ++d) {
    const int64_t deg = rp[d + 1] - rp[d];
    if (deg == 0) continue;
    const acc_t s = mean ? acc_t(1) / static_cast<acc_t>(deg) : acc_t(1);
    const scalar_t* gd = g + d * f;
    for (int64_t e = rp[d]; e < rp[d + 1]; ++e) {
      acc_t* a = acc + cl[e] * f;
      for (int64_t c = c0; c < c1; ++c) a[c] += static_cast<acc_t>(gd[c]) * s;
    }
  }
}

// ---- the CUDA twins (model_kernels.cu) ----------------------------------------------------------

KernelDtype kernel_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return KernelDtype::kFloat32;
    case at::kDouble: return KernelDtype::kFloat64;
    case at::kHalf: return KernelDtype::kFloat16;
    case at::kBFloat16: return KernelDtype::kBFloat16;
    default: TORCH_CHECK(false, "the CUDA kernels take float32, float64, float16 or bfloat16 tensors, got ", type);
  }
}

// The CSR of a CUDA launch: int64, contiguous, on `device`. Its contents are not read (that would
// wait for the device); the CPU kernels check them, and the tests compare the two.
void check_device_csr(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Device& device) {
  TORCH_CHECK(rowptr.device() == device && col.device() == device, "rowptr and col must be on ", device);
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.scalar_type() == torch::kInt64 && rowptr.is_contiguous() &&
                  rowptr.size(0) >= 1,
              "rowptr must be a contiguous 1-D int64 tensor with num_dst + 1 >= 1 entries");
  TORCH_CHECK(col.dim() == 1 && col.scalar_type() == torch::kInt64 && col.is_contiguous(),
              "col must be a contiguous 1-D int64 tensor");
}

void check_launch(int error, const char* what) {
  TORCH_CHECK(error == 0, "the CUDA ", what, " failed: ", cuda_error_name(error));
}

torch::Tensor csr_aggregate_on_device(const torch::Tensor& rowptr, const torch::Tensor& col,
                                      const torch::Tensor& x_in, bool mean, bool widen, int64_t stream) {
  TORCH_CHECK(x_in.dim() == 2, "x must be a 2-D tensor");
  check_device_csr(rowptr, col, x_in.device());
  const torch::Tensor x = x_in.contiguous();
  const int64_t num_dst = rowptr.size(0) - 1, f = x.size(1);
  const auto out_dtype = widen ? at::toOpMathType(x.scalar_type()) : x.scalar_type();
  torch::Tensor out = torch::empty({num_dst, f}, x.options().dtype(out_dtype));
  check_launch(csr_aggregate_cuda(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), x.data_ptr(), out.data_ptr(),
                                  num_dst, f, kernel_dtype(x.scalar_type()), mean, widen,
                                  reinterpret_cast<void*>(stream)),
               "aggregation");
  return out;
}

torch::Tensor csr_aggregate_backward_on_device(const torch::Tensor& rowptr, const torch::Tensor& col,
                                               const torch::Tensor& grad_in, int64_t num_src, bool mean,
                                               int64_t stream) {
  TORCH_CHECK(grad_in.dim() == 2 && grad_in.size(0) == rowptr.size(0) - 1, "grad_out must be [num_dst, F]");
  check_device_csr(rowptr, col, grad_in.device());
  const torch::Tensor grad_out = grad_in.contiguous();
  const auto acc_dtype = at::toOpMathType(grad_out.scalar_type());
  torch::Tensor acc = torch::zeros({num_src, grad_out.size(1)}, grad_out.options().dtype(acc_dtype));
  check_launch(csr_aggregate_backward_cuda(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), grad_out.data_ptr(),
                                           acc.data_ptr(), grad_out.size(0), grad_out.size(1),
                                           kernel_dtype(grad_out.scalar_type()), mean, reinterpret_cast<void*>(stream)),
               "aggregation gradient");
  return acc.scalar_type() == grad_out.scalar_type() ? acc : acc.to(grad_out.scalar_type());
}

}  // namespace

// Without CUDA (torch without it built the extension) the launches fail with cuda_error_name's
// "this build of the extension has no CUDA kernels".
#ifndef SALIENTPP_WITH_CUDA
int csr_aggregate_cuda(const int64_t*, const int64_t*, const void*, void*, int64_t, int64_t, KernelDtype, bool, bool,
                       void*) {
  return -1;
}
int csr_aggregate_backward_cuda(const int64_t*, const int64_t*, const void*, void*, int64_t, int64_t, KernelDtype,
                                bool, void*) {
  return -1;
}
int dropout_cuda(const void*, const void*, void*, int64_t, KernelDtype, uint64_t, uint32_t, double, bool, bool,
                 void*) {
  return -1;
}
#endif

torch::Tensor csr_aggregate(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& x_in,
                            bool mean, bool widen, int64_t stream) {
  if (x_in.is_cuda()) return csr_aggregate_on_device(rowptr, col, x_in, mean, widen, stream);
  TORCH_CHECK(x_in.device().is_cpu() && x_in.dim() == 2, "x must be a 2-D CPU or CUDA tensor");
  check_csr(rowptr, col, x_in.size(0));
  const torch::Tensor x = x_in.contiguous();
  const int64_t num_dst = rowptr.size(0) - 1, f = x.size(1);
  const auto out_dtype = widen ? at::toOpMathType(x.scalar_type()) : x.scalar_type();
  torch::Tensor out = torch::empty({num_dst, f}, x.options().dtype(out_dtype));
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  const int64_t* cl = col.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "csr_aggregate", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    at::parallel_for(0, num_dst, kRowGrain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(f);
      if (widen) {
        aggregate_rows<scalar_t, acc_t, acc_t>(rp, cl, xp, out.data_ptr<acc_t>(), f, begin, end, mean, acc.data());
      } else {
        aggregate_rows<scalar_t, acc_t, scalar_t>(rp, cl, xp, out.data_ptr<scalar_t>(), f, begin, end, mean,
                                                  acc.data());
      }
    });
  });
  return out;
}

torch::Tensor csr_aggregate_backward(const torch::Tensor& rowptr, const torch::Tensor& col,
                                     const torch::Tensor& grad_in, int64_t num_src, bool mean, int64_t stream) {
  if (grad_in.is_cuda()) return csr_aggregate_backward_on_device(rowptr, col, grad_in, num_src, mean, stream);
  TORCH_CHECK(grad_in.device().is_cpu() && grad_in.dim() == 2, "grad_out must be a 2-D CPU or CUDA tensor");
  TORCH_CHECK(grad_in.size(0) == rowptr.size(0) - 1, "grad_out must have num_dst rows");
  check_csr(rowptr, col, num_src);
  const torch::Tensor grad_out = grad_in.contiguous();
  const int64_t num_dst = rowptr.size(0) - 1, f = grad_out.size(1);
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  const int64_t* cl = col.data_ptr<int64_t>();
  // Sums are kept in the accumulation type and cast once at the end.
  const auto acc_dtype = at::toOpMathType(grad_out.scalar_type());
  torch::Tensor acc = torch::zeros({num_src, f}, grad_out.options().dtype(acc_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, grad_out.scalar_type(), "csr_aggregate_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gp = grad_out.data_ptr<scalar_t>();
    acc_t* ap = acc.data_ptr<acc_t>();
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), f / kColumnGrain));
    at::parallel_for(0, tasks, 1, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        aggregate_grad_columns<scalar_t, acc_t>(rp, cl, gp, ap, f, num_dst, f * t / tasks, f * (t + 1) / tasks, mean);
      }
    });
  });
  return acc.scalar_type() == grad_out.scalar_type() ? acc : acc.to(grad_out.scalar_type());
}

torch::Tensor dropout_forward(const torch::Tensor& x_in, double p, uint64_t seed, bool relu, int64_t stream) {
  TORCH_CHECK(x_in.device().is_cpu() || x_in.is_cuda(), "x must be a CPU or CUDA tensor");
  const uint32_t threshold = threshold_of(p);
  const torch::Tensor x = x_in.contiguous();
  torch::Tensor out = torch::empty_like(x);
  if (x.is_cuda()) {
    check_launch(dropout_cuda(x.data_ptr(), x.data_ptr(), out.data_ptr(), x.numel(), kernel_dtype(x.scalar_type()),
                              seed, threshold, 1.0 / (1.0 - p), relu, threshold > 0, reinterpret_cast<void*>(stream)),
                 "dropout");
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "dropout_forward", [&] {
    const auto scale = static_cast<at::opmath_type<scalar_t>>(1.0 / (1.0 - p));
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    dropout_dispatch<scalar_t>(xp, xp, op, x.numel(), seed, threshold, scale, relu, threshold > 0);
  });
  return out;
}

torch::Tensor dropout_backward(const torch::Tensor& grad_in, const torch::Tensor& out_in, double p, uint64_t seed,
                               bool relu, int64_t stream) {
  TORCH_CHECK(grad_in.device().is_cpu() || grad_in.is_cuda(), "grad_out must be a CPU or CUDA tensor");
  TORCH_CHECK(!relu || out_in.sizes() == grad_in.sizes(), "out must have grad_out's shape");
  const uint32_t threshold = threshold_of(p);
  const torch::Tensor grad_out = grad_in.contiguous();
  const torch::Tensor out = relu ? out_in.contiguous().to(grad_out.scalar_type()) : grad_out;
  torch::Tensor grad_x = torch::empty_like(grad_out);
  if (grad_out.is_cuda()) {
    check_launch(dropout_cuda(grad_out.data_ptr(), out.data_ptr(), grad_x.data_ptr(), grad_out.numel(),
                              kernel_dtype(grad_out.scalar_type()), seed, threshold, 1.0 / (1.0 - p), relu,
                              !relu && threshold > 0, reinterpret_cast<void*>(stream)),
                 "dropout gradient");
    return grad_x;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, grad_out.scalar_type(), "dropout_backward", [&] {
    const auto scale = static_cast<at::opmath_type<scalar_t>>(1.0 / (1.0 - p));
    const scalar_t* gp = grad_out.data_ptr<scalar_t>();
    const scalar_t* op = out.data_ptr<scalar_t>();
    scalar_t* rp = grad_x.data_ptr<scalar_t>();
    dropout_dispatch<scalar_t>(gp, op, rp, grad_out.numel(), seed, threshold, scale, relu, !relu && threshold > 0);
  });
  return grad_x;
}

torch::Tensor dropout_mask(at::IntArrayRef shape, double p, uint64_t seed) {
  const uint32_t threshold = threshold_of(p);
  torch::Tensor mask = torch::empty(shape, torch::kBool);
  bool* mp = mask.data_ptr<bool>();
  at::parallel_for(0, mask.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) mp[i] = uniform32(seed, i) >= threshold;
  });
  return mask;
}

torch::Tensor keyed_dropout_mask(const torch::Tensor& ids_in, int64_t width, double p, uint64_t seed) {
  TORCH_CHECK(ids_in.device().is_cpu() && ids_in.dim() == 1 && ids_in.scalar_type() == torch::kInt64,
              "ids must be a 1-D int64 CPU tensor");
  TORCH_CHECK(width >= 0, "width must be non-negative, got ", width);
  const uint32_t threshold = threshold_of(p);
  const torch::Tensor ids = ids_in.contiguous();
  const int64_t n = ids.size(0);
  torch::Tensor mask = torch::empty({n, width}, torch::kBool);
  const int64_t* ip = ids.data_ptr<int64_t>();
  bool* mp = mask.data_ptr<bool>();
  at::parallel_for(0, n, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(width, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const int64_t key = ip[r] * width;
                       for (int64_t c = 0; c < width; ++c) mp[r * width + c] = uniform32(seed, key + c) >= threshold;
                     }
                   });
  return mask;
}

}  // namespace salientpp
