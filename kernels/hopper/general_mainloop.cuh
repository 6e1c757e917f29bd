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
#include <type_traits>

#include "../conv_pool_16bit.cuh"
#include "../conv_pool_device.cuh"
#include "../conv_pool_wgmma.cuh"
#include "general_plan.h"

namespace general_wgmma {

// What the float32 (TF32) and the 16-bit kernels do differently: E's conversions
// (conv_pool_16bit.cuh), its channels per 16-byte slice, and its wgmma (WgmmaSS,
// conv_pool_wgmma.cuh). E: Float32, Float16, BFloat16.
template <class E>
struct Element : E, WgmmaSS<E> {
  static constexpr ConvPoolElement kElement =
      std::is_same_v<E, Float32>   ? kElementFloat32
      : std::is_same_v<E, Float16> ? kElementFloat16
                                   : kElementBFloat16;
  static constexpr int kSliceChannels = slice_channels(kElement);
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
  int64_t image;             // the first of plan.images
  int channel0;
  int out_row0, out_col0;    // first pooled output
  int conv_row0, conv_col0;  // conv pixel at tile position (0, 0); < 0 in the pool padding
  int in_row0, in_col0;      // input pixel under tap (0, 0) of conv pixel (conv_row0, conv_col0)
};

template <int kTileId>
__device__ __forceinline__ TileOrigin tile_origin(const ConvPoolShape& s, const Plan& p,
                                                  int64_t tile_index) {
  TileOrigin o;
  // 32-bit arithmetic (the plan keeps tiles below 2^31; a 64-bit division is ~4x the work).
  int tile = int(tile_index);
  const int channel_block = tile % p.channel_blocks;
  tile /= p.channel_blocks;
  const int tile_col = tile % p.tiles_w;
  tile /= p.tiles_w;
  const int tile_row = tile % p.tiles_h;
  o.image = int64_t(tile / p.tiles_h) * p.images;
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

// The K-step table, written once per block by `threads` threads: K step i = t x step_chunks + c
// of a step (tap t: kernel row t / kernel_w of its group, column t % kernel_w; chunk c of its
// run) -> its operand's offset, in 16-byte slots, from a square's tap-(0, 0) operand of the
// run's first chunk. column_slot(j): the slot of halo column j within a halo row (each form's
// own layout). A swizzled stage (Plan::x_swizzle) holds a pixel's W-byte group of channels as
// pixel_slots(p) slots: rows and columns scale by it, and chunk c lies in group 2c / (W / 16),
// 32 bytes on a chunk within it.
template <class ColumnSlot>
__device__ __forceinline__ void fill_kstep_table(const ConvPoolShape& s, const Plan& p,
                                                 int* table, int threads,
                                                 ColumnSlot column_slot) {
  const int pixel = pixel_slots(p);
  for (int i = threadIdx.x; i < p.group_rows * s.kernel_w * p.step_chunks; i += threads) {
    const int t = i / p.step_chunks, chunk = i - t * p.step_chunks;
    const int row = t / s.kernel_w, col = t - row * s.kernel_w;
    const int halo_row = p.gathered_rows ? 0 : row * s.dilation_h;
    table[i] = halo_row * p.row_pitch * pixel + column_slot(col * s.dilation_w) +
               (2 * chunk / pixel) * p.slice_plane * pixel + (2 * chunk) % pixel;
  }
}

// Square m of this thread's warpgroup: its tap-(0, 0) operand's slot in a stage's halo. With
// images side by side, square column c is column c % share of image c / share, whose halo
// starts image_slots slots after the previous image's (each form's own layout); a pixel is
// pixel_slots(p) slots.
template <int kTileId>
__device__ __forceinline__ void square_slots(const ConvPoolShape& s, const Plan& p,
                                             int image_slots,
                                             uint32_t (&slot)[Tile<kTileId>::kSquaresPerGroup]) {
  using T = Tile<kTileId>;
  static_assert((T::kSquareCols & (T::kSquareCols - 1)) == 0, "square columns: a power of two");
  // (Opaque to the compiler, so that a caller that rebuilds the slots at every step, to keep
  // them out of registers across the steps, gets them rebuilt and not hoisted.)
  int warpgroup = int(threadIdx.x / 128);
  asm volatile("" : "+r"(warpgroup));
  const int row_rate = p.gathered_rows ? 1 : s.stride_h;
  // images (1, 2 or 4) divides the square columns: an image's share is a power of two.
  const int share_bits = (__ffs(T::kSquareCols) - 1) - (__ffs(p.images) - 1);
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) {
    const int square = warpgroup * T::kSquaresPerGroup + m;
    const int square_col = square % T::kSquareCols;
    slot[m] = uint32_t(((square / T::kSquareCols) * 8 * row_rate * p.row_pitch +
                        (square_col & ((1 << share_bits) - 1)) * 8) *
                           pixel_slots(p) +
                       (square_col >> share_bits) * image_slots);
  }
}

// A step: its chunks, group and kernel rows, and where its halo rows start in the input.
struct Step {
  int chunk0;      // first chunk of the run (a short last run's missing chunks are zeros)
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

// The loaders spread a step's halo over all 8 warps by column groups (8 or 16 columns, one per
// lane or lane pair) and halo rows: with G >= 8 groups, warp w takes groups w, w + 8, ... and
// all their rows; with fewer, warp w takes group w % G and every k-th of its rows, k being the
// number of warps on that group. Per tile each thread works out, once, which of its columns are
// staged (a bit of `staged`: some tap reads the column), inside the image (`inside`) and of
// which of the tile's images (two bits of `image_of`); per step it walks its rows with running
// pointers, so that a copy costs a few instructions.
struct HaloWalk {
  int groups;          // column groups of the halo (at most 32)
  int first_group, group_step;
  int first_row, row_step;  // in halo rows
  uint32_t staged, inside;  // bit g: this thread's column of group g
  uint64_t image_of;        // bits 2g, 2g + 1: the image of that column, from the tile's first
  __device__ __forceinline__ void init(const ConvPoolShape& s, const Plan& p, const TileOrigin& o,
                                       int group_cols, int lane_col) {
    const int halo_cols = p.halo_cols;
    groups = (halo_cols + group_cols - 1) / group_cols;
    const int warp = threadIdx.x / 32;
    if (groups >= 8) {
      first_group = warp;
      group_step = 8;
      first_row = 0;
      row_step = 1;
    } else {
      first_group = warp % groups;
      group_step = groups;  // one group
      first_row = warp / groups;
      row_step = (8 - first_group + groups - 1) / groups;  // warps on this group
    }
    staged = inside = 0;
    image_of = 0;
    int image = 0, image_col = lane_col;  // of column j = group_cols x g + lane_col
    for (int g = 0; g < groups; ++g, image_col += group_cols) {
      const int j = group_cols * g + lane_col;
      if (j >= halo_cols) break;  // the last group's columns past the halo
      while (image_col >= p.image_span) {
        image_col -= p.image_span;
        ++image;
      }
      const int col = o.in_col0 + image_col;
      if (image_col < p.image_cols && halo_column_slot(s, p, j) >= 0) staged |= 1u << g;
      if (col >= 0 && col < s.in_width && o.image + image < s.batch) inside |= 1u << g;
      image_of |= uint64_t(image) << (2 * g);
    }
  }
  // Source elements from column group g's pointer to its image's (images side by side:
  // image_step = the image stride less image_span columns).
  __device__ __forceinline__ int64_t image_offset(int g, int64_t image_step) const {
    return int64_t((image_of >> (2 * g)) & 3u) * image_step;
  }
};

// The slot of each halo column within a halo row (halo_column_slot; -1: no tap reads it), in
// shared memory for the loaders, written once per block.
__device__ __forceinline__ void fill_column_slots(const ConvPoolShape& s, const Plan& p,
                                                  int* col_slot) {
  for (int j = threadIdx.x; j < kMaxHaloCols; j += kThreads)
    col_slot[j] = j < p.halo_cols ? halo_column_slot(s, p, j) : -1;
}

// Loads a step's halo with one 4-byte cp.async per element (kPlanarInput, float32 inputs of any
// strides). A warp copies 4 channels (lane % 4) x 8 consecutive columns (lane / 4) of one halo
// row at a time: 4 x 32 bytes read, 8 consecutive 16-byte slots written.
template <int kTileId>
struct PlanarHaloLoader {
  HaloWalk walk;
  const float* base;  // x at (image, channel lane % 4, row 0, this thread's column of group 0)
  int64_t image_step;
  int channel_in_slice, lane_col;

  __device__ __forceinline__ void init(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o) {
    const int lane = threadIdx.x % 32;
    channel_in_slice = lane % 4;
    lane_col = lane / 4;
    walk.init(s, p, o, 8, lane_col);
    image_step = ops.x_stride[0] - int64_t(p.image_span) * ops.x_stride[3];
    base = ops.x + o.image * ops.x_stride[0] + int64_t(channel_in_slice) * ops.x_stride[1] +
           int64_t(o.in_col0 + lane_col) * ops.x_stride[3];
  }

  __device__ __forceinline__ void load(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const Step& st,
                                       const int* col_slot, unsigned char* halo) const {
    const int slices = 2 * p.step_chunks;
    const int first_channel = st.chunk0 * 8 + channel_in_slice;
    // Slices whose channel of this thread exists: [0, present) (the rest, a short last run's
    // missing chunks among them, are zeros).
    const int present =
        first_channel >= s.in_channels ? 0 : (s.in_channels - first_channel + 3) / 4;
    const int64_t slice_stride = 4 * ops.x_stride[1];
    const int slice_bytes = p.slice_plane * kSliceBytes;
    const int halo_rows = st.halo_rows, height = s.in_height, row_pitch = p.row_pitch;
    const int input_row_step = walk.row_step * st.row_step;
    const int64_t src_row_step = int64_t(input_row_step) * ops.x_stride[2];
    const int dst_row_step = walk.row_step * row_pitch * kSliceBytes;
    const float* zero_source = ops.x;
    const float* step_base = base + int64_t(st.chunk0) * 8 * ops.x_stride[1];
    const uint32_t halo_base = shared_address(halo) + channel_in_slice * 4;
    for (int g = walk.first_group; g < walk.groups; g += walk.group_step) {
      if (!((walk.staged >> g) & 1u)) continue;
      const bool column_inside = (walk.inside >> g) & 1u;
      int row = st.row_first + walk.first_row * st.row_step;
      const float* src = step_base + int64_t(row) * ops.x_stride[2] +
                         int64_t(8 * g) * ops.x_stride[3] + walk.image_offset(g, image_step);
      uint32_t dst = halo_base +
                     (walk.first_row * row_pitch + col_slot[8 * g + lane_col]) * kSliceBytes;
      for (int r = walk.first_row; r < halo_rows; r += walk.row_step) {
        const bool row_inside = column_inside && unsigned(row) < unsigned(height);
        const float* slice_src = src;
        uint32_t slice_dst = dst;
        for (int slice = 0; slice < slices; ++slice) {
          const bool valid = row_inside && slice < present;
          cp_async_4_shared(slice_dst, valid ? slice_src : zero_source, valid);
          slice_src += slice_stride;
          slice_dst += slice_bytes;
        }
        row += input_row_step;
        src += src_row_step;
        dst += dst_row_step;
      }
    }
  }
};

// Loads a step's halo with one 16-byte cp.async per pixel slice (kPixelInput: channels
// contiguous, in x itself or in the launch's NHWC copy). A warp copies one slice (lane % 2) of
// 16 consecutive columns (lane / 2) of one halo row at a time: 16 pixels' 32 bytes.
template <class E, int kTileId>
struct PixelHaloLoader {
  using Raw = typename E::Raw;
  HaloWalk walk;
  const Raw* base;  // the source at (image, row 0, this thread's column of group 0, its slice)
  int64_t row_stride, group_stride, image_step;
  int channels;     // channels present in the source (in_channels, or the copy's padded count)
  int slice, lane_col;

  __device__ __forceinline__ void init(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const TileOrigin& o) {
    const int lane = threadIdx.x % 32;
    slice = lane % 2;
    lane_col = lane / 2;
    walk.init(s, p, o, 16, lane_col);
    const Raw* image;
    int64_t col_stride, image_stride;
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
      image_stride = ops.x_stride[0];
      image = ElementOperands<E>::x(ops) + o.image * image_stride;
    }
    group_stride = 16 * col_stride;
    image_step = image_stride - int64_t(p.image_span) * col_stride;
    base = image + int64_t(o.in_col0 + lane_col) * col_stride + slice * E::kSliceChannels;
  }

  __device__ __forceinline__ void load(const ConvPoolShape& s, const Plan& p,
                                       const ConvPoolOperands& ops, const Step& st,
                                       const int* col_slot, unsigned char* halo) const {
    constexpr int kChunk = 2 * E::kSliceChannels;
    const int first_channel = st.chunk0 * kChunk + slice * E::kSliceChannels;
    // Chunks of the run whose slice of this thread exists (whole slices: the source's channels
    // are a multiple of them).
    const int present =
        first_channel >= channels ? 0 : (channels - first_channel + kChunk - 1) / kChunk;
    const int chunks = p.step_chunks;
    const int chunk_bytes = 2 * p.slice_plane * kSliceBytes;
    const int halo_rows = st.halo_rows, height = s.in_height, row_pitch = p.row_pitch;
    const int input_row_step = walk.row_step * st.row_step;
    const int64_t src_row_step = input_row_step * row_stride;
    const int dst_row_step = walk.row_step * row_pitch * kSliceBytes;
    const Raw* zero_source = base;
    const Raw* step_base = base + int64_t(st.chunk0) * kChunk;
    const uint32_t halo_base = shared_address(halo) + slice * p.slice_plane * kSliceBytes;
    for (int g = walk.first_group; g < walk.groups; g += walk.group_step) {
      if (!((walk.staged >> g) & 1u)) continue;
      const bool column_inside = (walk.inside >> g) & 1u;
      int row = st.row_first + walk.first_row * st.row_step;
      const Raw* src = step_base + int64_t(row) * row_stride + g * group_stride +
                       walk.image_offset(g, image_step);
      uint32_t dst = halo_base +
                     (walk.first_row * row_pitch + col_slot[16 * g + lane_col]) * kSliceBytes;
      for (int r = walk.first_row; r < halo_rows; r += walk.row_step) {
        const bool row_inside = column_inside && unsigned(row) < unsigned(height);
        const Raw* chunk_src = src;
        uint32_t chunk_dst = dst;
        for (int chunk = 0; chunk < chunks; ++chunk) {
          const bool valid = row_inside && chunk < present;
          cp_async_16_shared(chunk_dst, valid ? chunk_src : zero_source, valid);
          chunk_src += kChunk;
          chunk_dst += chunk_bytes;
        }
        row += input_row_step;
        src += src_row_step;
        dst += dst_row_step;
      }
    }
  }
};

// Where a step's weights lie in the packed layout, [channel block][chunk run][tap][chunk][slice]
// [n][16 bytes] (a short last run padded with zero chunks; a narrow last block, packed_rows,
// tail_n rows a slice; kParts = weight_parts(p) parts a chunk, [chunk][part][slice][n][16
// bytes]): one contiguous span of bytes.
struct WeightSpan {
  int64_t offset;
  uint32_t bytes;
};

// kMayNarrow: the plan may narrow its last block (the warp-specialized kernel's; the other
// never reads tail_n).
template <int kTileId, bool kMayNarrow = false, int kParts = 1>
__device__ __forceinline__ WeightSpan step_weight_span(const ConvPoolShape& s, const Plan& p,
                                                       const TileOrigin& o, const Step& st) {
  static_assert(kParts == 1 || !kMayNarrow, "two parts a chunk: the cp.async kernel's");
  constexpr int kN = Tile<kTileId>::kN;
  const int64_t run_bytes = int64_t(s.taps()) * p.step_chunks * 2 * kN * kSliceBytes * kParts;
  WeightSpan span;
  if constexpr (kMayNarrow) {
    // A narrow last block after the full ones, its runs and taps `rows` rows a slice.
    const int rows = packed_rows(p, o.channel0 / kN, kN);
    if (rows < kN) {
      const int64_t tap_bytes = int64_t(p.step_chunks) * 2 * rows * kSliceBytes;
      span.offset = int64_t(o.channel0 / kN) * p.chunk_steps * run_bytes +
                    (int64_t(st.chunk0 / p.step_chunks) * s.taps() +
                     int64_t(st.kernel_row0) * s.kernel_w) * tap_bytes;
      span.bytes = uint32_t(st.kernel_rows * s.kernel_w * tap_bytes);
      return span;
    }
  }
  const int64_t block = int64_t(o.channel0 / kN) * p.chunk_steps + st.chunk0 / p.step_chunks;
  span.offset = block * run_bytes + int64_t(st.kernel_row0) * s.kernel_w * p.step_chunks * 2 *
                                       kN * kSliceBytes * kParts;
  span.bytes =
      uint32_t(st.kernel_rows * s.kernel_w * p.step_chunks * 2 * kN * kSliceBytes * kParts);
  return span;
}

// A step's weights: one bulk copy of the step's span into the stage, completing `landed`.
// Thread 0 only. kParts: weight_parts(p).
template <int kTileId, int kParts = 1>
__device__ __forceinline__ void copy_step_weights(const ConvPoolShape& s, const Plan& p,
                                                  const TileOrigin& o, const Step& st,
                                                  unsigned char* weights, uint64_t* landed) {
  const WeightSpan span = step_weight_span<kTileId, false, kParts>(s, p, o, st);
  mbarrier_arrive_expect_tx(landed, span.bytes);
  bulk_copy_to_shared(weights, static_cast<const unsigned char*>(p.packed) + span.offset,
                      span.bytes, landed);
}

// The wgmmas of one step for this warpgroup, committed as (at least) one group: one per K
// step (tap, chunk) and square. a0[m]:
// descriptor of square m's tap-(0, 0) operand of the step's first chunk in this stage; b0: the
// stage's weights, [tap][chunk][slice][n][16 bytes], so K step i = tap x step_chunks + chunk
// is 2 i n slots on; the K-step table holds each one's offset (16-byte units) from a square's
// descriptor (its tap's halo row and column slot, 2 chunk slice planes). kWidth: the wgmmas'
// N, the tile's n or (Plan::tail_n) fewer: the first kWidth channels of the weights into the
// first kWidth / 2 accumulators of each square; b_rows: the staged weights' rows a slice (n, or
// a packed narrow block's tail_n), so K step i is 2 i b_rows slots on.
//
// A step of a whole run of chunks issues its K steps from a sequence unrolled for that count
// (kStaticKSteps): the wgmmas then follow one another with no instruction between them that
// ptxas must fence, so they queue up on the tensor cores. A loop over run-time counts makes
// ptxas close a wgmma group and fence at every iteration (H200: a 3 x 3 layer's steps ran at a
// third of the tensor cores' rate that way); the loop stays for the rest (a short last run of
// chunks, counts outside the list GENERAL_WGMMA_STATIC_KSTEPS).
template <int kWidth, int kAccs>
__device__ __forceinline__ float (&first_accumulators(float (&acc)[kAccs]))[kWidth / 2] {
  static_assert(kWidth / 2 <= kAccs, "a narrow wgmma writes a prefix of the accumulators");
  return *reinterpret_cast<float(*)[kWidth / 2]>(&acc);
}

template <class E, int kTileId, int kWidth, int kKSteps>
__device__ __forceinline__ void mma_ksteps(
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs],
    const uint64_t (&a0)[Tile<kTileId>::kSquaresPerGroup], uint64_t b0, int b_rows,
    const int* kstep_offset, bool first_step) {
  using T = Tile<kTileId>;
#pragma unroll
  for (int i = 0; i < kKSteps; ++i) {
    const uint64_t a_offset = uint64_t(kstep_offset[i]);
    const uint64_t b = b0 + uint64_t(2 * i * b_rows);
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
      E::mma(first_accumulators<kWidth>(acc[m]), a0[m] + a_offset, b, i > 0 || !first_step);
  }
  wgmma_commit();
}

template <class E, int kTileId, int kWidth>
__device__ __forceinline__ void mma_step(float (&acc)[Tile<kTileId>::kSquaresPerGroup]
                                                     [Tile<kTileId>::kAccs],
                                         const uint64_t (&a0)[Tile<kTileId>::kSquaresPerGroup],
                                         uint64_t b0, int b_rows, const int* kstep_offset,
                                         int taps, int step_chunks, bool first_step) {
  using T = Tile<kTileId>;
  const int ksteps = taps * step_chunks;
  switch (ksteps) {
#define GENERAL_WGMMA_CASE(K)                                                         \
  case K:                                                                             \
    mma_ksteps<E, kTileId, kWidth, K>(acc, a0, b0, b_rows, kstep_offset, first_step); \
    return;
    GENERAL_WGMMA_STATIC_KSTEPS(GENERAL_WGMMA_CASE)
#undef GENERAL_WGMMA_CASE
    default:
      break;
  }
  for (int i = 0; i < ksteps; ++i) {
    const uint64_t b = b0 + uint64_t(2 * i * b_rows);
    const bool accumulate = !(first_step && i == 0);
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
      E::mma(first_accumulators<kWidth>(acc[m]), a0[m] + uint64_t(kstep_offset[i]), b,
             accumulate);
  }
  wgmma_commit();
}

// A step's wgmmas for this warpgroup, from the stage at shared address `halo`: each square's
// operand descriptor (square_slot: its tap-(0, 0) slot; a_leading / a_stride: the slice plane
// and the conv-row stride in bytes; a_layout: the stage's swizzle, swizzle_layout), the
// weights after the halo, the step's taps (its group of kernel rows), then mma_step at the
// wgmma width `width` (the tile's n, or its narrow_width: Plan::tail_n); fenced before
// and committed after (at least two groups: see mma_step). accumulate_first = false starts the
// sums afresh.
template <class E, int kTileId>
__device__ __forceinline__ void issue_step(
    const ConvPoolShape& s, const Plan& p,
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], uint32_t halo,
    const uint32_t (&square_slot)[Tile<kTileId>::kSquaresPerGroup], uint32_t a_leading,
    uint32_t a_stride, uint64_t a_layout, const int* kstep_table, int step, bool first_step,
    int width = Tile<kTileId>::kN) {
  using T = Tile<kTileId>;
  const int group = step % p.groups;
  const int taps = min(p.group_rows, s.kernel_h - group * p.group_rows) * s.kernel_w;
  uint64_t a0[T::kSquaresPerGroup];
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m)
    a0[m] = matrix_descriptor(halo + square_slot[m] * kSliceBytes, a_leading, a_stride,
                              a_layout);
  const uint64_t b0 = matrix_descriptor(halo + uint32_t(p.halo_bytes), T::kN * kSliceBytes,
                                        8 * kSliceBytes);
  wgmma_fence();
  constexpr int kNarrow = narrow_width(T::kN);
  if (width == kNarrow) {
    const int rows = packed_rows(p, p.channel_blocks - 1, T::kN);  // (the narrow block's)
    const uint64_t narrow_b0 = matrix_descriptor(halo + uint32_t(p.halo_bytes),
                                                 uint32_t(rows * kSliceBytes), 8 * kSliceBytes);
    mma_step<E, kTileId, kNarrow>(acc, a0, narrow_b0, rows, kstep_table, taps, p.step_chunks,
                                  first_step);
  } else {
    mma_step<E, kTileId, T::kN>(acc, a0, b0, T::kN, kstep_table, taps, p.step_chunks,
                                first_step);
  }
  wgmma_commit();
}

// The registers form of 3xTF32 (Plan::split_registers). A K step's A fragment of one square
// for this thread, split into big and small parts (split_tf32_operand): rows 16 w + g and
// 16 w + g + 8 of the square's 64 x 8 operand, columns t and t + 4 (conv_pool_wgmma.cuh's TF32
// layout; w: the warp in the warpgroup, g = lane / 4, t = lane % 4). Row 8 r + c is the
// square's conv row r, pixel c: the operand's core matrices, 8 pixels' 16-byte slots a_stride
// bytes apart along the rows and a_leading (the slice plane) along K, the same ones the SS
// form's descriptors name. `a`: the fragment's first float (row 16 w + g, column t); stride
// and leading: a_stride and a_leading in floats.
struct SplitFragment {
  uint32_t big[4], small[4];
  __device__ __forceinline__ void load(const float* a, int stride, int leading) {
    const float v[4] = {a[0], a[stride], a[leading], a[stride + leading]};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float b, sm;
      split_tf32_operand(v[j], b, sm);
      big[j] = __float_as_uint(b);
      small[j] = __float_as_uint(sm);
    }
  }
};

// One K step's wgmmas for this warpgroup's squares, one group: per square big x big w, small
// x big w, big x small w (b_big, b_small: the K step's two parts of the weights), the products
// and order of the staged form's three chunks; fresh: the first starts the sums afresh.
template <int kTileId>
__device__ __forceinline__ void mma_split_kstep(
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs],
    const SplitFragment (&f)[Tile<kTileId>::kSquaresPerGroup], uint64_t b_big,
    uint64_t b_small, bool fresh) {
  using T = Tile<kTileId>;
  wgmma_fence();  // the fragments just written, and acc read since the last step
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) wgmma_tf32_rs_n64(acc[m], f[m].big, b_big, !fresh);
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) wgmma_tf32_rs_n64(acc[m], f[m].small, b_big, true);
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) wgmma_tf32_rs_n64(acc[m], f[m].big, b_small, true);
  wgmma_commit();
}

// A step's wgmmas in the registers form, from the stage at `stage` (generic address: the
// fragments are plain shared-memory loads) and shared address `halo` (the same bytes, for the
// weights' descriptors); square_slot, a_leading, a_stride and the K-step table as issue_step's.
// The weights of K step i are parts 2 i (big) and 2 i + 1 (small), [tap][chunk][part][slice]
// [n][16 bytes]. Each K step is one group: its fragments are loaded and split while the
// previous group's wgmmas run, and two sets of fragment registers take turns, each loaded again
// only after a wgmma_wait<1> has seen its last group complete (wgmma reads A from the
// registers until then). A loop over the K steps, not unrolled sequences as issue_step's: each
// K step is a group of its own anyway, and ptxas serialized every wgmma of the unrolled
// sequences (C7511, short of registers for the pipeline). Starts the step's sums afresh;
// returns with its last group pending and one empty group after it (the caller's wait<2>
// then counts as after issue_step).
template <int kTileId>
__device__ __forceinline__ void issue_split_step(
    const ConvPoolShape& s, const Plan& p,
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], const float* stage,
    uint32_t halo, const uint32_t (&square_slot)[Tile<kTileId>::kSquaresPerGroup],
    uint32_t a_leading, uint32_t a_stride, const int* kstep_table, int step) {
  using T = Tile<kTileId>;
  const int group = step % p.groups;
  const int ksteps = min(p.group_rows, s.kernel_h - group * p.group_rows) * s.kernel_w *
                     p.step_chunks;
  const int stride = int(a_stride / 4), leading = int(a_leading / 4);
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  // This thread's row 16 w + g, column t: conv row 2 w of the square, pixel g, channel t.
  const int lane_offset = 2 * warp * stride + 4 * (lane / 4) + lane % 4;
  int a_base[T::kSquaresPerGroup];
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) a_base[m] = 4 * int(square_slot[m]) + lane_offset;
  const uint64_t b0 = matrix_descriptor(halo + uint32_t(p.halo_bytes), T::kN * kSliceBytes,
                                        8 * kSliceBytes);
  SplitFragment f[2][T::kSquaresPerGroup];
  auto kstep = [&](int i, SplitFragment(&set)[T::kSquaresPerGroup]) {
    const int offset = 4 * kstep_table[i];  // 16-byte slots to floats
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
      set[m].load(stage + a_base[m] + offset, stride, leading);
    mma_split_kstep<kTileId>(acc, set, b0 + uint64_t(4 * i * T::kN),
                             b0 + uint64_t((4 * i + 2) * T::kN), i == 0);
  };
  for (int i = 0; i < ksteps; i += 2) {
    kstep(i, f[0]);
    if (i + 1 == ksteps) break;
    wgmma_wait<1>();
    kstep(i + 1, f[1]);
    if (i + 2 < ksteps) wgmma_wait<1>();
  }
  wgmma_commit();
}

}  // namespace general_wgmma
