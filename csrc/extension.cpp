// Python bindings of the salientpp C++ extension (module salientpp._C).
#include <torch/extension.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "salientpp C++ kernels";
  m.def("gather_rows", &salientpp::gather_rows,
        "out[i] = src[index[i]] for a 2-D tensor, parallel over rows",
        py::arg("src"), py::arg("index"), py::arg("out") = py::none(),
        py::call_guard<py::gil_scoped_release>());
  m.attr("with_cuda") =
#ifdef SALIENTPP_WITH_CUDA
      true;
#else
      false;
#endif
}
