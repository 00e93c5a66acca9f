// Where each feature row of a sampled batch comes from in the distributed trainer.
#pragma once
#include <torch/extension.h>

#include <cstdint>

namespace salientpp {

struct FetchContext {
  torch::Tensor offsets;     // int64 [K + 1] partition book: partition k owns [offsets[k], offsets[k+1])
  int64_t rank = 0;          // the partition this process owns
  torch::Tensor cache_slot;  // int64 [N]: -1 not cached, [0, G) device tier slot, G + j host tier slot j; may be undefined
  int64_t num_device_slots = 0;  // G
  torch::Tensor local_x;     // [n_rank, F] owned feature rows (CPU); may be undefined (no slicing)
  torch::Tensor local_row;   // int64 [n_rank]: storage row in local_x of local index id - offsets[rank]; may be undefined (identity)
  bool pin = false;          // allocate x in pinned memory
};

// Positions index the batch's n_id: its features are x[owned_pos] = local_x[owned_row],
// x[remote_pos] = the rows received for remote_id, x[device_pos] = device tier[device_slot] and
// x[host_pos] = host tier[host_slot].
struct RowOrigins {
  torch::Tensor owned_pos, owned_row;  // int64 [n_o]: positions owned by rank, their rows in local_x
  torch::Tensor x;                     // [num_nodes, F]: rows owned_pos written, the rest not yet (undefined without local_x)
  torch::Tensor remote_id, remote_pos; // int64 [n_r]: ids to request, grouped by owner (n_id order within)
  torch::Tensor remote_counts;         // int64 [K]: number of remote ids per owner (0 at rank)
  torch::Tensor device_pos, device_slot;     // int64 [n_g]: positions cached in the device tier, slot in that tier
  torch::Tensor host_pos, host_slot;     // int64 [n_c]: positions cached in the host tier, slot in that tier
};

// Splits n_id (int64 [num_nodes]) by owner and cache tier and writes the owned rows into x.
RowOrigins row_origins(const FetchContext& ctx, const int64_t* n_id, int64_t num_nodes);

}  // namespace salientpp
