#include "sampler.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace salientpp {
namespace {

// Up to this fanout Floyd's algorithm checks membership by a linear scan of the picks; above it
// a partial Fisher-Yates shuffle of the neighbour positions avoids the quadratic scan.
constexpr int64_t kFloydMaxFanout = 64;

// Destinations per chunk of the prefetching loop in Sampler::expand.
constexpr int64_t kChunk = 32;

const int64_t* int64_data(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.scalar_type() == torch::kInt64 && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous 1-D int64 CPU tensor");
  return t.data_ptr<int64_t>();
}

std::invalid_argument not_grouped(int64_t v) {
  return std::invalid_argument("edge_rel is not grouped by relation in the row of node " + std::to_string(v) +
                               "; the typed CSR is corrupt");
}

}  // namespace

Sampler::Sampler(torch::Tensor rowptr, torch::Tensor col, std::optional<torch::Tensor> edge_rel,
                 torch::Tensor fanouts, bool replace)
    : rowptr_t_(std::move(rowptr)), col_t_(std::move(col)), replace_(replace) {
  rowptr_ = int64_data(rowptr_t_, "rowptr");
  col_ = int64_data(col_t_, "col");
  TORCH_CHECK(rowptr_t_.size(0) >= 2, "rowptr must have N + 1 >= 2 entries");
  num_nodes_ = rowptr_t_.size(0) - 1;
  num_edges_ = col_t_.size(0);
  TORCH_CHECK(fanouts.dim() == 2 && fanouts.scalar_type() == torch::kInt64 && fanouts.device().is_cpu(),
              "fanouts must be a 2-D int64 CPU tensor [L, R]");
  num_layers_ = fanouts.size(0);
  num_relations_ = fanouts.size(1);
  TORCH_CHECK(num_layers_ >= 1, "fanouts must not be empty");
  if (edge_rel.has_value()) {
    edge_rel_t_ = std::move(*edge_rel);
    TORCH_CHECK(edge_rel_t_.dim() == 1 && edge_rel_t_.scalar_type() == torch::kInt8 && edge_rel_t_.is_contiguous() &&
                    edge_rel_t_.device().is_cpu(),
                "edge_rel must be a contiguous 1-D int8 CPU tensor");
    TORCH_CHECK(edge_rel_t_.size(0) == num_edges_, "edge_rel must have one entry per entry of col (", num_edges_,
                "), has ", edge_rel_t_.size(0));
    TORCH_CHECK(num_relations_ >= 1 && num_relations_ <= 127, "fanouts must have one column per relation (1..127), has ",
                num_relations_);
    edge_rel_ = edge_rel_t_.data_ptr<int8_t>();
  } else {
    TORCH_CHECK(num_relations_ == 1, "fanouts of an untyped sampler must have one column, has ", num_relations_);
  }
  const torch::Tensor table = fanouts.contiguous();
  fanouts_.assign(table.data_ptr<int64_t>(), table.data_ptr<int64_t>() + table.numel());
  for (int64_t f : fanouts_) {
    TORCH_CHECK(f == -1 || f >= 1 || (f == 0 && typed()), "each fanout must be >= 1 or -1",
                typed() ? " or 0" : "", ", got ", f);
  }
  pool_ = std::make_unique<WorkspacePool>(num_nodes_);
}

template <bool Typed, typename Map>
Layer Sampler::expand(Map& map, int64_t num_dst, const int64_t* fanout, Rng& rng, Workspace& ws,
                      const torch::TensorOptions& options) const {
  Layer layer;
  layer.num_dst = num_dst;
  layer.rowptr = torch::empty({num_dst + 1}, options);
  int64_t* out_ptr = layer.rowptr.data_ptr<int64_t>();
  out_ptr[0] = 0;
  std::vector<int64_t>& n_id = ws.n_id;
  std::vector<int64_t>& src = ws.src;
  std::vector<int64_t>& types = ws.types;
  src.clear();
  types.clear();

  // Destinations are processed in chunks: pick the neighbour positions of the whole chunk while
  // prefetching them, read the picked ids, prefetch their id-map buckets, then look them up in
  // draw order. The cache misses of the reads and of the lookups then overlap instead of
  // following one another; the result is the same as one-by-one processing.
  std::vector<int64_t>& drawn = ws.drawn;
  auto pick = [&](int64_t k) {
    drawn.push_back(k);
    __builtin_prefetch(col_ + k);
    if constexpr (Typed) __builtin_prefetch(edge_rel_ + k);
  };
  // Draws `f` of the positions begin..end-1 (f = -1: all of them).
  auto draw = [&](int64_t begin, int64_t end, int64_t f) {
    const int64_t deg = end - begin;
    if (f < 0 || (!replace_ && deg <= f)) {
      for (int64_t k = begin; k < end; ++k) pick(k);
    } else if (replace_) {
      if (deg > 0) {
        for (int64_t k = 0; k < f; ++k) pick(begin + static_cast<int64_t>(rng.below(deg)));
      }
    } else if (f <= kFloydMaxFanout) {
      // Floyd: for j = deg-f .. deg-1 draw t uniform in [0, j] (inclusive); take t, or j if t
      // is already taken. Every f-subset of the deg positions is equally likely.
      std::vector<int64_t>& picks = ws.picks;
      picks.clear();
      for (int64_t j = deg - f; j < deg; ++j) {
        int64_t t = static_cast<int64_t>(rng.below(static_cast<uint64_t>(j) + 1));
        if (std::find(picks.begin(), picks.end(), t) != picks.end()) t = j;
        picks.push_back(t);
      }
      for (int64_t t : picks) pick(begin + t);
    } else {
      std::vector<int64_t>& picks = ws.picks;
      picks.resize(deg);
      std::iota(picks.begin(), picks.end(), int64_t{0});
      for (int64_t k = 0; k < f; ++k) {
        const int64_t j = k + static_cast<int64_t>(rng.below(static_cast<uint64_t>(deg - k)));
        std::swap(picks[k], picks[j]);
        pick(begin + picks[k]);
      }
    }
  };

  const int64_t untyped_fanout = fanout[0];
  for (int64_t chunk = 0; chunk < num_dst; chunk += kChunk) {
    const int64_t chunk_end = std::min(num_dst, chunk + kChunk);
    for (int64_t d = chunk_end; d < std::min(num_dst, chunk_end + kChunk); ++d) __builtin_prefetch(rowptr_ + n_id[d]);
    if constexpr (Typed) {
      // A typed row's relations are read while drawing (its ends, the binary searches), so they
      // are fetched a chunk ahead: the next chunk's relations, from rowptr fetched a chunk earlier.
      const int64_t next_end = std::min(num_dst, chunk_end + kChunk);
      for (int64_t d = next_end; d < std::min(num_dst, next_end + kChunk); ++d) __builtin_prefetch(rowptr_ + n_id[d]);
      for (int64_t d = (chunk == 0 ? 0 : chunk_end); d < next_end; ++d) {
        const int64_t begin = rowptr_[n_id[d]];
        __builtin_prefetch(edge_rel_ + begin);
        __builtin_prefetch(edge_rel_ + std::max(begin, rowptr_[n_id[d] + 1] - 1));
      }
    }
    // Each destination's first neighbours, before the picks: without this the picks' own
    // prefetches left the sampler as slow as reading the picks one at a time (measured on products).
    for (int64_t d = chunk; d < chunk_end; ++d) __builtin_prefetch(col_ + rowptr_[n_id[d]]);
    drawn.clear();
    const int64_t base = static_cast<int64_t>(src.size());
    for (int64_t d = chunk; d < chunk_end; ++d) {
      const int64_t v = n_id[d];
      const int64_t begin = rowptr_[v];
      const int64_t end = rowptr_[v + 1];
      if (begin < 0 || begin > end || end > num_edges_) {
        throw std::invalid_argument("rowptr is not monotone within [0, len(col)] at node " + std::to_string(v) +
                                    "; the CSR is corrupt");
      }
      if constexpr (Typed) {
        // The row's entries are grouped by relation ascending, from its first entry's relation to
        // its last's: relation r's are the run that starts where relation r - 1's ended, found by
        // a binary search (the last run ends at the row's end). Empty runs draw no random numbers,
        // so one relation draws exactly what the untyped loop draws.
        const int64_t first = begin < end ? edge_rel_[begin] : 0;
        const int64_t last = begin < end ? edge_rel_[end - 1] : -1;
        if (begin < end && (first < 0 || last >= num_relations_)) {
          throw std::invalid_argument("edge_rel holds a relation outside [0, " + std::to_string(num_relations_) +
                                      ") in the row of node " + std::to_string(v) + "; the typed CSR is corrupt");
        }
        if (begin < end && first > last) throw not_grouped(v);
        int64_t lo = begin;
        for (int64_t r = first; r <= last; ++r) {
          const int64_t hi =
              r == last ? end : std::upper_bound(edge_rel_ + lo, edge_rel_ + end, static_cast<int8_t>(r)) - edge_rel_;
          if (fanout[r] != 0 && hi > lo) {
            const size_t drawn_before = drawn.size();
            draw(lo, hi, fanout[r]);
            types.insert(types.end(), drawn.size() - drawn_before, r);
          }
          lo = hi;
        }
      } else {
        draw(begin, end, untyped_fanout);
      }
      out_ptr[d + 1] = base + static_cast<int64_t>(drawn.size());
    }
    if constexpr (Typed) {
      // Each drawn entry holds the relation it was drawn for, unless its row is not grouped.
      for (size_t j = 0; j < drawn.size(); ++j) {
        if (edge_rel_[drawn[j]] != types[base + j]) {
          const int64_t d = std::upper_bound(out_ptr + chunk + 1, out_ptr + chunk_end + 1, base + int64_t(j)) - out_ptr - 1;
          throw not_grouped(n_id[d]);
        }
      }
    }
    for (int64_t& k : drawn) {
      const int64_t u = col_[k];
      if (u < 0 || u >= num_nodes_) {
        throw std::invalid_argument("col holds neighbour id " + std::to_string(u) + " outside [0, " +
                                    std::to_string(num_nodes_) + "); the CSR is corrupt");
      }
      k = u;
      map.prefetch(u);
    }
    for (int64_t u : drawn) {
      const int64_t fresh = static_cast<int64_t>(n_id.size());
      const int64_t local = map.get_or_insert(u, fresh);
      if (local == fresh) n_id.push_back(u);
      src.push_back(local);
    }
  }

  const int64_t num_edges = static_cast<int64_t>(src.size());
  layer.num_src = static_cast<int64_t>(n_id.size());
  layer.edge_index = torch::empty({2, num_edges}, options);
  int64_t* e = layer.edge_index.data_ptr<int64_t>();
  std::memcpy(e, src.data(), num_edges * sizeof(int64_t));
  int64_t* dst = e + num_edges;
  for (int64_t d = 0; d < num_dst; ++d) {
    std::fill(dst + out_ptr[d], dst + out_ptr[d + 1], d);
  }
  if constexpr (Typed) {
    layer.edge_type = torch::empty({num_edges}, options);
    std::memcpy(layer.edge_type.data_ptr<int64_t>(), types.data(), num_edges * sizeof(int64_t));
  }
  return layer;
}

Batch Sampler::sample(const int64_t* seeds, int64_t num_seeds, uint64_t seed, uint64_t batch_index,
                      const Labels& labels, const std::optional<FetchContext>& fetch, Workspace& ws) const {
  Rng rng = Rng::stream(seed, batch_index);
  // Pinned when the batch goes to a GPU, so that its host-to-device copies are asynchronous.
  const auto options = torch::TensorOptions(torch::kInt64).pinned_memory(fetch.has_value() && fetch->pin);
  Batch batch;
  batch.hops.reserve(num_layers_);
  std::visit(
      [&](auto& map) {
        map.clear(std::max(ws.peak_nodes, num_seeds));
        ws.n_id.clear();
        for (int64_t i = 0; i < num_seeds; ++i) {
          const int64_t s = seeds[i];
          if (s < 0 || s >= num_nodes_) {
            throw std::invalid_argument("seed " + std::to_string(s) + " is outside [0, " +
                                        std::to_string(num_nodes_) + "); pass node ids of this graph");
          }
          if (map.get_or_insert(s, i) != i) {
            throw std::invalid_argument("seed " + std::to_string(s) +
                                        " appears twice in one batch; pass distinct seeds");
          }
          ws.n_id.push_back(s);
        }
        for (int64_t h = 0; h < num_layers_; ++h) {
          const int64_t num_dst = static_cast<int64_t>(ws.n_id.size());
          const int64_t* fanout = fanouts_.data() + h * num_relations_;
          batch.hops.push_back(typed() ? expand<true>(map, num_dst, fanout, rng, ws, options)
                                       : expand<false>(map, num_dst, fanout, rng, ws, options));
        }
      },
      ws.map);
  const int64_t num_nodes = static_cast<int64_t>(ws.n_id.size());
  ws.peak_nodes = std::max(ws.peak_nodes, num_nodes);
  batch.n_id = torch::empty({num_nodes}, options);
  std::memcpy(batch.n_id.data_ptr<int64_t>(), ws.n_id.data(), num_nodes * sizeof(int64_t));

  if (labels.values.defined()) {
    const int64_t* values = int64_data(labels.values, "labels");
    const int64_t size = labels.values.size(0);
    batch.y = torch::empty({num_seeds}, options);
    int64_t* y = batch.y.data_ptr<int64_t>();
    for (int64_t i = 0; i < num_seeds; ++i) {
      const int64_t row = seeds[i] - labels.offset;
      if (row < 0 || row >= size) {
        throw std::invalid_argument("seed " + std::to_string(seeds[i]) + " has no label (labels cover ids [" +
                                    std::to_string(labels.offset) + ", " + std::to_string(labels.offset + size) +
                                    ")); pass labels for every seed");
      }
      y[i] = values[row];
    }
  }
  if (fetch.has_value()) batch.origins = row_origins(*fetch, ws.n_id.data(), num_nodes);
  return batch;
}

}  // namespace salientpp
