// Self-registering pybind11 bindings for the cuda_extension module.
//
// Each kernels/*_binding.cpp defines a function `void register_X(pybind11::module&)`
// and adds it to the registry at static-initialisation time with
//
//     REGISTER_BINDING(X, register_X);
//
// binding.cpp's PYBIND11_MODULE then calls every registered function, so adding a
// kernel never touches binding.cpp. Stable infrastructure: change with care.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

// Hidden like pybind11's own types, which Entry holds; one registry per module.
namespace binding_registry __attribute__((visibility("hidden"))) {

using RegisterFn = std::function<void(pybind11::module&)>;

struct Entry {
  std::string name;
  RegisterFn fn;
};

// Function-local static: safe against the static-initialisation-order problem,
// since registrars in other translation units may run before binding.cpp's statics.
inline std::vector<Entry>& entries() {
  static std::vector<Entry> registered;
  return registered;
}

struct Registrar {
  Registrar(std::string name, RegisterFn fn) {
    entries().push_back({std::move(name), std::move(fn)});
  }
};

}  // namespace binding_registry

#define REGISTER_BINDING(name, fn) \
  static ::binding_registry::Registrar binding_registrar_##name(#name, fn)
