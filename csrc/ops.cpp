#include "ops.h"

#include <ATen/Parallel.h>

#include <cstring>

namespace salientpp {

void copy_rows(const char* src, int64_t row_bytes, const int64_t* index, int64_t n, char* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * row_bytes, src + index[i] * row_bytes, row_bytes);
  }
}

torch::Tensor gather_rows(const torch::Tensor& src, const torch::Tensor& index,
                          std::optional<torch::Tensor> out) {
  TORCH_CHECK(src.dim() == 2 && src.is_contiguous() && src.device().is_cpu(),
              "gather_rows: src must be a contiguous 2-D CPU tensor");
  TORCH_CHECK(index.dim() == 1 && index.scalar_type() == torch::kInt64 && index.is_contiguous(),
              "gather_rows: index must be a contiguous 1-D int64 tensor");
  const int64_t n = index.size(0);
  const int64_t rows = src.size(0);
  torch::Tensor result = out.has_value() ? *out : torch::empty({n, src.size(1)}, src.options());
  TORCH_CHECK(result.dim() == 2 && result.size(0) >= n && result.size(1) == src.size(1) &&
                  result.scalar_type() == src.scalar_type() && result.is_contiguous(),
              "gather_rows: out must be a contiguous [>= n, F] tensor of src's dtype");
  const int64_t row_bytes = src.size(1) * src.element_size();
  const char* src_ptr = static_cast<const char*>(src.data_ptr());
  char* out_ptr = static_cast<char*>(result.data_ptr());
  const int64_t* idx = index.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(idx[i] >= 0 && idx[i] < rows, "gather_rows: index ", idx[i], " out of range [0, ", rows, ")");
  }
  at::parallel_for(0, n, 1024, [&](int64_t begin, int64_t end) {
    copy_rows(src_ptr, row_bytes, idx + begin, end - begin, out_ptr + begin * row_bytes);
  });
  return out.has_value() ? result.narrow(0, 0, n) : result;
}

}  // namespace salientpp
