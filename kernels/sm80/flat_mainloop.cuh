// The flat kernels' pieces on mma.sync: the flattened (channel, tap) reduction's weight slots,
// the TF32 / 3xTF32 / 16-bit tensor-core mainloop (FlatTensorCoreMainloop), the plane
// schedule, and the staging of input planes (fp32, or 16-bit copied raw and converted).
#pragma once

#include "tiled_tile.cuh"

namespace conv_pool_mma {

// Position of flattened reduction entry e in a staged flat weight row: within each step of 8,
// k, k + 4, k + 1, k + 5, ..., so that the two B values of a thread's m16n8k8 fragment
// (k + t and k + t + 4) sit side by side and move as one 8-byte (fp32) or 4-byte (16-bit)
// shared load.
__host__ __device__ __forceinline__ int flat_weight_slot(int e) {
  return (e & ~7) + 2 * (e & 3) + ((e >> 2) & 1);
}

// Flat-K tensor-core mainloop: each mma K step covers 8 consecutive (channel, tap) pairs of the
// flattened reduction, located through a per-k offset table into the staged halo planes.
// Entries past the reduction (the last step's padding) have offset -1 and read as 0.
// Warps: kWarpsM = 16 / kMTiles along the tile's 16 m-tiles of 16 pixels (m-tile
// P = warp_m * kMTiles + i is tile row P / 2, columns (P % 2) * 16 + [0, 16)), kWarpsN along
// the channels. A step loads 2 table entries, 4 gathered A values per m-tile and one B pair per
// n-tile (flat_weight_slot) for kMTiles x kNTiles mmas. The weights are staged in the operands'
// type E and converted to fp32 as the B fragments are read (exact: a 16-bit value fits TF32).
// kSplit (tiled_3xtf32_flat, float32 only): 3xTF32 as TensorCoreMainloop's, three mmas per
// fragment pair from operands split as they are read; the staging is the TF32 kernel's.
template <int kOutBlockT, int kWarpsNT, int kMTilesT, bool kSplitT = false>
struct FlatTensorCoreMainloop {
  static constexpr int kOutBlock = kOutBlockT;
  static constexpr int kWarpsN = kWarpsNT;
  static constexpr int kMTiles = kMTilesT;
  static constexpr bool kSplit = kSplitT;
  static constexpr bool kWgmma = false;
  static constexpr int kStepK = 8;  // k per reduction step (one mma.sync K)
  static constexpr int kWarpsM = conv_pool_epilogue::kTileMTiles / kMTiles;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpChannels = kOutBlock / kWarpsN;
  static constexpr int kNTiles = kWarpChannels / 8;
  // Blocks of 256 threads and at most 64 channels are built for two per SM (<= 128 registers).
  static constexpr int kMinBlocks = kOutBlock <= 64 && kThreads == 256 ? 2 : 1;
  static_assert(kWarpsM * kMTiles == conv_pool_epilogue::kTileMTiles && kNTiles * 8 * kWarpsN ==
                kOutBlock, "warp tiling");
  float acc[kMTiles][kNTiles][4];

  __device__ __forceinline__ FlatTensorCoreMainloop() {
    conv_pool_epilogue::zero_mma_accumulators(acc);
  }

  // Reduction steps [step_begin, step_end) (8 k each); kPadded: the steps may hold padding.
  template <bool kPadded, class E>
  __device__ __forceinline__ void compute_steps(const float* halo,
                                                const typename E::Raw* weights,
                                                const int* k_offset, const ConvPoolShape& s,
                                                const TilePlan& p, int col_shift, int step_begin,
                                                int step_end) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
    const int group = lane / 4, thread_in_group = lane % 4;
    int a_offset[kMTiles];
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      const int m_tile = warp_m * kMTiles + i;
      const int tile_row = m_tile / 2;
      const int tile_col = (m_tile % 2) * 16 + group;
      a_offset[i] = tile_row * s.stride_h * p.halo_cols + tile_col * s.stride_w + col_shift;
    }
    const int a_next8_pixels = 8 * s.stride_w;
    int b_offset[kNTiles];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
      b_offset[j] = (warp_n * kWarpChannels + j * 8 + group) * p.weight_row + 2 * thread_in_group;

    // Two steps per iteration, except for 64 fp32 accumulators under the 128-register cap (8
    // warps of 32 x 64), which spilled 4 bytes with two, and for 3xTF32's three fragment sets.
    constexpr int kUnroll =
        kSplit || (kMinBlocks == 2 && kMTiles * kNTiles >= 16 && ElementOperands<E>::kFloat) ? 1
                                                                                           : 2;
#pragma unroll kUnroll
    for (int k = 8 * step_begin; k < 8 * step_end; k += 8) {
      const int low = k_offset[k + thread_in_group], high = k_offset[k + thread_in_group + 4];
      uint32_t a[kMTiles][4], b[kNTiles][2];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        const float* src = halo + a_offset[i];
        if (kPadded) {
          a[i][0] = low < 0 ? 0u : __float_as_uint(src[low]);
          a[i][1] = low < 0 ? 0u : __float_as_uint(src[low + a_next8_pixels]);
          a[i][2] = high < 0 ? 0u : __float_as_uint(src[high]);
          a[i][3] = high < 0 ? 0u : __float_as_uint(src[high + a_next8_pixels]);
        } else {
          a[i][0] = __float_as_uint(src[low]);
          a[i][1] = __float_as_uint(src[low + a_next8_pixels]);
          a[i][2] = __float_as_uint(src[high]);
          a[i][3] = __float_as_uint(src[high + a_next8_pixels]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        if constexpr (ElementOperands<E>::kFloat) {
          const float2 pair = *reinterpret_cast<const float2*>(weights + b_offset[j] + k);
          b[j][0] = __float_as_uint(pair.x);
          b[j][1] = __float_as_uint(pair.y);
        } else {
          const uint32_t pair = *reinterpret_cast<const uint32_t*>(weights + b_offset[j] + k);
          b[j][0] = __float_as_uint(E::to_float(uint16_t(pair)));
          b[j][1] = __float_as_uint(E::to_float(uint16_t(pair >> 16)));
        }
      }
      if constexpr (kSplit) {
        static_assert(ElementOperands<E>::kFloat, "3xTF32 is for float32 operands");
        mma_3xtf32(acc, a, b);
      } else {
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) mma_tf32(acc[i][j], a[i], b[j]);
      }
    }
  }

  // Accumulator (pixel, channel) -> tile[channel][pixel], adding the bias.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<kMTiles, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

// cp.async.wait_group with a run-time count (the instruction takes an immediate): waits until
// at most `pending` of this thread's newest copy groups are still in flight.
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<0>(); break;  // in_channels < 8: never more than 6 pending
  }
}

// The reduction steps (kStepK k each) whose last k lies in input channel `c` ("group c"): they
// need planes <= c. A plane is read for the last time by the group of the step holding its
// last k.
template <int kStepK>
struct FlatSchedule {
  int taps, reduction, steps;
  __device__ __forceinline__ int group_begin(int c) const {  // first step of group c
    return c * taps / kStepK;  // the step holding k = c * taps
  }
  __device__ __forceinline__ int last_group(int plane) const {  // group that reads it last
    const int step = ((plane + 1) * taps - 1) / kStepK;
    return min(kStepK * step + kStepK - 1, reduction - 1) / taps;
  }
};

// Halo column of the tile's first input column: rows are staged from the 16-byte aligned
// column at or left of it when they move as 16-byte copies.
__device__ __forceinline__ int flat_col_shift(const TilePlan& p, const TileCoords& tc) {
  return p.vector_input ? ((tc.in_col0 % 4) + 4) % 4 : 0;
}

// Stages input plane `c` of tile `tc` (zeros outside the image) as fp32, one halo row per warp
// and step. float32 moves by cp.async (16 bytes when p.vector_input, else 4); 16-bit words are
// loaded (8 bytes = 4 columns when p.vector_input, else one), converted and stored here, so
// their copy groups are empty and the waits on them return at once.
template <int kBlockThreads, class E = Float32>
__device__ __forceinline__ void stage_flat_plane(const ConvPoolOperands& ops,
                                                 const ConvPoolShape& s, const TilePlan& p,
                                                 const TileCoords& tc, int c, float* plane) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int staged_col0 = tc.in_col0 - flat_col_shift(p, tc);
  // 16-bit: its own loops, so that the float32 instances keep the machine code that was timed
  // (a shared loop with the copy chosen per element type changed their unrolling).
  if constexpr (!ElementOperands<E>::kFloat) {
    const auto* src_plane =
        ElementOperands<E>::x(ops) + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
    for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
      const int h = tc.in_row0 + halo_row;
      const bool row_valid = h >= 0 && h < s.in_height;
      const auto* src_row = src_plane + int64_t(h) * ops.x_stride[2];
      float* dst_row = plane + halo_row * p.halo_cols;
      if (p.vector_input) {
        // As the float32 vectors: unit column stride, width % 4 == 0, 8-byte aligned rows.
#pragma unroll 2
        for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
          const int w = staged_col0 + col;
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (row_valid && w >= 0 && w < s.in_width) {
            v = to_float4<E>(__ldg(reinterpret_cast<const uint2*>(src_row + w)));
          }
          *reinterpret_cast<float4*>(dst_row + col) = v;
        }
        continue;
      }
#pragma unroll 4
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        dst_row[col] = valid ? E::to_float(__ldg(src_row + int64_t(w) * ops.x_stride[3])) : 0.f;
      }
    }
    return;
  }
  const float* src_plane = ops.x + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
  for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
    const int h = tc.in_row0 + halo_row;
    const bool row_valid = h >= 0 && h < s.in_height;
    const float* src_row = src_plane + int64_t(h) * ops.x_stride[2];
    float* dst_row = plane + halo_row * p.halo_cols;
    if (p.vector_input) {
      // Unit column stride, width % 4 == 0, aligned rows: a vector is wholly in or out.
      for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        cp_async_16(dst_row + col, valid ? src_row + w : ops.x, valid);
      }
    } else {
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        cp_async_4(dst_row + col, valid ? src_row + int64_t(w) * ops.x_stride[3] : ops.x, valid);
      }
    }
  }
}

// 16-bit, p.flat_raw_planes and p.vector_input: plane `c` of tile `tc` copied as it is (8-byte
// cp.async, zeros outside the image) into its raw buffer; convert_raw_plane makes it fp32 later.
template <int kBlockThreads>
__device__ __forceinline__ void copy_raw_plane(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                               const TilePlan& p, const TileCoords& tc, int c,
                                               uint16_t* raw) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int staged_col0 = tc.in_col0 - flat_col_shift(p, tc);
  const uint16_t* src_plane = ops.x16 + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
  for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
    const int h = tc.in_row0 + halo_row;
    const bool row_valid = h >= 0 && h < s.in_height;
    const uint16_t* src_row = src_plane + int64_t(h) * ops.x_stride[2];
    uint16_t* dst_row = raw + halo_row * p.halo_cols;
    for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
      const int w = staged_col0 + col;
      const bool valid = row_valid && w >= 0 && w < s.in_width;
      cp_async_8(dst_row + col, valid ? src_row + w : ops.x16, valid);
    }
  }
}

// A raw plane (halo_rows x halo_cols 16-bit words; halo_cols % 4 == 0) to fp32.
template <int kBlockThreads, class E>
__device__ __forceinline__ void convert_raw_plane(const TilePlan& p, const uint16_t* raw,
                                                  float* plane) {
  for (int i = 4 * threadIdx.x; i < p.halo_rows * p.halo_cols; i += 4 * kBlockThreads)
    *reinterpret_cast<float4*>(plane + i) = to_float4<E>(*reinterpret_cast<const uint2*>(raw + i));
}

}  // namespace conv_pool_mma
