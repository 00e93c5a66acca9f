#include "fetch.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "gather.h"

namespace salientpp {
namespace {

// Positions ahead of the loops below whose cache_slot and local_row entries are prefetched: ids
// are scattered, so each lookup would otherwise wait for main memory in turn.
constexpr int64_t kAhead = 16;

}  // namespace

RowOrigins row_origins(const FetchContext& ctx, const int64_t* n_id, int64_t num_nodes) {
  const int64_t* offsets = ctx.offsets.data_ptr<int64_t>();
  const int64_t num_parts = ctx.offsets.size(0) - 1;
  const int64_t rank = ctx.rank;
  const int64_t* cache_slot = ctx.cache_slot.defined() ? ctx.cache_slot.data_ptr<int64_t>() : nullptr;
  const int64_t num_device = ctx.num_device_slots;

  // Category of each position: an owner k in [0, K) for remote ids, then owned, device tier, host tier.
  const int64_t kOwned = num_parts, kDevice = num_parts + 1, kHost = num_parts + 2;
  std::vector<int64_t> category(num_nodes);
  std::vector<int64_t> count(num_parts + 3, 0);
  for (int64_t i = 0; i < num_nodes; ++i) {
    if (cache_slot != nullptr && i + kAhead < num_nodes) __builtin_prefetch(cache_slot + n_id[i + kAhead]);
    const int64_t id = n_id[i];
    const int64_t owner = std::upper_bound(offsets + 1, offsets + num_parts + 1, id) - (offsets + 1);
    int64_t c = owner;
    if (owner == rank) {
      c = kOwned;
    } else if (cache_slot != nullptr && cache_slot[id] >= 0) {
      c = cache_slot[id] < num_device ? kDevice : kHost;
    }
    category[i] = c;
    ++count[c];
  }

  const int64_t n_owned = count[kOwned], n_device = count[kDevice], n_host = count[kHost];
  const int64_t n_remote = num_nodes - n_owned - n_device - n_host;
  // next[c]: the next index in the concatenated row order [owned, remote by owner, device tier, host tier].
  std::vector<int64_t> next(num_parts + 3);
  next[kOwned] = 0;
  int64_t base = n_owned;
  for (int64_t k = 0; k < num_parts; ++k) {
    next[k] = base;
    base += count[k];
  }
  next[kDevice] = base;
  next[kHost] = base + n_device;

  // Pinned when the rows go to a GPU, so that their host-to-device copies are asynchronous.
  auto make = [&](int64_t n) { return torch::empty({n}, torch::TensorOptions(torch::kInt64).pinned_memory(ctx.pin)); };
  RowOrigins origins;
  origins.owned_pos = make(n_owned);
  origins.owned_row = make(n_owned);
  origins.remote_id = make(n_remote);
  origins.remote_pos = make(n_remote);
  origins.remote_counts = make(num_parts);
  origins.device_pos = make(n_device);
  origins.device_slot = make(n_device);
  origins.host_pos = make(n_host);
  origins.host_slot = make(n_host);
  std::copy(count.begin(), count.begin() + num_parts, origins.remote_counts.data_ptr<int64_t>());

  const int64_t* local_row = ctx.local_row.defined() ? ctx.local_row.data_ptr<int64_t>() : nullptr;
  const int64_t num_owned = offsets[rank + 1] - offsets[rank];
  const int64_t num_rows = ctx.local_x.defined() ? ctx.local_x.size(0) : num_owned;
  int64_t* owned_pos = origins.owned_pos.data_ptr<int64_t>();
  int64_t* owned_row = origins.owned_row.data_ptr<int64_t>();
  int64_t* remote_id = origins.remote_id.data_ptr<int64_t>();
  int64_t* remote_pos = origins.remote_pos.data_ptr<int64_t>();
  int64_t* device_pos = origins.device_pos.data_ptr<int64_t>();
  int64_t* device_slot = origins.device_slot.data_ptr<int64_t>();
  int64_t* host_pos = origins.host_pos.data_ptr<int64_t>();
  int64_t* host_slot = origins.host_slot.data_ptr<int64_t>();
  // With local_x, the owned rows go straight to their positions in the batch's x, which the
  // assembly completes in place (one [num_nodes, F] buffer per batch, each owned row copied once).
  char* x_out = nullptr;
  const char* x_src = nullptr;
  int64_t row_bytes = 0;
  if (ctx.local_x.defined()) {
    const torch::Tensor& x = ctx.local_x;
    origins.x = torch::empty({num_nodes, x.size(1)}, x.options().pinned_memory(ctx.pin));
    row_bytes = x.size(1) * x.element_size();
    x_out = static_cast<char*>(origins.x.data_ptr());
    x_src = static_cast<const char*>(x.data_ptr());
  }
  const int64_t device_base = next[kDevice], host_base = next[kHost];
  for (int64_t i = 0; i < num_nodes; ++i) {
    if (local_row != nullptr && i + kAhead < num_nodes && category[i + kAhead] == kOwned) {
      __builtin_prefetch(local_row + (n_id[i + kAhead] - offsets[rank]));
    }
    const int64_t id = n_id[i];
    const int64_t c = category[i];
    const int64_t j = next[c]++;
    if (c == kOwned) {
      const int64_t local = id - offsets[rank];
      const int64_t row = local_row != nullptr ? local_row[local] : local;
      if (row < 0 || row >= num_rows) {
        throw std::invalid_argument("local_row maps id " + std::to_string(id) + " to row " + std::to_string(row) +
                                    " outside local_x's " + std::to_string(num_rows) + " rows; fix local_row");
      }
      owned_pos[j] = i;
      owned_row[j] = row;
    } else if (c == kDevice) {
      device_pos[j - device_base] = i;
      device_slot[j - device_base] = cache_slot[id];
    } else if (c == kHost) {
      host_pos[j - host_base] = i;
      host_slot[j - host_base] = cache_slot[id] - num_device;
    } else {
      remote_id[j - n_owned] = id;
      remote_pos[j - n_owned] = i;
    }
  }
  if (x_out != nullptr) {
    RowSource owned;
    owned.low = x_src;
    owned.idx = owned_row;
    owned.pos = owned_pos;
    copy_source_rows(owned, row_bytes, x_out, num_nodes * row_bytes, 0, n_owned);
  }
  return origins;
}

}  // namespace salientpp
