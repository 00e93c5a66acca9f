// Node-wise neighbour sampling that builds one message-flow graph per hop.
#pragma once
#include <torch/extension.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "fetch.h"
#include "id_map.h"
#include "rng.h"

namespace salientpp {

// The sampled edges of one hop: destinations are the first `num_dst` batch nodes, sources the
// first `num_src` (destinations are a prefix of the sources).
struct Layer {
  int64_t num_src = 0;
  int64_t num_dst = 0;
  torch::Tensor rowptr;      // int64 [num_dst + 1]: edges of destination d are rowptr[d]..rowptr[d+1]
  torch::Tensor edge_index;  // int64 [2, E]: row 0 source local index, row 1 destination local index
  torch::Tensor edge_type;   // int64 [E]: the relation of each edge; undefined for an untyped sampler
};

struct Batch {
  torch::Tensor n_id;               // int64 [num_nodes]; the first entries are the seeds, in order
  std::vector<Layer> hops;          // hops[0] expands the seeds (fanouts[0]), hops[L-1] is the last hop
  torch::Tensor y;                  // int64 [num_seeds], undefined without labels
  std::optional<RowOrigins> origins;   // set when the batch is sampled with a fetch context
};

// Labels gathered for the seeds: y[i] = values[seeds[i] - offset].
struct Labels {
  torch::Tensor values;  // int64 [M] or undefined
  int64_t offset = 0;
};

// Graphs with at most this many vertices map ids with a DenseIdMap (8 bytes per vertex per
// workspace: 134 MB at the limit), larger ones with the hash map. On `products` (2.4 M
// vertices) the direct table is smaller than the hash map a batch needs, and the sampler faster.
constexpr int64_t kDenseIdMapMaxNodes = int64_t{1} << 24;

// Per-thread scratch reused across batches. Its vectors (and a hash map) follow the largest batch
// seen; a dense map is 8 bytes per graph vertex.
struct Workspace {
  explicit Workspace(int64_t num_nodes)
      : map(num_nodes <= kDenseIdMapMaxNodes ? std::variant<IdMap, DenseIdMap>(DenseIdMap(num_nodes))
                                             : std::variant<IdMap, DenseIdMap>(IdMap())) {}
  std::variant<IdMap, DenseIdMap> map;
  std::vector<int64_t> n_id;
  std::vector<int64_t> src;
  std::vector<int64_t> picks;
  std::vector<int64_t> drawn;  // positions in col picked for the destinations of one chunk, then the ids there
  std::vector<int64_t> types;  // a typed sampler's relation of each edge of the hop (as src)
  int64_t peak_nodes = 0;
};

// Workspaces kept between batches, epochs and sample() calls, so a worker does not start
// with an empty id map. Holds at most as many as were ever in use at once.
class WorkspacePool {
 public:
  explicit WorkspacePool(int64_t num_nodes) : num_nodes_(num_nodes) {}

  std::unique_ptr<Workspace> acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) return std::make_unique<Workspace>(num_nodes_);
    std::unique_ptr<Workspace> ws = std::move(free_.back());
    free_.pop_back();
    return ws;
  }
  void release(std::unique_ptr<Workspace> ws) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(ws));
  }

 private:
  int64_t num_nodes_;  // of the graph, which picks each workspace's id map
  std::mutex mutex_;
  std::vector<std::unique_ptr<Workspace>> free_;
};

class Sampler {
 public:
  // rowptr int64 [N + 1], col int64 [nnz]: CSR of a symmetric graph. fanouts int64 [L, R]: row h
  // holds hop h's fanout of each relation, >= 1 or -1 (all), or 0 (none) for a typed sampler.
  // Untyped (no edge_rel): R = 1, and hop h draws fanouts[h][0] of each destination's
  // neighbours. Typed: edge_rel int8 [nnz] holds the relation (in [0, R)) of each CSR entry, the
  // entries of a row grouped by relation ascending (build_typed_csr), and hop h draws, for each
  // relation r in order, fanouts[h][r] of the destination's entries of relation r.
  Sampler(torch::Tensor rowptr, torch::Tensor col, std::optional<torch::Tensor> edge_rel, torch::Tensor fanouts,
          bool replace);

  // Samples the MFGs of one batch of distinct seeds with the random stream (seed, batch_index),
  // then gathers labels and finds the row origins when asked. Thread-safe (const).
  Batch sample(const int64_t* seeds, int64_t num_seeds, uint64_t seed, uint64_t batch_index,
               const Labels& labels, const std::optional<FetchContext>& fetch, Workspace& ws) const;

  int64_t num_nodes() const { return num_nodes_; }
  int64_t num_layers() const { return num_layers_; }
  int64_t num_relations() const { return num_relations_; }
  bool typed() const { return edge_rel_ != nullptr; }

  // A workspace from this sampler's pool, returned to it when the lease ends.
  class Lease {
   public:
    explicit Lease(const Sampler& s) : pool_(*s.pool_), ws_(pool_.acquire()) {}
    ~Lease() { pool_.release(std::move(ws_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace& get() { return *ws_; }

   private:
    WorkspacePool& pool_;
    std::unique_ptr<Workspace> ws_;
  };

 private:
  // One hop from the first num_dst nodes of ws.n_id; fanout points at the hop's R fanouts.
  // Typed = false is the untyped sampler (fanout[0] of every row); Typed = true draws per relation.
  template <bool Typed, typename Map>
  Layer expand(Map& map, int64_t num_dst, const int64_t* fanout, Rng& rng, Workspace& ws,
               const torch::TensorOptions& options) const;

  torch::Tensor rowptr_t_, col_t_, edge_rel_t_;  // keep the (possibly memory-mapped) arrays alive
  const int64_t* rowptr_;
  const int64_t* col_;
  const int8_t* edge_rel_ = nullptr;  // null for an untyped sampler
  int64_t num_nodes_;
  int64_t num_edges_;
  int64_t num_layers_;
  int64_t num_relations_;
  std::vector<int64_t> fanouts_;  // [L * R], row-major
  bool replace_;
  std::unique_ptr<WorkspacePool> pool_;
};

}  // namespace salientpp
