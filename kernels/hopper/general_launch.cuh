// Launch template of the general kernel's instances: the per-element-type files
// (general_wgmma_<type>.cu) instantiate it, so that each type's instances compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "general_kernel.cuh"
#include "general_wgmma.h"

namespace general_wgmma {

// Raises the instance's dynamic shared-memory limit on the current device as far as a launch
// needs (cudaFuncSetAttribute once per device and larger size, not per launch).
template <class Kernel>
cudaError_t allow_shared_bytes(Kernel kernel, int bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> allowed[kMaxDevices];
  int device = 0;
  if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  if (device >= kMaxDevices) return cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (allowed[device].load() >= bytes) return cudaSuccess;
  const cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error == cudaSuccess) {
    int seen = allowed[device].load();
    while (seen < bytes && !allowed[device].compare_exchange_weak(seen, bytes)) {
    }
  }
  return error;
}

template <class E, int kTileId, int kInput>
cudaError_t launch_instance(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                            cudaStream_t stream) {
  auto kernel = general_conv_pool_kernel<E, kTileId, kInput>;
  if (cudaError_t error = allow_shared_bytes(kernel, p.smem_bytes); error != cudaSuccess)
    return error;
  kernel<<<unsigned(p.tiles * p.split), kThreads, p.smem_bytes, stream>>>(ops, s, p);
  return cudaGetLastError();
}

// The instance of plan.tile and plan.input for element type E (the 16-bit types have no
// planar path: their NCHW inputs are copied to NHWC first).
template <class E>
cudaError_t launch_element(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                           cudaStream_t stream) {
  constexpr bool kPlanar = std::is_same_v<E, Float32>;
#define GENERAL_WGMMA_TILE(TILE)                                                    \
  case TILE:                                                                        \
    if constexpr (kPlanar) {                                                        \
      if (p.input == kPlanarInput)                                                  \
        return launch_instance<E, TILE, kPlanarInput>(ops, s, p, stream);           \
    }                                                                               \
    if (p.input != kPixelInput) return cudaErrorInvalidValue;                       \
    return launch_instance<E, TILE, kPixelInput>(ops, s, p, stream);
  switch (p.tile) {
    GENERAL_WGMMA_TILE(kWide128)
    GENERAL_WGMMA_TILE(kSquare128)
    GENERAL_WGMMA_TILE(kWide64)
    GENERAL_WGMMA_TILE(kSquare64)
    GENERAL_WGMMA_TILE(kTall64)
    default:
      return cudaErrorInvalidValue;
  }
#undef GENERAL_WGMMA_TILE
}

}  // namespace general_wgmma
