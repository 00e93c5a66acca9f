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
  const int64_t* blocks = ctx.offsets.data_ptr<int64_t>();
  const int64_t num_types = ctx.num_types;
  const int64_t num_blocks = ctx.offsets.size(0) - 1;  // K * T
  const int64_t rank = ctx.rank;
  const int64_t* cache_slot = ctx.cache_slot.defined() ? ctx.cache_slot.data_ptr<int64_t>() : nullptr;
  const int64_t* device_slots = ctx.device_slots.data_ptr<int64_t>();
  const bool* featured = ctx.featured.data_ptr<bool>();

  // Category of each position: a remote block b in [0, K * T), then owned rows of type t, the
  // device tier of type t, the host tier of type t, and none (a type without feature rows).
  const int64_t kOwned = num_blocks, kDevice = kOwned + num_types, kHost = kDevice + num_types;
  const int64_t kNone = kHost + num_types;
  // Per block: its node type, and its category before the cache is looked up (no division per node).
  std::vector<int64_t> block_type(num_blocks), block_category(num_blocks);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t t = b % num_types;
    block_type[b] = t;
    block_category[b] = !featured[t] ? kNone : (b / num_types == rank ? kOwned + t : b);
  }
  std::vector<int64_t> category(num_nodes);
  std::vector<int64_t> position(num_nodes);  // rank among the batch nodes of its type
  std::vector<int64_t> count(kNone + 1, 0);
  std::vector<int64_t> rows(num_types, 0);
  for (int64_t i = 0; i < num_nodes; ++i) {
    if (cache_slot != nullptr && i + kAhead < num_nodes) __builtin_prefetch(cache_slot + n_id[i + kAhead]);
    const int64_t id = n_id[i];
    const int64_t b = std::upper_bound(blocks + 1, blocks + num_blocks + 1, id) - (blocks + 1);
    const int64_t t = block_type[b];
    position[i] = rows[t]++;
    int64_t c = block_category[b];
    if (c == b && cache_slot != nullptr && cache_slot[id] >= 0) {
      c = cache_slot[id] < device_slots[t] ? kDevice + t : kHost + t;
    }
    category[i] = c;
    ++count[c];
  }

  // next[c]: the next index in the concatenated row order [owned by type, remote by block,
  // device tier by type, host tier by type].
  std::vector<int64_t> next(kNone + 1), owned_begin(num_types);
  int64_t base = 0;
  for (int64_t t = 0; t < num_types; ++t) {
    next[kOwned + t] = owned_begin[t] = base;
    base += count[kOwned + t];
  }
  const int64_t n_owned = base;
  for (int64_t b = 0; b < num_blocks; ++b) {
    next[b] = base;
    base += count[b];
  }
  const int64_t n_remote = base - n_owned;
  const int64_t device_base = base;
  for (int64_t t = 0; t < num_types; ++t) {
    next[kDevice + t] = base;
    base += count[kDevice + t];
  }
  const int64_t host_base = base;
  for (int64_t t = 0; t < num_types; ++t) {
    next[kHost + t] = base;
    base += count[kHost + t];
  }
  const int64_t n_device = host_base - device_base, n_host = base - host_base;

  // Pinned when the rows go to a GPU, so that their host-to-device copies are asynchronous.
  auto make = [&](int64_t n) { return torch::empty({n}, torch::TensorOptions(torch::kInt64).pinned_memory(ctx.pin)); };
  auto counts = [&](int64_t first, int64_t n) {
    torch::Tensor out = make(n);
    std::copy(count.begin() + first, count.begin() + first + n, out.data_ptr<int64_t>());
    return out;
  };
  RowOrigins origins;
  origins.num_rows = make(num_types);
  std::copy(rows.begin(), rows.end(), origins.num_rows.data_ptr<int64_t>());
  origins.owned_pos = make(n_owned);
  origins.owned_row = make(n_owned);
  origins.owned_counts = counts(kOwned, num_types);
  origins.remote_id = make(n_remote);
  origins.remote_pos = make(n_remote);
  origins.remote_counts = counts(0, num_blocks);
  origins.device_pos = make(n_device);
  origins.device_slot = make(n_device);
  origins.device_counts = counts(kDevice, num_types);
  origins.host_pos = make(n_host);
  origins.host_slot = make(n_host);
  origins.host_counts = counts(kHost, num_types);

  const int64_t* local_row = ctx.local_row.defined() ? ctx.local_row.data_ptr<int64_t>() : nullptr;
  const int64_t own_start = blocks[rank * num_types];
  int64_t* owned_pos = origins.owned_pos.data_ptr<int64_t>();
  int64_t* owned_row = origins.owned_row.data_ptr<int64_t>();
  int64_t* remote_id = origins.remote_id.data_ptr<int64_t>();
  int64_t* remote_pos = origins.remote_pos.data_ptr<int64_t>();
  int64_t* device_pos = origins.device_pos.data_ptr<int64_t>();
  int64_t* device_slot = origins.device_slot.data_ptr<int64_t>();
  int64_t* host_pos = origins.host_pos.data_ptr<int64_t>();
  int64_t* host_slot = origins.host_slot.data_ptr<int64_t>();
  // The owned rows each type may have: local_x[t]'s, else the type's block (the identity row map).
  std::vector<int64_t> owned_rows(num_types);
  for (int64_t t = 0; t < num_types; ++t) {
    owned_rows[t] = ctx.local_x[t].defined() ? ctx.local_x[t].size(0)
                                              : blocks[rank * num_types + t + 1] - blocks[rank * num_types + t];
  }
  auto is_owned = [&](int64_t c) { return c >= kOwned && c < kDevice; };
  for (int64_t i = 0; i < num_nodes; ++i) {
    if (local_row != nullptr && i + kAhead < num_nodes && is_owned(category[i + kAhead])) {
      __builtin_prefetch(local_row + (n_id[i + kAhead] - own_start));
    }
    const int64_t c = category[i];
    if (c == kNone) continue;
    const int64_t id = n_id[i];
    const int64_t j = next[c]++;
    const int64_t pos = position[i];
    if (c < kOwned) {
      remote_id[j - n_owned] = id;
      remote_pos[j - n_owned] = pos;
    } else if (c < kDevice) {
      const int64_t t = c - kOwned;
      const int64_t row = local_row != nullptr ? local_row[id - own_start] : id - blocks[rank * num_types + t];
      if (row < 0 || row >= owned_rows[t]) {
        throw std::invalid_argument("local_row maps id " + std::to_string(id) + " to row " + std::to_string(row) +
                                    " outside the " + std::to_string(owned_rows[t]) +
                                    " owned rows of its type; fix local_row");
      }
      owned_pos[j] = pos;
      owned_row[j] = row;
    } else if (c < kHost) {
      device_pos[j - device_base] = pos;
      device_slot[j - device_base] = cache_slot[id];
    } else {
      host_pos[j - host_base] = pos;
      host_slot[j - host_base] = cache_slot[id] - device_slots[c - kHost];
    }
  }
  // Each type with local_x[t] gets its owned rows straight at their positions in the batch's x[t],
  // which the assembly completes in place (one [num_rows[t], F_t] buffer per type and batch, each
  // owned row copied once).
  origins.x.resize(num_types);
  for (int64_t t = 0; t < num_types; ++t) {
    const torch::Tensor& src = ctx.local_x[t];
    if (!src.defined() || !featured[t]) continue;
    origins.x[t] = torch::empty({rows[t], src.size(1)}, src.options().pinned_memory(ctx.pin));
    const int64_t row_bytes = src.size(1) * src.element_size();
    RowSource owned;
    owned.low = static_cast<const char*>(src.data_ptr());
    owned.idx = owned_row + owned_begin[t];
    owned.pos = owned_pos + owned_begin[t];
    copy_source_rows(owned, row_bytes, static_cast<char*>(origins.x[t].data_ptr()), rows[t] * row_bytes, 0,
                     count[kOwned + t]);
  }
  return origins;
}

}  // namespace salientpp
