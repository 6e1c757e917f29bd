// Launch templates of the general kernel's instances: the per-element-type files
// (general_wgmma_<type>.cu) instantiate the cp.async form's, so that each type's instances
// compile in parallel, and one file an (element type, tile) under instances/ the
// warp-specialized form's (GENERAL_WGMMA_WS_INSTANCE).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "general_hooks.h"
#include "general_kernel.cuh"
#include "general_wgmma.h"
#include "general_ws_kernel.cuh"

namespace general_wgmma {

// Raises instance (E, kTileId, kInput)'s dynamic shared-memory limit on the current device as
// far as a launch needs (cudaFuncSetAttribute once per device and larger size, not per launch).
// The record is per instance: the instances share one function-pointer type. kSplit: the
// kernel's SplitForm (the warp-specialized kernel's: its cluster instance or not).
template <class E, int kTileId, int kInput, int kSplit, class Kernel>
cudaError_t allow_shared_bytes(Kernel kernel, int bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> allowed[kMaxDevices];
  int device = 0;
  if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  if (device >= kMaxDevices)
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
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

template <class E, int kTileId, int kInput, int kSplit = kUnsplit>
cudaError_t launch_instance(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                            cudaStream_t stream) {
  auto kernel = general_conv_pool_kernel<E, kTileId, kInput, kSplit>;
  if (cudaError_t error = allow_shared_bytes<E, kTileId, kInput, kSplit>(kernel, p.smem_bytes);
      error != cudaSuccess)
    return error;
  kernel<<<unsigned(p.tiles * p.split), kThreads, p.smem_bytes, stream>>>(ops, s, p);
  return cudaGetLastError();
}

// The instance of plan.tile for element type E and input path kInput.
template <class E, int kInput>
cudaError_t launch_element(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                           cudaStream_t stream) {
  static_assert(kInput == kPixelInput || std::is_same_v<E, Float32>,
                "16-bit inputs are read as pixel slices (NCHW ones from the NHWC copy)");
  if (p.input != kInput) return cudaErrorInvalidValue;
  switch (p.tile) {
    case kWide128: return launch_instance<E, kWide128, kInput>(ops, s, p, stream);
    case kSquare128: return launch_instance<E, kSquare128, kInput>(ops, s, p, stream);
    case kWide64: return launch_instance<E, kWide64, kInput>(ops, s, p, stream);
    case kSquare64: return launch_instance<E, kSquare64, kInput>(ops, s, p, stream);
    case kTall64: return launch_instance<E, kTall64, kInput>(ops, s, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The warp-specialized kernel for element type E on tile kTileId (general_wgmma.h): a tile's
// p.split blocks (consecutive in the grid) as one cluster where p.cluster_split; with
// $CONV_POOL_GENERAL_PDL=1 as the previous kernel's programmatic dependent (general_hooks.h).
template <class E, int kTileId>
cudaError_t launch_ws_tile(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                           const CUtensorMap& x_map, const CUtensorMap& weight_map,
                           cudaStream_t stream) {
  auto kernel = p.cluster_split ? general_ws_kernel<E, kTileId, true>
                                : general_ws_kernel<E, kTileId, false>;
  // (The cluster instance's record: kTmaInput with kSplit.)
  const cudaError_t allowed =
      p.cluster_split ? allow_shared_bytes<E, kTileId, kTmaInput, 1>(kernel, p.smem_bytes)
                      : allow_shared_bytes<E, kTileId, kTmaInput, 0>(kernel, p.smem_bytes);
  if (allowed != cudaSuccess) return allowed;
  cudaLaunchAttribute attributes[2];
  int count = 0;
  if (p.cluster_split) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = unsigned(p.split);
    attributes[count].val.clusterDim.y = attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (hooks::dependent_launch()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(p.grid));
  config.blockDim = dim3(kWsThreads);
  config.dynamicSmemBytes = size_t(p.smem_bytes);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = unsigned(count);
  return cudaLaunchKernelEx(&config, kernel, ops, s, p, x_map, weight_map);
}

}  // namespace general_wgmma

// One (element type, tile) instance's file (kernels/hopper/instances/) is this line.
#define GENERAL_WGMMA_WS_INSTANCE(E, TILE)                                                     \
  template cudaError_t general_wgmma::launch_ws_tile<E, general_wgmma::TILE>(                \
      const ConvPoolOperands&, const ConvPoolShape&, const general_wgmma::Plan&,             \
      const CUtensorMap&, const CUtensorMap&, cudaStream_t);
