// Fused Conv2d -> ReLU -> MaxPool2d on Hopper's asynchronous warpgroup tensor-core
// instructions (wgmma, sm_90a), fp32 accumulation. One kernel template, three variants:
//   tiled_tf32_wgmma   float32 tensors, TF32 operands (m64nNk8 .tf32);
//   tiled_16bit_wgmma  float16 / bfloat16 tensors, 16-bit operands (m64nNk16 .f16 / .bf16), the
//                      result rounded to the 16-bit type once, at the store;
//   tiled_3xtf32_wgmma float32 tensors with allow_tf32 = False: 3xTF32, each operand staged as a
//                      TF32 big part and a small part, three products per multiply-add
//                      (Tf32SplitOperands: twice the halo and the weights, N = 64 tiles),
//                      the tensor cores' sums restarted every 8 chunks (flush_run).
// What differs between them lives in an operand-traits type (Tf32Operands, HalfOperands<E>,
// Tf32SplitOperands): the element type, the channels per chunk, the weight packing, the halo
// loads, the instruction and the bias / output conversions. Everything else is shared.
//
// Covers the fast-path geometry (fast_path_applies: 3x3 / stride 1 / dilation 1 convolution with
// any padding, 2x2 / stride 2 max-pool inside the conv output) and the same convolution with no
// pool (a 1x1 / stride 1 one: conv -> ReLU; wgmma_3x3_applies); the other variants cover
// everything else.
//
// Files by role: hopper/tiled_tile.cuh (constants, the tile template, the plan),
// hopper/tiled_operands.cuh (the operand traits), hopper/tiled_mainloop.cuh (weight packing,
// halo loads, a chunk's wgmmas, 3xTF32 runs), hopper/tiled_epilogue.cuh (pooling, store, the
// split reduction), hopper/tiled_kernel.cuh (the kernels), hopper/tiled_host.cuh (the host
// side: plans, tile and split choice), hopper/tiled_launch.cuh (occupancy and launch, compiled
// one operand type a file: hopper/instances/tiled_*.cu); this file: the interface of
// conv_relu_maxpool_wgmma.h.
//
// Implicit GEMM per block tile: M = 256 conv pixels, N = 128 output channels, K = input channels
// x 9 taps, consumed in chunks of 8 (TF32) or 16 (16-bit) channels: one wgmma K per tap. Both
// operands are read by the tensor cores straight from shared memory through wgmma matrix
// descriptors (no swizzle), so the staged layouts are "K-major": the channels of a pixel or of a
// weight row side by side in 16-byte units, a "channel slice" of 4 fp32 or 8 16-bit channels.
// A chunk is two slices (the two core matrices of one wgmma's K), so the staged bytes are the
// same for both element types:
//   input halo   [channel slice 2][halo row][halo col][16 bytes], rows kHaloPitch slots apart
//                (one more than the columns where shared memory allows: no bank conflicts)
//   weights      [tap 9][channel slice 2][out channel 128][16 bytes]
// A wgmma core matrix is 8 rows x 16 bytes. For the weights the 8 rows are 8 output channels
// (contiguous). For the input they are 8 consecutive pixels of one conv row, which are 8
// consecutive 16-byte halo columns wherever the row starts; so one M = 64 operand is an 8 x 8
// pixel square (8 core matrices one halo row apart: the descriptor's stride), and a tap (r, q)
// only moves the descriptor's start address by r halo rows and q columns. No im2col copy.
//
// Loading. The weights are re-laid out once per call, at the start of the same launch: every
// block writes its share of a scratch copy in exactly the staged layout, chunk after chunk, and
// a grid-wide barrier (cooperative launch) follows (given weights packed ahead of time by
// pack_weights_kernel, the kPrepacked twin instances skip both; a large weight over few blocks
// is packed that way too, by a launch of its own on every SM: packs_apart); from then on a
// chunk's weights are one contiguous 36 KB block that thread 0 moves with one bulk copy
// (cp.async.bulk), which completes a per-stage mbarrier that every thread waits on before the
// stage's wgmmas (per-thread 16-byte cp.async copies cost 3-13% more on the H200, in
// docs/PERF.md). The input halo is transposed on the way in: each thread loads one slice's
// channels x 4 columns two steps ahead
// (TF32: 4 channels as 16-byte row loads; 16-bit: 8 channels as 8-byte row loads, so the halo's
// geometry, its thread mapping and the 16 staging registers stay those of the TF32 kernel) and
// writes them to shared memory, as 4 pixels x one slice, one step ahead. Three shared stages.
// Four ways to load those 4 columns (HaloLoad): one vector per channel when input rows split
// into aligned runs of 4; for a tile that covers whole images (VGG block 5's 14 x 14), one vector
// of 4 consecutive pixels of the contiguous image plane, which may wrap to the next row (the
// halo's border then holds zeros written once, at kernel start); for channels-last inputs, one
// 16-byte vector per pixel (a slice's channels are contiguous there: already the staged layout,
// no transpose), in kernel instances of their own; else 4 predicated scalars (16-bit inputs
// that need them on a two-blocks-per-SM tile run on its one-block twin: kScalarHalo).
//
// Block: 2 warpgroups; the tile is four 8 x 8 pixel squares (8 x 32 or 16 x 16 conv pixels, or
// a strip: four consecutive squares of the batch's rows of squares, which may go on at the
// start of the next row, staged as two pieces side by side; whichever wastes least of the
// output), two per warpgroup, each one wgmma per tap, N = 128 output channels (64 when the
// layer has no more, or when its 128-channel tiles are few: kFewTiles): 128 (64) fp32
// accumulators per thread; their layout is the same for k8 TF32 and k16 16-bit wgmmas.
// Persistent: the grid is as many blocks as fit at once and each block walks its tiles' chunks
// as one flat sequence, so the next tile's first chunks load under the current tile's last
// ones. Split reductions (kSplitK): where a layer's tiles are too few for the SMs and its
// reduction is long (VGG-16's blocks 3-5 at batch 1), a cluster of 2-8 blocks shares each
// tile, each block a share of its chunks; the partial sums meet in distributed shared memory
// before the pooling (reduce_split; the split: split_for). Epilogue per tile: wgmma
// accumulator rows are pixels, so the 2 x 2 pool is a max of two registers and one shuffle
// (lane ^ 4) into shared memory, then out coalesced (NCHW: runs of 4 outputs as one vector
// where the output rows allow, p.vector_out; channels-last: 16 bytes of consecutive channels
// a lane), with bias and ReLU applied after the max
// (and, for 16-bit outputs, the one rounding: rounding is monotonic, so the rounded maximum is
// the maximum of the rounded values). Without a pool (the tiles' kPool = 1: the same tiles,
// plans and choice on conv outputs), bias, ReLU and the store run straight from the
// accumulators (store_conv_rows, store_conv_channels_last).
#include <cuda_runtime.h>

#include <cstdint>

#include "conv_relu_maxpool_wgmma.h"
#include "hopper/tiled_host.cuh"

namespace tiled_wgmma {
namespace {

// A kernel that fills an SM (more than half its shared memory), for the cluster occupancy.
__global__ void one_block_per_sm_probe() {}

}  // namespace
}  // namespace tiled_wgmma

using namespace tiled_wgmma;

void wgmma_cluster_capacity(int (&max_clusters)[kConvPoolMaxCluster + 1]) {
  for (int& n : max_clusters) n = 0;
#if defined(CONV_POOL_WITH_WGMMA)
  int device = 0, shared = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess)
    return;
  const int bytes = shared / 2 + 1024;
  if (cudaFuncSetAttribute(one_block_per_sm_probe, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           bytes) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  for (int split = 2; split <= kConvPoolMaxCluster; ++split) {
    const ClusterLaunch probe(1, split, bytes, nullptr);
    if (cudaOccupancyMaxActiveClusters(&max_clusters[split], one_block_per_sm_probe,
                                       &probe.config) != cudaSuccess) {
      cudaGetLastError();  // not a sticky error: no split of this size
      max_clusters[split] = 0;
    }
  }
#endif
}

const char* wgmma_unavailable(const ConvPoolDevice& device) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)device;
  return "the module was built without sm_90a code (TORCH_CUDA_ARCH_LIST has no 9.0a)";
#else
  return device.compute_capability != 90 ? "wgmma needs a compute capability 9.0 GPU (Hopper)"
                                         : nullptr;
#endif
}

const char* wgmma_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device,
                                        bool split) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)s;
  (void)split;
  return wgmma_unavailable(device);
#else
  if (const char* why = wgmma_unavailable(device)) return why;
  if (!wgmma_3x3_applies(s))
    return "the wgmma kernel covers only a 3x3 / stride 1 / dilation 1 convolution followed by "
           "a 2x2 / stride 2 pool inside the conv output, or by no pool (1x1 / stride 1)";
  if (split && s.element != kElementFloat32) return "needs float32 input";
  return with_tile(s, split, [&](auto tile) -> const char* {
    using Tile = decltype(tile);
    if (Tile::kSmemBytes > device.max_shared_bytes)
      return "its pipeline does not fit in shared memory";
    const WgmmaPlan p = make_plan<Tile>(s);
    if (int64_t(p.tiles) * p.chunks >= INT32_MAX / 2)
      return "more than 2^30 (tile, channel chunk) steps";
    return nullptr;
  });
#endif
}

// Not the two-blocks-per-SM tiles nor their twins (takes_packed_weight, kOneBlockTwin); not a
// layer of few tiles, which runs N = 64 on weights packed for N = 128 (kFewTiles).
bool wgmma_takes_packed_weight(const ConvPoolShape& s) {
  const int packed_n = with_packing_tile(s, [](auto tile) { return decltype(tile)::kN; });
  return with_tile(s, [&](auto tile) {
    using Tile = decltype(tile);
    return takes_packed_weight<Tile>() && !Tile::kOneBlockTwin && Tile::kN == packed_n;
  });
}

bool wgmma_packs_weight_apart(const ConvPoolShape& s, const ConvPoolDevice& device, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    const WgmmaPlan p = make_plan<Tile>(s);
    return packs_apart<Tile>(p, device) || split_for<Tile>(p, device) > 1;
  });
}

int wgmma_split(const ConvPoolShape& s, const ConvPoolDevice& device, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    return split_for<Tile>(make_plan<Tile>(s), device);
  });
}

const char* wgmma_tile_name(const ConvPoolShape& s, bool split) {
  return with_tile(s, split, [](auto tile) -> const char* {
    using Tile = decltype(tile);
    if constexpr (Tile::kStrip) return Tile::kN == 64 ? "strip_n64" : "strip_n128";
    if constexpr (Tile::kTileRows == 16) return Tile::kN == 64 ? "square_n64" : "square_n128";
    return Tile::kN == 64 ? "wide_n64" : "wide_n128";
  });
}

int wgmma_tile_origin(const ConvPoolShape& s, int tile, int64_t* origin, bool split) {
  return with_tile(s, split, [&](auto t) {
    using Tile = decltype(t);
    const WgmmaPlan p = make_plan_with_divisors<Tile>(s);
    if (tile >= 0 && tile < p.tiles) {
      const TileOrigin o = tile_origin<Tile>(s, p, tile);
      origin[0] = o.image;
      origin[1] = o.channel0;
      origin[2] = o.out_row0;
      origin[3] = o.out_col0;
    }
    return p.tiles;
  });
}

bool wgmma_packs_weight(const ConvPoolShape& s, const ConvPoolDevice& device) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)s;
  (void)device;
  return false;
#else
  return device.compute_capability == 90 && s.kernel_h == 3 && s.kernel_w == 3;
#endif
}

int64_t wgmma_conv_pool_workspace_bytes(const ConvPoolShape& s, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    return packed_weight_bytes<Tile>(s) + master_bytes<Tile>(make_plan<Tile>(s));
  });
}

int64_t wgmma_packed_weight_bytes(const ConvPoolShape& s) {
  return with_packing_tile(s, [&](auto tile) { return packed_weight_bytes<decltype(tile)>(s); });
}

cudaError_t wgmma_pack_weight_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                     float* packed, const ConvPoolDevice& device,
                                     cudaStream_t stream) {
  return with_operands(s, [&](auto operands) {
    return pack_operands<decltype(operands)>(ops, s, packed, device, stream);
  });
}

cudaError_t wgmma_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   const ConvPoolDevice& device, cudaStream_t stream,
                                   const int64_t* out_stride, bool split) {
  // Strides: dense channels-last only (what the binding allocates).
  if (out_stride != nullptr) {
    const int64_t c = s.out_channels, w = s.out_width, h = s.out_height;
    if (out_stride[1] != 1 || out_stride[3] != c ||
        out_stride[2] != w * c || (s.batch > 1 && out_stride[0] != h * w * c))
      return cudaErrorInvalidValue;
  }
  if (split) return launch_operands<Tf32SplitOperands>(ops, s, device, stream, out_stride);
  return with_operands(s, [&](auto operands) {
    return launch_operands<decltype(operands)>(ops, s, device, stream, out_stride);
  });
}

