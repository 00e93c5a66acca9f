// Python bindings of the salientpp C++ extension (module salientpp._C).
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <vector>

#include "fetch.h"
#include "gather_ops.h"
#include "loader.h"
#include "model_ops.h"
#include "sampler.h"

namespace py = pybind11;
using namespace salientpp;

namespace {

py::object tensor_or_none(const torch::Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

py::dict origins_to_python(const RowOrigins& p) {
  py::dict d;
  d["num_rows"] = p.num_rows;
  d["owned_pos"] = p.owned_pos;
  d["owned_row"] = p.owned_row;
  d["owned_counts"] = p.owned_counts;
  py::list x;
  for (const torch::Tensor& t : p.x) x.append(tensor_or_none(t));
  d["x"] = x;
  d["remote_id"] = p.remote_id;
  d["remote_pos"] = p.remote_pos;
  d["remote_counts"] = p.remote_counts;
  d["device_pos"] = p.device_pos;
  d["device_slot"] = p.device_slot;
  d["device_counts"] = p.device_counts;
  d["host_pos"] = p.host_pos;
  d["host_slot"] = p.host_slot;
  d["host_counts"] = p.host_counts;
  return d;
}

// (n_id, [(num_src, num_dst, rowptr, edge_index, edge_type | None) per hop, hop order], y | None,
//  row origins dict | None)
py::tuple batch_to_python(const Batch& b) {
  py::list hops;
  for (const Layer& l : b.hops) {
    hops.append(py::make_tuple(l.num_src, l.num_dst, l.rowptr, l.edge_index, tensor_or_none(l.edge_type)));
  }
  py::object fetch = b.origins.has_value() ? py::object(origins_to_python(*b.origins)) : py::none();
  return py::make_tuple(b.n_id, hops, tensor_or_none(b.y), fetch);
}

Labels make_labels(std::optional<torch::Tensor> values, int64_t offset) {
  Labels labels;
  if (values.has_value()) labels.values = *values;
  labels.offset = offset;
  return labels;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "salientpp C++ kernels: neighbour sampling, finding row origins, row gathers, model-step ops";
  py::class_<FetchContext>(m, "FetchContext")
      .def(py::init([](torch::Tensor offsets, int64_t num_types, int64_t rank, std::optional<torch::Tensor> cache_slot,
                       torch::Tensor device_slots, torch::Tensor featured,
                       std::vector<std::optional<torch::Tensor>> local_x, std::optional<torch::Tensor> local_row,
                       bool pin) {
             TORCH_CHECK(num_types >= 1 && (offsets.size(0) - 1) % num_types == 0 &&
                             device_slots.numel() == num_types && featured.numel() == num_types &&
                             featured.scalar_type() == torch::kBool && device_slots.scalar_type() == torch::kInt64 &&
                             static_cast<int64_t>(local_x.size()) == num_types,
                         "a fetch context needs K * T + 1 offsets, int64 device_slots [T], bool featured [T] and T "
                         "local_x entries");
             FetchContext c;
             c.offsets = offsets;
             c.num_types = num_types;
             c.rank = rank;
             if (cache_slot.has_value()) c.cache_slot = *cache_slot;
             c.device_slots = device_slots.contiguous();
             c.featured = featured.contiguous();
             for (const std::optional<torch::Tensor>& x : local_x) {
               c.local_x.push_back(x.value_or(torch::Tensor()));
             }
             if (local_row.has_value()) c.local_row = *local_row;
             c.pin = pin;
             return c;
           }),
           py::arg("offsets"), py::arg("num_types"), py::arg("rank"), py::arg("cache_slot"), py::arg("device_slots"),
           py::arg("featured"), py::arg("local_x"), py::arg("local_row"), py::arg("pin"));

  py::class_<Sampler, std::shared_ptr<Sampler>>(m, "Sampler")
      .def(py::init<torch::Tensor, torch::Tensor, std::optional<torch::Tensor>, torch::Tensor, bool>(),
           py::arg("rowptr"), py::arg("col"), py::arg("edge_rel"), py::arg("fanouts"), py::arg("replace"))
      .def_property_readonly("num_nodes", &Sampler::num_nodes)
      .def_property_readonly("num_layers", &Sampler::num_layers)
      .def_property_readonly("num_relations", &Sampler::num_relations)
      .def_property_readonly("typed", &Sampler::typed)
      .def(
          "sample",
          [](const Sampler& s, torch::Tensor seeds, uint64_t seed, uint64_t batch_index,
             std::optional<torch::Tensor> labels, int64_t label_offset, std::optional<FetchContext> fetch) {
            TORCH_CHECK(seeds.dim() == 1 && seeds.scalar_type() == torch::kInt64 && seeds.is_contiguous(),
                        "seeds must be a contiguous 1-D int64 tensor");
            Batch b;
            {
              py::gil_scoped_release release;
              Sampler::Lease lease(s);
              b = s.sample(seeds.data_ptr<int64_t>(), seeds.size(0), seed, batch_index,
                           make_labels(labels, label_offset), fetch, lease.get());
            }
            return batch_to_python(b);
          },
          py::arg("seeds"), py::arg("seed"), py::arg("batch_index"), py::arg("labels"), py::arg("label_offset"),
          py::arg("fetch"));

  py::class_<BatchLoader>(m, "BatchLoader")
      .def(py::init([](std::shared_ptr<Sampler> sampler, torch::Tensor order, torch::Tensor bounds, uint64_t seed,
                       std::optional<torch::Tensor> labels, int64_t label_offset,
                       std::optional<FetchContext> fetch, int64_t num_threads, int64_t read_ahead,
                       int64_t first_batch, bool low_priority) {
             return std::make_unique<BatchLoader>(std::move(sampler), order, bounds, seed,
                                                  make_labels(labels, label_offset), std::move(fetch), num_threads,
                                                  read_ahead, first_batch, low_priority);
           }),
           py::arg("sampler"), py::arg("order"), py::arg("bounds"), py::arg("seed"),
           py::arg("labels"), py::arg("label_offset"), py::arg("fetch"), py::arg("num_threads"),
           py::arg("read_ahead"), py::arg("first_batch") = 0, py::arg("low_priority") = false)
      .def("__len__", &BatchLoader::num_batches)
      .def("next",
           [](BatchLoader& l) -> py::object {
             std::optional<Batch> b;
             {
               py::gil_scoped_release release;
               b = l.next();
             }
             if (!b.has_value()) return py::none();
             return batch_to_python(*b);
           })
      .def("close", &BatchLoader::close, py::call_guard<py::gil_scoped_release>());

  m.def(
      "row_origins",
      [](const FetchContext& ctx, torch::Tensor n_id) {
        TORCH_CHECK(n_id.dim() == 1 && n_id.scalar_type() == torch::kInt64 && n_id.is_contiguous() &&
                        n_id.device().is_cpu(),
                    "n_id must be a contiguous 1-D int64 CPU tensor");
        RowOrigins origins;
        {
          py::gil_scoped_release release;
          origins = row_origins(ctx, n_id.data_ptr<int64_t>(), n_id.size(0));
        }
        return origins_to_python(origins);
      },
      py::arg("ctx"), py::arg("n_id"));

  m.def("csr_aggregate", &csr_aggregate, py::arg("rowptr"), py::arg("col"), py::arg("x"), py::arg("mean"),
        py::arg("widen"), py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("csr_aggregate_backward", &csr_aggregate_backward, py::arg("rowptr"), py::arg("col"), py::arg("grad_out"),
        py::arg("num_src"), py::arg("mean"), py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("dropout_forward", &dropout_forward, py::arg("x"), py::arg("p"), py::arg("seed"), py::arg("relu"),
        py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("dropout_backward", &dropout_backward, py::arg("grad_out"), py::arg("out"), py::arg("p"), py::arg("seed"),
        py::arg("relu"), py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
  m.def(
      "dropout_mask", [](std::vector<int64_t> shape, double p, uint64_t seed) { return dropout_mask(shape, p, seed); },
      py::arg("shape"), py::arg("p"), py::arg("seed"));
  m.def("keyed_dropout_mask", &keyed_dropout_mask, py::arg("ids"), py::arg("width"), py::arg("p"), py::arg("seed"),
        py::call_guard<py::gil_scoped_release>());

  m.def("gather_rows", &gather_rows, py::arg("out"), py::arg("sources"), py::arg("stream") = 0,
        py::call_guard<py::gil_scoped_release>());

  m.attr("dense_id_map_max_nodes") = kDenseIdMapMaxNodes;
  m.attr("sampler_nice_offset") = kSamplerNiceOffset;
  m.def("lower_thread_priority", &lower_thread_priority);

  m.attr("with_cuda") =
#ifdef SALIENTPP_WITH_CUDA
      true;
#else
      false;
#endif
}
