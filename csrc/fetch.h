// Where each feature row of a sampled batch comes from in the distributed trainer.
#pragma once
#include <torch/extension.h>

#include <cstdint>
#include <vector>

namespace salientpp {

// A homogeneous graph is the one-type case (T = 1): offsets are then the partition book's K + 1
// offsets, and every per-type tensor has one entry.
struct FetchContext {
  torch::Tensor offsets;     // int64 [K * T + 1] blocks: partition k's nodes of type t are [offsets[k*T+t], offsets[k*T+t+1])
  int64_t num_types = 1;     // T
  int64_t rank = 0;          // the partition this process owns
  torch::Tensor cache_slot;  // int64 [N]: -1 not cached, s in [0, G_t) row s of its type's device tier,
                             // G_t + j row j of its type's host tier; may be undefined (no cache)
  torch::Tensor device_slots;  // int64 [T]: G_t, the rows of each type's device tier
  torch::Tensor featured;    // bool [T]: the types with feature rows; the ids of the others get no origin
  std::vector<torch::Tensor> local_x;  // [T]: type t's owned feature rows [n_t, F_t] (CPU, contiguous); undefined
                                       // for a type without features or without slicing
  torch::Tensor local_row;   // int64 [n_rank]: row of local index id - offsets[rank*T] among its type's owned rows
                             // (local_x[t]'s); may be undefined (its index within its block)
  bool pin = false;          // allocate the outputs in pinned memory
};

// Positions index the rows of each type in the batch: a node's position is its rank among the
// batch nodes of its type, in n_id order (with one type, its index in n_id). The features of type
// t are x_t[owned_pos] = owned rows[owned_row], x_t[remote_pos] = the rows received for remote_id,
// x_t[device_pos] = device tier[device_slot] and x_t[host_pos] = host tier[host_slot], each array
// grouped by type (its *_counts [T] say how many of each type), remote ones by (owner, type) block.
struct RowOrigins {
  torch::Tensor num_rows;              // int64 [T]: the batch nodes of each type
  torch::Tensor owned_pos, owned_row;  // int64 [n_o]: positions owned by rank, their rows among the type's owned rows
  torch::Tensor owned_counts;          // int64 [T]
  std::vector<torch::Tensor> x;        // [T]: x[t] [num_rows[t], F_t] with type t's owned_pos rows written, the rest
                                       // not yet; undefined where the context has no local_x[t]
  torch::Tensor remote_id, remote_pos; // int64 [n_r]: ids to request, grouped by block (n_id order within)
  torch::Tensor remote_counts;         // int64 [K * T]: number of remote ids per block (0 at rank's blocks)
  torch::Tensor device_pos, device_slot;  // int64 [n_g]: positions cached in the device tier, row in the type's tier
  torch::Tensor device_counts;         // int64 [T]
  torch::Tensor host_pos, host_slot;   // int64 [n_c]: positions cached in the host tier, row in the type's tier
  torch::Tensor host_counts;           // int64 [T]
};

// Splits n_id (int64 [num_nodes]) by type, owner and cache tier and writes each type's owned rows into x[t]
// where the context has its local_x[t].
RowOrigins row_origins(const FetchContext& ctx, const int64_t* n_id, int64_t num_nodes);

}  // namespace salientpp
