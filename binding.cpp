// The cuda_extension module: calls every binding that registered itself
// through REGISTER_BINDING (see binding_registry.h). Stable infrastructure.
#include <torch/csrc/utils/pybind.h>

#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
  m.doc() = "Fused CUDA kernels (Conv2d -> ReLU -> MaxPool2d) for PyTorch";
  pybind11::list names;
  for (auto& entry : binding_registry::entries()) {
    entry.fn(m);
    names.append(entry.name);
  }
  m.attr("registered_bindings") = names;
}
