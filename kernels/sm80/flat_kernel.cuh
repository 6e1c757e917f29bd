// The flat kernel (conv_pool_flat_kernel): persistent blocks that stage the weights once and
// copy the next tile's input planes while this tile computes, on either flat mainloop.
#pragma once

#include "../hopper/flat_mainloop.cuh"
#include "flat_mainloop.cuh"
#include "tiled_epilogue.cuh"

namespace conv_pool_mma {

// E: the operands' element type (Float32 for tiled_tf32_flat, Float16 / BFloat16 for
// tiled_16bit_flat: the staged halo is fp32 either way, the weights are converted as they are
// read, and the TF32 mma multiplies 16-bit values exactly, since their significands fit TF32's).
// Two blocks per SM where the accumulators and shared memory allow (<= 128 registers).
// Persistent plan (p.flat_persistent): the block stages the weights once and loops over tiles
// blockIdx.x, + gridDim.x, ... (of one channel block: the grid is a multiple of them); input
// plane c of the next tile is copied as soon as the last reduction step reading plane c of this
// tile is done, so the copies run under the rest of this tile's steps and its epilogue.
// Otherwise one tile per block, the epilogue reusing the halo.
// 16-bit planes are loaded and converted by the threads, except with p.flat_raw_planes (and
// 8-byte rows): then each tile starts by copying all the next tile's planes raw, and a released
// plane is converted from there, so the loads run behind the math as the float32 copies do.
template <class Mainloop, class E>
__global__ void __launch_bounds__(Mainloop::kThreads, Mainloop::kMinBlocks)
    conv_pool_flat_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const TilePlan p) {
  constexpr int kBlockThreads = Mainloop::kThreads;
  extern __shared__ __align__(16) float smem[];
  using Raw = typename E::Raw;
  const int taps = s.taps();
  const int reduction = s.in_channels * taps;
  Raw* weights = reinterpret_cast<Raw*>(smem);
  float* halo = reinterpret_cast<float*>(weights + p.out_block * p.weight_row);
  const int halo_floats = s.in_channels * p.halo_plane;
  const int epilogue_floats = p.out_block * kEpilogueRow;
  float* tile = p.flat_persistent ? halo + halo_floats : halo;
  int* k_offset = reinterpret_cast<int*>(
      p.flat_persistent ? tile + epilogue_floats : halo + max(halo_floats, epilogue_floats));
  int* weight_gather = k_offset + p.k_padded;  // reduction entries
  float* bias = reinterpret_cast<float*>(weight_gather + reduction);
  const bool raw_planes = !ElementOperands<E>::kFloat && p.flat_raw_planes && p.vector_input;
  uint16_t* raw = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(bias + p.out_block) + 15) & ~uintptr_t(15));
  const FlatSchedule<Mainloop::kStepK> schedule{taps, reduction, p.k_padded / Mainloop::kStepK};
  const int64_t tiles = p.blocks;

  int64_t linear = blockIdx.x;
  TileCoords tc = tile_coords<false>(s, p, linear);
  for (int k = threadIdx.x; k < p.k_padded; k += kBlockThreads) {
    int offset = -1;  // padding: reads as 0
    if (k < reduction) {
      const int c = k / taps, tap = k - c * taps;
      const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
      offset = c * p.halo_plane + r * s.dilation_h * p.halo_cols + q * s.dilation_w;
      weight_gather[k] = int(c * ops.weight_stride[1] + r * ops.weight_stride[2] +
                             q * ops.weight_stride[3]);
    }
    k_offset[k] = offset;
  }
  const auto* bias_in = ElementOperands<E>::bias(ops);
  for (int k = threadIdx.x; k < p.out_block; k += kBlockThreads) {
    const int channel = tc.channel0 + k;
    bias[k] = (bias_in != nullptr && channel < s.out_channels)
                  ? E::to_float(bias_in[channel * ops.bias_stride])
                  : 0.f;
  }
  __syncthreads();  // gather table ready

  // Copy groups, oldest first: {weights, plane 0}, plane 1, ..., plane C-1 of the first tile;
  // then, during each tile, the next tile's planes in the order they are released.
  const auto* weight_in = ElementOperands<E>::weight(ops);
  if constexpr (ElementOperands<E>::kFloat) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int k = warp; k < p.out_block; k += kBlockThreads / 32) {
      const bool k_valid = tc.channel0 + k < s.out_channels;
      const auto* src = weight_in + int64_t(tc.channel0 + k) * ops.weight_stride[0];
      if constexpr (Mainloop::kWgmma) {  // [e / 4][channel][4]
        for (int e = lane; e < p.k_padded; e += 32) {
          const bool valid = k_valid && e < reduction;
          cp_async_4(weights + Mainloop::weight_index(k, e),
                     valid ? src + weight_gather[e] : weight_in, valid);
        }
        continue;
      }
      Raw* dst = weights + k * p.weight_row;
      for (int e = lane; e < p.k_padded; e += 32) {
        const bool valid = k_valid && e < reduction;
        cp_async_4(dst + flat_weight_slot(e), valid ? src + weight_gather[e] : weight_in, valid);
      }
    }
    for (int c = 0; c < s.in_channels; ++c) {
      stage_flat_plane<kBlockThreads, E>(ops, s, p, tc, c, halo + c * p.halo_plane);
      cp_async_commit();
    }
  } else {
    // 16 bits: the first tile's planes go raw first (when they can), so that they arrive while
    // the threads gather the weights, 8 loads in flight per thread (0 is +0 in both types).
    if (raw_planes) {
      for (int c = 0; c < s.in_channels; ++c)
        copy_raw_plane<kBlockThreads>(ops, s, p, tc, c, raw + c * p.halo_plane);
      cp_async_commit();
    }
    constexpr int kBatch = 8;
    const int weight_elements = p.out_block * p.k_padded;
    for (int i0 = threadIdx.x; i0 < weight_elements; i0 += kBatch * kBlockThreads) {
      Raw v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kBlockThreads, k = i / p.k_padded, e = i - k * p.k_padded;
        const bool valid = i < weight_elements && tc.channel0 + k < s.out_channels &&
                           e < reduction;
        v[u] = valid ? __ldg(weight_in + int64_t(tc.channel0 + k) * ops.weight_stride[0] +
                             weight_gather[e])
                     : Raw(0);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kBlockThreads, k = i / p.k_padded, e = i - k * p.k_padded;
        if (i < weight_elements) {
          if constexpr (Mainloop::kWgmma) {
            weights[Mainloop::weight_index(k, e)] = v[u];
          } else {
            weights[k * p.weight_row + flat_weight_slot(e)] = v[u];
          }
        }
      }
    }
    if (raw_planes) {
      cp_async_wait<0>();
      __syncthreads();
      for (int c = 0; c < s.in_channels; ++c)
        convert_raw_plane<kBlockThreads, E>(p, raw + c * p.halo_plane, halo + c * p.halo_plane);
      __syncthreads();  // before the first tile overwrites the raw planes
    } else {
      for (int c = 0; c < s.in_channels; ++c)
        stage_flat_plane<kBlockThreads, E>(ops, s, p, tc, c, halo + c * p.halo_plane);
    }
  }

  const int64_t stride = p.flat_persistent ? gridDim.x : tiles;
  for (; linear < tiles; linear += stride) {
    const int64_t next_linear = linear + stride;
    const bool has_next = next_linear < tiles;
    const TileCoords next = tile_coords<false>(s, p, has_next ? next_linear : linear);
    int released = 0;  // planes of the next tile issued so far
    const int col_shift = flat_col_shift(p, tc);
    if (raw_planes && has_next) {  // the raw buffer was last read before the epilogue's barrier
      for (int c = 0; c < s.in_channels; ++c)
        copy_raw_plane<kBlockThreads>(ops, s, p, next, c, raw + c * p.halo_plane);
      cp_async_commit();
    }
    Mainloop mainloop;
    for (int c = 0; c < s.in_channels; ++c) {
      // Planes > c of this tile and the `released` ones of the next may still be in flight
      // (none with raw planes: this tile's were converted by the threads).
      if (!raw_planes) cp_async_wait_at_most(s.in_channels - 1 - c + released);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      // The weights (copied with plane 0 of the block's first tile) are read by the tensor
      // cores: this thread's copies become visible to the async proxy before the barrier.
      if constexpr (Mainloop::kWgmma) fence_proxy_async();
#endif
      __syncthreads();
      const int begin = schedule.group_begin(c);
      const int end = c + 1 < s.in_channels ? schedule.group_begin(c + 1) : schedule.steps;
      if (c + 1 < s.in_channels || reduction % Mainloop::kStepK == 0) {
        mainloop.template compute_steps<false, E>(halo, weights, k_offset, s, p, col_shift,
                                                   begin, end);
      } else {  // the last group ends with the padded step
        mainloop.template compute_steps<false, E>(halo, weights, k_offset, s, p, col_shift,
                                                   begin, end - 1);
        mainloop.template compute_steps<true, E>(halo, weights, k_offset, s, p, col_shift,
                                                  end - 1, end);
      }
      if (has_next && released < s.in_channels && schedule.last_group(released) <= c) {
        if (raw_planes) cp_async_wait<0>();  // the raw copies, issued when this tile began
        __syncthreads();  // every warp is done with the planes released here
        while (released < s.in_channels && schedule.last_group(released) <= c) {
          float* plane = halo + released * p.halo_plane;
          if (raw_planes) {
            convert_raw_plane<kBlockThreads, E>(p, raw + released * p.halo_plane, plane);
          } else {
            stage_flat_plane<kBlockThreads, E>(ops, s, p, next, released, plane);
            cp_async_commit();
          }
          ++released;
        }
      }
    }
    if (!p.flat_persistent) __syncthreads();  // the epilogue tile reuses the halo
    mainloop.store(tile, bias);
    __syncthreads();
    pool_and_store<kBlockThreads, E>(ops, s, p, tc, tile);
    tc = next;
  }
  cp_async_wait<0>();
}

}  // namespace conv_pool_mma
