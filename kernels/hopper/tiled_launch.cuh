// The 3 x 3 Hopper kernel's launches: occupancy, the packing apart, the persistent, cooperative
// and cluster-split instances, and one operand type's entry points (launch_operands,
// pack_operands), instantiated one operand type a file under instances/.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "../conv_relu_maxpool_wgmma.h"
#include "tiled_host.cuh"

namespace tiled_wgmma {
namespace {

// kHaloPlaneVectors applies: one tile per image, a contiguous image plane of whole 4-pixel
// vectors (aligned, at least 4 wide so that a vector wraps into the next row at most once),
// every pixel inside the tile's halo, and one unit per thread.
template <class Tile>
bool plane_vectors_apply(const ConvPoolOperands& ops, const ConvPoolShape& s,
                         const WgmmaPlan& p) {
  const int64_t plane = int64_t(s.in_height) * s.in_width;
  if (Tile::kStrip || p.tiles_h != 1 || p.tiles_w != 1 || s.in_width < 4 || plane % 4 != 0 ||
      plane / 4 > Tile::kMaxPlaneVectors)
    return false;
  if (ops.x_stride[3] != 1 || ops.x_stride[2] != s.in_width || ops.x_stride[1] % 4 != 0 ||
      ops.x_stride[0] % 4 != 0 ||
      !aligned(ops.x, sizeof(typename Tile::Operands::RowVector)))
    return false;
  const TileOrigin o = tile_origin<Tile>(s, p, 0);
  return s.in_height - o.in_row0 <= Tile::kHaloRows &&
         s.in_width - o.staged_col0 <= Tile::kHaloCols;
}

// kHaloPixelVectors applies: the slice's channels of a pixel are one aligned 16-byte vector
// (channels-last: unit channel stride, the other strides and x multiples of 16 bytes) and a
// slice is wholly inside the channels or wholly past them.
template <class Tile>
bool pixel_vectors_apply(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  constexpr int kVector = Tile::Operands::kSliceChannels;  // elements in 16 bytes
  return ops.x_stride[1] == 1 && s.in_channels % kVector == 0 && ops.x_stride[0] % kVector == 0 &&
         ops.x_stride[2] % kVector == 0 && ops.x_stride[3] % kVector == 0 &&
         aligned(ops.x, sizeof(typename Tile::Operands::Pixel));
}

// Once per kernel and device: raise its dynamic shared-memory limit (a constant) and ask how
// many blocks fit on an SM. Returns that count, or a negative cudaError_t.
template <class Tile, bool kPixelVectors, bool kPrepacked, bool kSplitK = false>
int prepare_kernel(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> blocks_per_sm[kMaxDevices];  // 0 = not yet asked
  if (device >= 0 && device < kMaxDevices) {
    const int known = blocks_per_sm[device].load(std::memory_order_acquire);
    if (known > 0) return known;
  }
  const auto kernel = conv_pool_wgmma_kernel<Tile, kPixelVectors, kPrepacked, kSplitK>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
  int blocks = 0;
  if (err == cudaSuccess)
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads,
                                                        Tile::kSmemBytes);
  if (err != cudaSuccess) return -int(err);
  if (blocks < 1) return -int(cudaErrorInvalidConfiguration);
  if (device >= 0 && device < kMaxDevices)
    blocks_per_sm[device].store(blocks, std::memory_order_release);
  return blocks;
}

// Launches one kernel instance: persistent, as many blocks as are resident at once;
// cooperative (for the grid barrier after the weight packing) unless the weights came packed.
template <class Tile, bool kPixelVectors, bool kPrepacked>
cudaError_t launch_instance(const ConvPoolOperands& ops, const ConvPoolShape& s, WgmmaPlan p,
                            const ConvPoolDevice& device, cudaStream_t stream) {
  int current = -1;
  const cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  const int blocks_per_sm = prepare_kernel<Tile, kPixelVectors, kPrepacked>(current);
  if (blocks_per_sm < 0) return cudaError_t(-blocks_per_sm);
  p.packed = kPrepacked ? const_cast<float*>(ops.packed_weight) : ops.workspace;
  int blocks = std::min(p.tiles, blocks_per_sm * std::max(device.sm_count, 1));
  if (master_bytes<Tile>(p) > 0) blocks = std::min(blocks, kMasterBlocks);
  void* args[] = {const_cast<ConvPoolOperands*>(&ops), const_cast<ConvPoolShape*>(&s), &p};
  const void* kernel =
      reinterpret_cast<const void*>(conv_pool_wgmma_kernel<Tile, kPixelVectors, kPrepacked>);
  if constexpr (kPrepacked)
    return cudaLaunchKernel(kernel, dim3(blocks), dim3(kThreads), args, Tile::kSmemBytes, stream);
  else
    return cudaLaunchCooperativeKernel(kernel, dim3(blocks), dim3(kThreads), args,
                                       Tile::kSmemBytes, stream);
}

// The packing kernel of Tile's weights into p.packed, on every SM: one work item per (channel
// block, chunk, slice, out channel), a grid-stride loop.
template <class Tile>
cudaError_t launch_packing(const ConvPoolOperands& ops, const ConvPoolShape& s,
                           const WgmmaPlan& p, const ConvPoolDevice& device,
                           cudaStream_t stream) {
  const int64_t items = int64_t(p.channel_blocks) * p.chunks * 2 * Tile::kN;
  const int64_t blocks = std::min<int64_t>((items + kThreads - 1) / kThreads,
                                           int64_t(8) * std::max(device.sm_count, 1));
  pack_weights_kernel<Tile><<<unsigned(blocks), kThreads, 0, stream>>>(ops, s, p);
  return cudaGetLastError();
}

// The weights -> the workspace, by a kernel of its own on every SM (docs/PERF.md); the
// operands the kernel instance for packed weights then reads.
template <class Tile>
cudaError_t pack_into_workspace(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                const WgmmaPlan& p, const ConvPoolDevice& device,
                                cudaStream_t stream, ConvPoolOperands& packed_ops) {
  WgmmaPlan packing = p;
  packing.packed = ops.workspace;
  packed_ops = ops;
  packed_ops.packed_weight = ops.workspace;
  // (The wide tile of the same operands and N packs the same layout: no new instance.)
  return launch_packing<WideTile<typename Tile::Operands, Tile::kN>>(ops, s, packing, device,
                                                                     stream);
}

// The split instance, p.tiles clusters of p.split blocks (one tile each, not persistent).
template <class Tile, bool kPixelVectors>
cudaError_t launch_split_instance(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                  WgmmaPlan p, cudaStream_t stream) {
  int current = -1;
  const cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  const int blocks_per_sm = prepare_kernel<Tile, kPixelVectors, true, true>(current);
  if (blocks_per_sm < 0) return cudaError_t(-blocks_per_sm);
  p.packed = const_cast<float*>(ops.packed_weight);
  const ClusterLaunch clusters(p.tiles, p.split, Tile::kSmemBytes, stream);
  return cudaLaunchKernelEx(&clusters.config,
                            conv_pool_wgmma_kernel<Tile, kPixelVectors, true, true>, ops, s, p);
}

template <class Tile>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                   const ConvPoolDevice& device, cudaStream_t stream,
                   const int64_t* out_stride) {
  WgmmaPlan p = make_plan_with_divisors<Tile>(s);
  p.channels_last_out = out_stride != nullptr;
  using Operands = typename Tile::Operands;
  if (plane_vectors_apply<Tile>(ops, s, p)) {
    p.halo_load = kHaloPlaneVectors;
    p.plane_vectors = int(int64_t(s.in_height) * s.in_width / 4);
  } else if (Operands::vector_input(ops, s)) {
    p.halo_load = kHaloRowVectors;
  } else {
    p.halo_load = pixel_vectors_apply<Tile>(ops, s) ? kHaloPixelVectors : kHaloScalars;
  }
  if constexpr (!Tile::kScalarHalo) {
    if (p.halo_load == kHaloScalars)
      return launch<typename Tile::OneBlockTwin>(ops, s, device, stream, out_stride);
  }
  if constexpr (!Tile::kChannelsLastOut) {
    if (out_stride != nullptr)
      return launch<typename Tile::OneBlockTwin>(ops, s, device, stream, out_stride);
  }
  // 3x3 here: C * 9 % 4 == 0 (fp32) or % 8 == 0 (16-bit).
  p.vector_weights = vectorizable_weights(ops, s, Operands::kSliceChannels);
  // Vector stores: an NCHW output with width % 4 == 0 starts every row 4 elements aligned
  // (store_pooled's runs), one whose rows are multiples of 16 bytes every conv row
  // (store_conv_rows); a channels-last one whose channel count is a multiple of 16 bytes has
  // every pixel 16-byte aligned (store_pooled_channels_last). store_conv_channels_last
  // decides its own.
  const void* out = std::is_same_v<typename Operands::Element, float>
                        ? static_cast<const void*>(ops.out)
                        : static_cast<const void*>(ops.out16);
  constexpr int kElementBytes = sizeof(typename Operands::Element);
  if (p.channels_last_out)
    p.vector_out = s.out_channels % Operands::kOutVector == 0 && aligned(out, 16);
  else if (Tile::kPool == 2)
    p.vector_out = s.out_width % 4 == 0 && aligned(out, 4 * kElementBytes);
  else  // store_conv_rows: rows of 8 outputs, 16-byte aligned
    p.vector_out = s.out_width * kElementBytes % 16 == 0 && aligned(out, 16);
  const bool pixel_vectors = p.halo_load == kHaloPixelVectors;
  if (ops.packed_weight != nullptr) {
    if constexpr (takes_packed_weight<Tile>() && !Tile::kOneBlockTwin) {
      if (wgmma_takes_packed_weight(s))
        return pixel_vectors ? launch_instance<Tile, true, true>(ops, s, p, device, stream)
                             : launch_instance<Tile, false, true>(ops, s, p, device, stream);
    }
    return cudaErrorInvalidValue;  // the caller checks wgmma_takes_packed_weight
  }
  if constexpr (splits<Tile>()) {
    p.split = split_for<Tile>(p, device);
    if (p.split > 1) {
      // The weights packed apart (as below), then the tiles' chunks over clusters.
      ConvPoolOperands packed_ops;
      const cudaError_t err = pack_into_workspace<Tile>(ops, s, p, device, stream, packed_ops);
      if (err != cudaSuccess) return err;
      return pixel_vectors ? launch_split_instance<Tile, true>(packed_ops, s, p, stream)
                           : launch_split_instance<Tile, false>(packed_ops, s, p, stream);
    }
  }
  if constexpr (takes_packed_weight<Tile>()) {
    if (packs_apart<Tile>(p, device)) {
      // The packing on every SM, a kernel of its own, into the workspace; then the instance
      // that reads packed weights, from there (still in L2).
      ConvPoolOperands packed_ops;
      const cudaError_t err = pack_into_workspace<Tile>(ops, s, p, device, stream, packed_ops);
      if (err != cudaSuccess) return err;
      return pixel_vectors
                 ? launch_instance<Tile, true, true>(packed_ops, s, p, device, stream)
                 : launch_instance<Tile, false, true>(packed_ops, s, p, device, stream);
    }
  }
  return pixel_vectors ? launch_instance<Tile, true, false>(ops, s, p, device, stream)
                       : launch_instance<Tile, false, false>(ops, s, p, device, stream);
}

}  // namespace

template <class Operands>
cudaError_t launch_operands(const ConvPoolOperands& ops, const ConvPoolShape& s,
                            const ConvPoolDevice& device, cudaStream_t stream,
                            const int64_t* out_stride) {
  return with_operands_tile<Operands>(s, [&](auto tile) {
    return launch<decltype(tile)>(ops, s, device, stream, out_stride);
  });
}

template <class Operands>
cudaError_t pack_operands(const ConvPoolOperands& ops, const ConvPoolShape& s, float* packed,
                          const ConvPoolDevice& device, cudaStream_t stream) {
  return with_operands_packing_tile<Operands>(s, [&](auto tile) {
    using Tile = decltype(tile);
    WgmmaPlan p = packing_plan<Tile>(s);
    p.vector_weights = vectorizable_weights(ops, s, Tile::Operands::kSliceChannels);
    p.packed = packed;
    return launch_packing<Tile>(ops, s, p, device, stream);
  });
}

}  // namespace tiled_wgmma

// An operand type's file (kernels/hopper/instances/tiled_*.cu) is these lines: its launches,
// and (not the 3xTF32 operands, which take no weights packed ahead of time) its packing.
#define TILED_WGMMA_LAUNCH_INSTANCE(OPERANDS)                                                   \
  template cudaError_t tiled_wgmma::launch_operands<OPERANDS>(                                \
      const ConvPoolOperands&, const ConvPoolShape&, const ConvPoolDevice&, cudaStream_t,     \
      const int64_t*);
#define TILED_WGMMA_PACK_INSTANCE(OPERANDS)                                                     \
  template cudaError_t tiled_wgmma::pack_operands<OPERANDS>(                                  \
      const ConvPoolOperands&, const ConvPoolShape&, float*, const ConvPoolDevice&,           \
      cudaStream_t);
