#pragma once
#include <torch/extension.h>

namespace salientpp {

// out + i * row_bytes <- src + index[i] * row_bytes for i < n, on the calling thread.
// Indices must already be checked to lie in range.
void copy_rows(const char* src, int64_t row_bytes, const int64_t* index, int64_t n, char* out);

}  // namespace salientpp
