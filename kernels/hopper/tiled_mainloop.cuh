// The 3 x 3 / 2 x 2 Hopper kernel's mainloop pieces: the weight packing, the halo loads of a
// step (StepLoader), the shared-memory descriptors and wgmmas of a chunk, and the 3xTF32
// variant's runs (its accumulators flushed to master slots every kFlushChunks chunks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../conv_pool_device.cuh"
#include "../conv_pool_wgmma.cuh"
#include "tiled_operands.cuh"

namespace tiled_wgmma {

// ---------------------------------------------------------------------------
// Loading one chunk: global -> registers (load), registers -> shared (store).

// Weights -> workspace, once per launch. Work item = (channel block, chunk, channel slice, out
// channel): one weight row's slice channels x 9 taps (36 fp32 or 72 16-bit values) in, one
// 16-byte vector per tap out; consecutive threads write consecutive vectors.
template <class Tile>
__device__ __forceinline__ void pack_weights(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const WgmmaPlan& p) {
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  constexpr int kN = Tile::kN;
  constexpr int kSliceChannels = Operands::kSliceChannels;
  constexpr int kRowElements = kSliceChannels * 9;  // 36 fp32 or 72 16-bit: 144 bytes
  const int items = p.channel_blocks * p.chunks * 2 * kN;
  for (int item = blockIdx.x * kThreads + threadIdx.x; item < items; item += gridDim.x * kThreads) {
    const int n = item % kN;
    const int slice = (item / kN) % 2;
    const int block_chunk = item / (2 * kN);  // channel block * chunks + chunk
    const int chunk = block_chunk % p.chunks;
    const int k = (block_chunk / p.chunks) * kN + n;
    const int c = chunk * Operands::kChunk + kSliceChannels * slice;
    const int valid_channels =
        k < s.out_channels ? std::min(std::max(s.in_channels - c, 0), kSliceChannels) : 0;
    // Element i * 9 + tap (channel c + i under tap) of the row, in memory order, as 36 words.
    uint32_t row[36];
    if (p.vector_weights) {
      // Contiguous (K, C, 3, 3) with C * 9 a multiple of kSliceChannels, so C is one too: the
      // row's values start 16-byte aligned and are all valid or all past the last channel.
      const uint4* src = reinterpret_cast<const uint4*>(Operands::weight(ops) +
                                                        (int64_t(k) * s.in_channels + c) * 9);
#pragma unroll
      for (int v = 0; v < 9; ++v) {
        const uint4 u = valid_channels > 0 ? __ldg(src + v) : make_uint4(0u, 0u, 0u, 0u);
        row[4 * v] = u.x;
        row[4 * v + 1] = u.y;
        row[4 * v + 2] = u.z;
        row[4 * v + 3] = u.w;
      }
    } else {
      const Element* src = Operands::weight(ops) + int64_t(k) * ops.weight_stride[0];
#pragma unroll
      for (int f = 0; f < kRowElements; ++f) {
        const int i = f / 9, tap = f % 9;
        Operands::put(row, f,
                      i < valid_channels
                          ? Operands::load(src + int64_t(c + i) * ops.weight_stride[1] +
                                           (tap / 3) * ops.weight_stride[2] +
                                           (tap % 3) * ops.weight_stride[3])
                          : Element(0));
      }
    }
    using Pixel = typename Operands::Pixel;
    Pixel* dst = reinterpret_cast<Pixel*>(p.packed) +
                 int64_t(block_chunk) * (Tile::kWeightChunkWords / 4);
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      if constexpr (Tile::kSplit) {  // small part at row n, big at row kN + n
        Pixel* slot = dst + (tap * 2 + slice) * Tile::kWeightN + n;
        Operands::split(Operands::weight_slice(row, tap), slot[kN], slot[0]);
      } else {
        dst[(tap * 2 + slice) * kN + n] = Operands::weight_slice(row, tap);
      }
    }
  }
}

// The input halo of one chunk, one unit per thread: the slice's channels x 4 pixels, loaded
// as one row vector per channel and stored as 4 pixels, or (kPixelVectors: channels-last
// input) loaded and stored as 4 pixels.
template <class Operands, bool kPixelVectors>
struct HaloUnit {
  typename Operands::RowVector channel[Operands::kSliceChannels];
};
template <class Operands>
struct HaloUnit<Operands, true> {
  typename Operands::Pixel pixel[4];
};

// Where one step's loads come from, for this thread, advanced one step at a time: pointer
// increments inside a tile, the tile's geometry (integer divisions) only when a tile starts.
// kPixelVectors: the kernel instance for p.halo_load == kHaloPixelVectors, which has no other
// load (a runtime branch to it in the one kernel made the N = 64 instance spill at its
// 128-register cap).
template <class Tile, bool kPixelVectors>
struct StepLoader {
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  int unit;            // this thread's halo unit, or -1: threads past the units load weights
                       // only
  int halo_offset;     // the unit's first pixel's 16-byte slot in a stage
  int tile, chunk;     // the step being loaded
  int h, w0;           // input row and first column of the unit
  int channel;         // input channel of the unit's first row vector or pixel vector
  const Element* halo;   // (channel, h, w0)
  const float* weights;  // the chunk's packed weights

  __device__ __forceinline__ StepLoader(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                        const WgmmaPlan& p, int first_tile) {
    const int units = !kPixelVectors && p.halo_load == kHaloPlaneVectors
                          ? 2 * p.plane_vectors
                          : Tile::kHaloUnits;
    unit = int(threadIdx.x) < units ? int(threadIdx.x) : -1;
    tile = first_tile;
    start_tile(ops, s, p);
  }

  // Split reductions: the first tile's loads start at chunk `first` (< p.chunks).
  __device__ __forceinline__ void skip_chunks(const ConvPoolOperands& ops, int first) {
    chunk = first;
    halo += int64_t(first) * Operands::kChunk * ops.x_stride[1];
    channel += first * Operands::kChunk;
    weights += int64_t(first) * Tile::kWeightChunkWords;
  }

  __device__ __forceinline__ void start_tile(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const WgmmaPlan& p) {
    chunk = 0;
    const TileOrigin o = tile_origin<Tile>(s, p, tile);
    const int u = max(unit, 0);  // threads without a unit compute unit 0's (unused) geometry
    int slice, halo_row, halo_col;
    int64_t image = o.image;
    if (!kPixelVectors && p.halo_load == kHaloPlaneVectors) {
      // Unit = (slice, 4 consecutive pixels of the plane); the first at input (h, w0). Every
      // pixel of the image has a halo slot (plane_vectors_apply).
      slice = u / p.plane_vectors;
      const int pixel = 4 * (u - slice * p.plane_vectors);
      h = pixel / s.in_width;
      w0 = pixel - h * s.in_width;
      halo_row = h - o.in_row0;
      halo_col = w0 - o.staged_col0;
    } else {
      // Unit = (slice, halo row, 4-column vector). Pixel vectors: the slice varies fastest, so
      // that two neighbouring threads read a pixel's 8 (fp32) or 16 (16-bit) channels of the
      // chunk, 32 contiguous bytes, together.
      int rest;
      if (kPixelVectors) {
        slice = u % 2;
        rest = u / 2;
      } else {
        slice = u / (Tile::kHaloRows * Tile::kHaloVectors);
        rest = u - slice * (Tile::kHaloRows * Tile::kHaloVectors);
      }
      halo_row = rest / Tile::kHaloVectors;
      const int vector = rest - halo_row * Tile::kHaloVectors;
      halo_col = 4 * vector;
      h = o.in_row0 + halo_row;
      w0 = o.staged_col0 + halo_col;
      if (Tile::kStrip && vector >= o.first_vectors) {
        // The strip's second piece, or past both: a row outside every image (zeros, no load)
        // in halo columns that no square reads.
        const int next_vector = vector - o.first_vectors;
        image = o.next_image;
        h = next_vector < o.next_vectors ? o.next_in_row0 + halo_row : -1;
        w0 = o.next_staged_col0 + 4 * next_vector;
      }
    }
    halo_offset = (slice * Tile::kHaloRows + halo_row) * Tile::kHaloPitch + halo_col;
    channel = Operands::kSliceChannels * slice;
    halo = Operands::input(ops) + image * ops.x_stride[0] + int64_t(channel) * ops.x_stride[1] +
           int64_t(h) * ops.x_stride[2] + int64_t(w0) * ops.x_stride[3];
    weights = p.packed + int64_t(o.channel0 / Tile::kN) * p.chunks * Tile::kWeightChunkWords;
  }

  __device__ __forceinline__ void advance(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                          const WgmmaPlan& p) {
    if (++chunk < p.chunks) {
      halo += Operands::kChunk * ops.x_stride[1];
      channel += Operands::kChunk;
      weights += Tile::kWeightChunkWords;
    } else {
      tile += gridDim.x;
      start_tile(ops, s, p);
    }
  }

  // The chunk's packed weights (one contiguous block) -> the stage: one bulk copy, issued by
  // thread 0; `landed` completes its phase when the bytes are in shared memory.
  __device__ __forceinline__ void copy_weights(unsigned char* stage, uint64_t* landed) const {
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(landed, Tile::kWeightChunkBytes);
      bulk_copy_to_shared(stage + Tile::kHaloBytes, weights, Tile::kWeightChunkBytes, landed);
    }
  }

  __device__ __forceinline__ void load_halo(HaloUnit<Operands, kPixelVectors>& staged,
                                            const ConvPoolOperands& ops, const ConvPoolShape& s,
                                            const WgmmaPlan& p) const {
    if (unit < 0) return;
    const bool row_valid = h >= 0 && h < s.in_height;
    if constexpr (kPixelVectors) {
      // The slice's channels are all below in_channels or all past them (pixel_vectors_apply).
      const bool valid = row_valid && channel < s.in_channels;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool inside = valid && w0 + j >= 0 && w0 + j < s.in_width;
        staged.pixel[j] = inside ? Operands::load_pixel(halo + j * ops.x_stride[3])
                                 : Operands::zero_pixel();
      }
    } else if (!Tile::kScalarHalo || p.halo_load != kHaloScalars) {
      // Row vectors: width % 4 == 0 and w0 % 4 == 0, so the vector is wholly inside the row or
      // outside. Plane vectors: (h, w0) is inside the image. (No scalars in this instance:
      // launch() does not run it on them.)
      const bool valid = row_valid && w0 >= 0 && w0 < s.in_width;
#pragma unroll
      for (int e = 0; e < Operands::kSliceChannels; ++e)
        staged.channel[e] = (valid && channel + e < s.in_channels)
                                ? Operands::load_row(halo + e * ops.x_stride[1])
                                : Operands::zero_row();
    } else {
#pragma unroll
      for (int e = 0; e < Operands::kSliceChannels; ++e) {
        const bool valid = row_valid && channel + e < s.in_channels;
        Element v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool inside = valid && w0 + j >= 0 && w0 + j < s.in_width;
          v[j] = inside ? Operands::load(halo + e * ops.x_stride[1] + j * ops.x_stride[3])
                        : Element(0);
        }
        staged.channel[e] = Operands::make_row(v);
      }
    }
  }

  // (Stores the previous step's loads: the unit's slots and, for plane vectors, where its
  // pixels wrap are the same for every tile, so the loader's state at the next step serves.)
  __device__ __forceinline__ void store_halo_unit(const HaloUnit<Operands, kPixelVectors>& staged,
                                                  unsigned char* stage, const ConvPoolShape& s,
                                                  const WgmmaPlan& p) const {
    if (unit < 0) return;
    typename Operands::Pixel* dst =
        reinterpret_cast<typename Operands::Pixel*>(stage) + halo_offset;
    // 3xTF32: the big parts, and the small ones one halo copy on.
    constexpr int kSmall = Tile::kHaloCopyBytes / kSliceBytes;
    if constexpr (kPixelVectors) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (Tile::kSplit) {
          Operands::split(staged.pixel[j], dst[j], dst[kSmall + j]);
        } else {
          dst[j] = staged.pixel[j];
        }
      }
    } else {
      // Computed here rather than kept through the main loop: two registers fewer there.
      const PixelWrap wrap = p.halo_load == kHaloPlaneVectors
                                 ? PixelWrap{s.in_width - w0, Tile::kHaloPitch - s.in_width}
                                 : PixelWrap{4, 0};
      if constexpr (Tile::kSplit) {
        typename Operands::RowVector big[Operands::kSliceChannels],
            small[Operands::kSliceChannels];
#pragma unroll
        for (int e = 0; e < Operands::kSliceChannels; ++e)
          Operands::split(staged.channel[e], big[e], small[e]);
        Operands::store_pixels(big, dst, wrap);
        Operands::store_pixels(small, dst + kSmall, wrap);
      } else {
        Operands::store_pixels(staged.channel, dst, wrap);
      }
    }
  }
};

// The shared-memory descriptors of one chunk's tap (0, 0) operands: a tap only adds a
// constant to their start address fields (16-byte units; the sum stays inside shared memory,
// so the field cannot overflow).
struct ChunkDescriptors {
  uint64_t a0[2];  // this warpgroup's two 8 x 8 pixel squares
  uint64_t b0;     // the chunk's weights
};

// square_base[m]: shared address of square m's tap (0, 0) operand in stage 0; stage: the
// stage's byte offset.
template <class Tile>
__device__ __forceinline__ ChunkDescriptors chunk_descriptors(const uint32_t (&square_base)[2],
                                                              uint32_t weights_base,
                                                              uint32_t stage) {
  ChunkDescriptors d;
  d.b0 = matrix_descriptor(weights_base + stage, Tile::kWeightN * kSliceBytes, 8 * kSliceBytes);
#pragma unroll
  for (int m = 0; m < 2; ++m)
    d.a0[m] = matrix_descriptor(square_base[m] + stage, Tile::kSlicePlaneBytes,
                                Tile::kHaloPitch * kSliceBytes);
  return d;
}

// The wgmmas of taps [kFirstTap, kEndTap) of one chunk for this warpgroup: one per tap and
// 8 x 8 pixel square (3xTF32: two, the big halo times the small and big weights side by side,
// then the small halo times the big weights). The first chunk of a tile starts the
// accumulators from zero.
template <class Tile, int kFirstTap, int kEndTap>
__device__ __forceinline__ void mma_taps(float (&acc)[2][Tile::kAccRegs],
                                         const ChunkDescriptors& d, bool first_chunk) {
#pragma unroll
  for (int tap = kFirstTap; tap < kEndTap; ++tap) {
    const int r = tap / 3, q = tap % 3;
    const uint64_t b = d.b0 + uint64_t(tap * Tile::kWeightTapBytes / kSliceBytes);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint64_t a = d.a0[m] + uint64_t(r * Tile::kHaloPitch + q);
      Tile::Operands::mma(acc[m], a, b, !(first_chunk && tap == 0));
      if constexpr (Tile::kSplit)
        Tile::Operands::mma_cross(acc[m], a + uint64_t(Tile::kHaloCopyBytes / kSliceBytes),
                                  b + uint64_t(Tile::kN), true);
    }
  }
}

// 3xTF32 runs. The tensor cores add each wgmma's products into the fp32 accumulators with an
// error that scales with the running sum, so a tile's error grew with its chunks
// (docs/PERF.md). Every kFlushChunks chunks (576 taps: the default problem's whole reduction
// is one run) the warpgroup waits for its wgmmas, adds the two accumulator halves of the run and moves
// them to this block's master slots (a store for the tile's first run, a reduction at L2 for
// the others: no round trip; red.global.add.f32 flushes subnormal sums to zero, an error below
// 2^-126 a run), and the next chunk's wgmmas start the accumulators from zero;
// the tile's last run then adds the slots back (add_master). The slots follow the packed
// weights in the workspace when a tile has more than kFlushChunks chunks (master_bytes), for
// at most kMasterBlocks blocks (Hopper GPUs have up to 132 SMs; the launch caps its grid
// there); slot i (16 bytes) of this thread is
// master[(blockIdx.x * kMasterSlots + i) * kThreads + threadIdx.x], coalesced per warp.
constexpr int kFlushChunks = 8;
constexpr int kMasterBlocks = 256;
template <class Tile>
constexpr int kMasterSlots = 2 * Tile::kAccs / 4;

template <class Tile>
__device__ __forceinline__ float4* master_slots(const WgmmaPlan& p) {
  float4* master = reinterpret_cast<float4*>(
      p.packed + int64_t(p.channel_blocks) * p.chunks * Tile::kWeightChunkWords);
  return master + int64_t(blockIdx.x) * kMasterSlots<Tile> * kThreads + threadIdx.x;
}

template <class Tile>
__device__ __forceinline__ void flush_run(const float (&acc)[2][Tile::kAccRegs], float4* slots,
                                          bool first_run) {
  constexpr int kGroups = Tile::kAccs / 4, kHalf = Tile::kAccs;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float* a = acc[m] + 4 * g;
      const float4 v = make_float4(a[0] + a[kHalf], a[1] + a[kHalf + 1], a[2] + a[kHalf + 2],
                                   a[3] + a[kHalf + 3]);
      float4* slot = slots + (m * kGroups + g) * kThreads;
      if (first_run)
        store_relaxed(slot, v);
      else
        red_add(slot, v);
    }
}

// The tile's earlier runs (flush_run) into its folded accumulators (the first kAccs).
template <class Tile>
__device__ __forceinline__ void add_master(float (&acc)[2][Tile::kAccRegs], const float4* slots) {
  constexpr int kGroups = Tile::kAccs / 4;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float4 v = load_relaxed(slots + (m * kGroups + g) * kThreads);
      acc[m][4 * g] += v.x;
      acc[m][4 * g + 1] += v.y;
      acc[m][4 * g + 2] += v.z;
      acc[m][4 * g + 3] += v.w;
    }
}

}  // namespace tiled_wgmma
