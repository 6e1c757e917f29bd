// The general Hopper kernel's mainloop pieces: what each element type multiplies with, how a
// step's halo and weights reach shared memory, and the wgmmas of one step.
//
// Both operands are read by the tensor cores from shared memory through matrix descriptors
// (no swizzle, K-major: 16-byte channel slices, a core matrix 8 pixels or 8 output channels
// of one slice). A tap (r, q) of square (i, j) starts at halo row 8 i x row_rate + r x
// dilation_h (row_rate: stride_h for a dense span of rows, 1 for gathered rows) and at the
// slot of column phase (q x dilation_w) % stride_w, position 8 j + (q x dilation_w) /
// stride_w: a per-tap constant (the tap table) added to the square's descriptor. The 8 conv
// rows of a square are the descriptor's stride (row_rate halo rows), its two slices the leading
// offset (one slice plane). No im2col copy, for any kernel size, stride and dilation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../conv_pool_16bit.cuh"
#include "../conv_pool_device.cuh"
#include "../conv_pool_wgmma.cuh"
#include "general_plan.h"

namespace general_wgmma {

// What the float32 (TF32) and the 16-bit kernels do differently. E: Float32, Float16,
// BFloat16 (conv_pool_16bit.cuh).
template <class E>
struct Element;

template <>
struct Element<Float32> : Float32 {
  static constexpr ConvPoolElement kElement = kElementFloat32;
  static constexpr int kSliceChannels = 4;
  // m64nNk8, TF32 operands (the tensor cores read an fp32 word's top 19 bits).
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "1, 1");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "1, 1");
#endif
  }
};

template <>
struct Element<Float16> : Float16 {
  static constexpr ConvPoolElement kElement = kElementFloat16;
  static constexpr int kSliceChannels = 8;
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "1, 1, 0, 0");
#endif
  }
};

template <>
struct Element<BFloat16> : BFloat16 {
  static constexpr ConvPoolElement kElement = kElementBFloat16;
  static constexpr int kSliceChannels = 8;
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "1, 1, 0, 0");
#endif
  }
};

// Compile-time view of a TileSpec.
template <int kTileId>
struct Tile {
  static constexpr TileSpec kSpec = kTileSpecs[kTileId];
  static constexpr int kSquareRows = kSpec.square_rows, kSquareCols = kSpec.square_cols;
  static constexpr int kRows = 8 * kSquareRows, kCols = 8 * kSquareCols;  // conv pixels
  static constexpr int kN = kSpec.n;
  static constexpr int kMinBlocks = kSpec.min_blocks;
  static constexpr int kSquares = kSquareRows * kSquareCols;
  static constexpr int kSquaresPerGroup = kSquares / 2;  // per warpgroup
  static constexpr int kAccs = kN / 2;  // accumulators per thread per square
  static_assert(kSquares % 2 == 0, "two warpgroups share the squares");
};

// Where the block's tile sits (the tile scheduler: one tile per block, channel block fastest so
// that the blocks sharing an input halo run side by side).
struct TileOrigin {
  int64_t image;
  int channel0;
  int out_row0, out_col0;    // first pooled output
  int conv_row0, conv_col0;  // conv pixel at tile position (0, 0); < 0 in the pool padding
  int in_row0, in_col0;      // input pixel under tap (0, 0) of conv pixel (conv_row0, conv_col0)
};

template <int kTileId>
__device__ __forceinline__ TileOrigin tile_origin(const ConvPoolShape& s, const Plan& p,
                                                  int64_t tile) {
  TileOrigin o;
  const int channel_block = int(tile % p.channel_blocks);
  tile /= p.channel_blocks;
  const int tile_col = int(tile % p.tiles_w);
  tile /= p.tiles_w;
  const int tile_row = int(tile % p.tiles_h);
  o.image = tile / p.tiles_h;
  o.channel0 = channel_block * Tile<kTileId>::kN;
  o.out_row0 = tile_row * p.pooled_rows;
  o.out_col0 = tile_col * p.pooled_cols;
  o.conv_row0 = s.window_row0(o.out_row0);
  o.conv_col0 = s.window_col0(o.out_col0);
  o.in_row0 = s.input_row0(o.conv_row0);
  o.in_col0 = s.input_col0(o.conv_col0);
  return o;
}

// The slot of halo column j within a halo row (column phase j % stride_w, position j /
// stride_w); -1 for a phase no tap reads.
__device__ __forceinline__ int halo_column_slot(const ConvPoolShape& s, const Plan& p, int j) {
  const int phase = j % s.stride_w;
  if (!((p.phase_mask >> phase) & 1u)) return -1;
  const int staged_before = __popc(p.phase_mask & ((1u << phase) - 1u));
  return staged_before * p.phase_cols + j / s.stride_w;
}

// A step: its chunks, group and kernel rows, and where its halo rows start in the input.
struct Step {
  int chunk0, chunks;             // first chunk, chunks present (the last step may have fewer)
  int group, kernel_row0, kernel_rows;
  int halo_rows;   // rows staged
  int row_first;   // input row of halo row 0
  int row_step;    // input rows between halo rows (1, or stride_h when gathered)
};

__device__ __forceinline__ Step make_step(const ConvPoolShape& s, const Plan& p,
                                          const TileOrigin& o, int step) {
  Step st;
  const int chunk_step = step / p.groups;
  st.group = step - chunk_step * p.groups;
  st.chunk0 = chunk_step * p.step_chunks;
  st.chunks = min(p.step_chunks, p.chunks - st.chunk0);
  st.kernel_row0 = st.group * p.group_rows;
  st.kernel_rows = min(p.group_rows, s.kernel_h - st.kernel_row0);
  st.row_first = o.in_row0 + st.kernel_row0 * s.dilation_h;
  if (p.gathered_rows) {
    st.halo_rows = p.halo_rows;  // one per conv row of the tile
    st.row_step = s.stride_h;
  } else {
    st.halo_rows = (p.halo_rows - (p.group_rows - 1) * s.dilation_h) +
                   (st.kernel_rows - 1) * s.dilation_h;
    st.row_step = 1;
  }
  return st;
}

// Loads a step's halo with one 4-byte cp.async per element (kPlanarInput, float32 inputs of any
// strides). Lane l of a warp takes channel l % 4 of a slice and halo column 8 g + l / 4 of the
// warp's column groups g = warp, warp + 8, ...: a warp's copies read 4 channels x 8 consecutive
// columns (4 sectors) and write 8 consecutive 16-byte slots. The per-column work (slot, input
// offset, bounds) is done once per tile.
template <int kTileId>
struct PlanarHaloLoader {
  static constexpr int kColGroups = kMaxHaloCols / 64;  // per warp
  int slot[kColGroups];       // halo-row slot of this thread's column, -1: none
  int64_t col_offset[kColGroups];
  bool col_inside[kColGroups];
  int channel_in_slice;

  __device__ __forceinline__ void init(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    channel_in_slice = lane % 4;
#pragma unroll
    for (int g = 0; g < kColGroups; ++g) {
      const int j = (warp + 8 * g) * 8 + lane / 4;
      slot[g] = j < p.halo_cols ? halo_column_slot(s, p, j) : -1;
      const int col = o.in_col0 + j;
      col_inside[g] = col >= 0 && col < s.in_width;
      col_offset[g] = int64_t(col) * ops.x_stride[3];
    }
  }

  __device__ __forceinline__ void load(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o,
                                       const Step& st, unsigned char* halo) const {
    const float* image = ops.x + o.image * ops.x_stride[0];
#pragma unroll
    for (int g = 0; g < kColGroups; ++g) {
      if (slot[g] < 0) continue;
      for (int slice = 0; slice < 2 * st.chunks; ++slice) {
        const int channel = st.chunk0 * 8 + slice * 4 + channel_in_slice;
        const bool channel_inside = channel < s.in_channels && col_inside[g];
        const float* src = image + int64_t(channel_inside ? channel : 0) * ops.x_stride[1] +
                           (channel_inside ? col_offset[g] : 0);
        float* dst = reinterpret_cast<float*>(halo) +
                     (slice * p.slice_plane + slot[g]) * 4 + channel_in_slice;
        int row = st.row_first;
        for (int r = 0; r < st.halo_rows; ++r, row += st.row_step, dst += p.row_pitch * 4) {
          const bool inside = channel_inside && row >= 0 && row < s.in_height;
          cp_async_4(dst, inside ? src + int64_t(row) * ops.x_stride[2] : ops.x, inside);
        }
      }
    }
  }
};

// Loads a step's halo with one 16-byte cp.async per pixel slice (kPixelInput: channels
// contiguous, in x itself or in the launch's NHWC copy). Lane l takes slice l % 2 of halo
// column 16 g + l / 2 of the warp's column groups g = warp, warp + 8: a warp reads 16 pixels'
// 32 bytes each.
template <class E, int kTileId>
struct PixelHaloLoader {
  using Raw = typename E::Raw;
  static constexpr int kColGroups = kMaxHaloCols / 128;
  int slot[kColGroups];
  int64_t col_offset[kColGroups];
  bool col_inside[kColGroups];
  int slice;
  const Raw* image;
  int64_t row_stride;
  int channels;  // channels present in the source (in_channels, or the copy's padded count)

  __device__ __forceinline__ void init(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    slice = lane % 2;
    int64_t image_stride, col_stride;
    if (p.staged_copy) {
      channels = p.staged_channels;
      col_stride = p.staged_channels;
      row_stride = col_stride * s.in_width;
      image_stride = row_stride * s.in_height;
      image = static_cast<const Raw*>(p.staged_input) + o.image * image_stride;
    } else {
      channels = s.in_channels;
      col_stride = ops.x_stride[3];
      row_stride = ops.x_stride[2];
      image = ElementOperands<E>::x(ops) + o.image * ops.x_stride[0];
    }
#pragma unroll
    for (int g = 0; g < kColGroups; ++g) {
      const int j = (warp + 8 * g) * 16 + lane / 2;
      slot[g] = j < p.halo_cols ? halo_column_slot(s, p, j) : -1;
      const int col = o.in_col0 + j;
      col_inside[g] = col >= 0 && col < s.in_width;
      col_offset[g] = int64_t(col) * col_stride;
    }
  }

  __device__ __forceinline__ void load(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o,
                                       const Step& st, unsigned char* halo) const {
    for (int chunk = 0; chunk < st.chunks; ++chunk) {
      const int staged_slice = 2 * chunk + slice;
      const int channel = (2 * st.chunk0 + staged_slice) * E::kSliceChannels;
      const bool channel_inside = channel < channels;
#pragma unroll
      for (int g = 0; g < kColGroups; ++g) {
        if (slot[g] < 0) continue;
        const bool column_inside = channel_inside && col_inside[g];
        const Raw* src = image + (column_inside ? col_offset[g] + channel : 0);
        unsigned char* dst = halo + (staged_slice * p.slice_plane + slot[g]) * kSliceBytes;
        int row = st.row_first;
        for (int r = 0; r < st.halo_rows; ++r, row += st.row_step) {
          const bool inside = column_inside && row >= 0 && row < s.in_height;
          cp_async_16(reinterpret_cast<float*>(dst + r * p.row_pitch * kSliceBytes),
                      reinterpret_cast<const float*>(inside ? src + int64_t(row) * row_stride
                                                            : image),
                      inside);
        }
      }
    }
  }
};

// A step's weights: per (tap, chunk, slice) one bulk copy of n x 16 bytes from the packed
// layout [chunk][tap][slice][padded_out_channels][16 bytes] into [tap][chunk][slice][n][16
// bytes], issued by warp 0 and completing `landed`. (No __syncwarp between the expect and the
// copies: the transaction count may run below zero before the arrival, and a syncwarp in this
// branch made ptxas serialise the wgmmas.)
template <int kTileId>
__device__ __forceinline__ void copy_step_weights(const ConvPoolShape& s, const Plan& p,
                                                  const TileOrigin& o, const Step& st,
                                                  unsigned char* weights, uint64_t* landed) {
  constexpr int kN = Tile<kTileId>::kN;
  constexpr uint32_t kCopyBytes = kN * kSliceBytes;
  const int lane = threadIdx.x % 32;
  const int per_tap = 2 * st.chunks;
  const int copies = per_tap * st.kernel_rows * s.kernel_w;
  if (lane == 0) mbarrier_arrive_expect_tx(landed, uint32_t(copies) * kCopyBytes);
  const int tap0 = st.kernel_row0 * s.kernel_w;
  const unsigned char* packed = static_cast<const unsigned char*>(p.packed);
  for (int i = lane; i < copies; i += 32) {
    const int tap = i / per_tap, within = i - tap * per_tap;  // within = 2 chunk + slice
    const int64_t row =
        (int64_t(st.chunk0 + within / 2) * s.taps() + tap0 + tap) * 2 + within % 2;
    bulk_copy_to_shared(weights + (tap * 2 * p.step_chunks + within) * kCopyBytes,
                        packed + (row * p.padded_out_channels + o.channel0) * kSliceBytes,
                        kCopyBytes, landed);
  }
}

// The wgmmas of one step for this warpgroup: one per K step (tap, chunk) and square. a0[m]:
// descriptor of square m's tap-(0, 0) operand of the step's first chunk in this stage; b0: the
// stage's weights, [tap][chunk][slice][n][16 bytes], so K step i = tap x step_chunks + chunk
// is 2 i n slots on; the K-step table holds each one's offset (16-byte units) from a square's
// descriptor (its tap's halo row and column slot, 2 chunk slice planes).
//
// A step of a whole run of chunks issues its K steps from a sequence unrolled for that count
// (kStaticKSteps): the wgmmas then follow one another with no instruction between them that
// ptxas must fence, so they queue up on the tensor cores. A loop over run-time counts makes
// ptxas close a wgmma group and fence at every iteration (H200: a 3 x 3 layer's steps ran at a
// third of the tensor cores' rate that way); the loop stays for the rest (a short last run of
// chunks, counts outside the list GENERAL_WGMMA_STATIC_KSTEPS).
template <class E, int kTileId, int kKSteps>
__device__ __forceinline__ void mma_ksteps(
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs],
    const uint64_t (&a0)[Tile<kTileId>::kSquaresPerGroup], uint64_t b0, const int* kstep_offset,
    bool first_step) {
  using T = Tile<kTileId>;
#pragma unroll
  for (int i = 0; i < kKSteps; ++i) {
    const uint64_t a_offset = uint64_t(kstep_offset[i]);
    const uint64_t b = b0 + uint64_t(2 * i * T::kN);
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
      E::mma(acc[m], a0[m] + a_offset, b, i > 0 || !first_step);
  }
}

template <class E, int kTileId>
__device__ __forceinline__ void mma_step(float (&acc)[Tile<kTileId>::kSquaresPerGroup]
                                                     [Tile<kTileId>::kAccs],
                                         const uint64_t (&a0)[Tile<kTileId>::kSquaresPerGroup],
                                         uint64_t b0, const int* kstep_offset, int taps,
                                         int chunks, int step_chunks, bool first_step) {
  using T = Tile<kTileId>;
  if (chunks == step_chunks) {
    switch (taps * step_chunks) {
#define GENERAL_WGMMA_CASE(K)                                                   \
  case K:                                                                       \
    mma_ksteps<E, kTileId, K>(acc, a0, b0, kstep_offset, first_step);           \
    return;
      GENERAL_WGMMA_STATIC_KSTEPS(GENERAL_WGMMA_CASE)
#undef GENERAL_WGMMA_CASE
      default:
        break;
    }
  }
  for (int t = 0; t < taps; ++t)
    for (int c = 0; c < chunks; ++c) {
      const int i = t * step_chunks + c;
      const uint64_t b = b0 + uint64_t(2 * i * T::kN);
      const bool accumulate = !(first_step && t == 0 && c == 0);
#pragma unroll
      for (int m = 0; m < T::kSquaresPerGroup; ++m)
        E::mma(acc[m], a0[m] + uint64_t(kstep_offset[i]), b, accumulate);
    }
}

}  // namespace general_wgmma
