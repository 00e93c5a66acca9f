#include "ops.h"

#include <cstring>

namespace salientpp {

void copy_rows(const char* src, int64_t row_bytes, const int64_t* index, int64_t n, char* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * row_bytes, src + index[i] * row_bytes, row_bytes);
  }
}

}  // namespace salientpp
