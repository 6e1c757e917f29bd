// The 3 x 3 Hopper kernel itself (conv_pool_wgmma_kernel: a persistent walk over its
// tiles' chunks, the mainloop and epilogue of tiled_mainloop.cuh and tiled_epilogue.cuh) and
// the kernel that packs weights ahead of time.
#pragma once

#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include "tiled_epilogue.cuh"

namespace tiled_wgmma {

// kPrepacked: p.packed holds the weights packed by an earlier launch (pack_weights_kernel), so
// this one neither packs nor waits at a grid barrier (and is not launched cooperatively). A
// template parameter rather than a branch: the branch rescheduled the whole kernel.
// kSplitK (with kPrepacked, N = 64, launched in clusters of p.split blocks): the blocks of a
// cluster share one tile, each computing a share of its chunks (reduce_split).
template <class Tile, bool kPixelVectors, bool kPrepacked, bool kSplitK = false>
__global__ void __launch_bounds__(kThreads, Tile::kMinBlocksPerSm)
    conv_pool_wgmma_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const WgmmaPlan p) {
  static_assert(!kSplitK || (kPrepacked && Tile::kN == 64), "split reductions: see launch()");
  // 3xTF32 runs (flush_run), not with split reductions: their blocks hold a share of the
  // chunks each, and their grid is not the one the master slots are laid out for.
  constexpr bool kFlush = Tile::kSplit && !kSplitK;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  float* pooled = reinterpret_cast<float*>(smem + Tile::kPipelineBytes);
  float* bias = reinterpret_cast<float*>(smem + Tile::kPipelineBytes + Tile::kPooledBytes);
  // weights_landed[stage]: one phase per step that stage holds, completed by its bulk copy.
  uint64_t* weights_landed = reinterpret_cast<uint64_t*>(smem + Tile::kBarrierOffset);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) mbarrier_init(weights_landed + stage, 1);
    fence_mbarrier_init();
  }

  if (!kPixelVectors && p.halo_load == kHaloPlaneVectors) {
    // Plane loads write only the image's pixels: the halo's border (the padding, the columns
    // left of the image) holds the zeros written here, in every stage, for the whole kernel.
    for (int stage = 0; stage < kStages; ++stage) {
      uint4* halo = reinterpret_cast<uint4*>(smem + stage * Tile::kStageBytes);
      for (int i = threadIdx.x; i < Tile::kHaloBytes / kSliceBytes; i += kThreads)
        halo[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  if constexpr (!kPrepacked) {
    pack_weights<Tile>(ops, s, p);
    // Every block's packed weights are written and visible to the bulk copies (a proxy fence,
    // then the grid barrier, a gpu-scope fence) before any block copies them. The barrier
    // also orders the zeros and the mbarrier initialisation above before their use below.
    fence_proxy_async_global();
    cooperative_groups::this_grid().sync();
  } else {
    __syncthreads();  // the zeros and the mbarrier initialisation above, before their use
  }

  // This block's tiles are blockIdx.x, blockIdx.x + gridDim.x, ...; its loads run over the
  // flat sequence of (tile, chunk) steps, ahead of the tensor cores and across tiles. Split
  // reductions: the cluster's tile, chunks [first_chunk, first_chunk + tile_chunks).
  int first_tile = int(blockIdx.x), my_tiles, tile_chunks = p.chunks, first_chunk = 0, rank = 0;
  if constexpr (kSplitK) {
    first_tile = cluster_index();
    rank = cluster_rank();
    const int share = (p.chunks + p.split - 1) / p.split;
    first_chunk = rank * share;
    tile_chunks = min(share, p.chunks - first_chunk);  // >= 1 (split_for)
    my_tiles = 1;
  } else {
    my_tiles = (p.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  }
  const int steps = my_tiles * tile_chunks;
  auto next_stage = [](int stage) { return stage == kStages - 1 ? 0 : stage + 1; };

  // Prologue: step 0's halo in stage 0, step 1's in registers; the weights of both in flight.
  StepLoader<Tile, kPixelVectors> loader(ops, s, p, first_tile);
  if constexpr (kSplitK) loader.skip_chunks(ops, first_chunk);
  HaloUnit<typename Tile::Operands, kPixelVectors> halo;
  loader.copy_weights(smem, weights_landed);
  loader.load_halo(halo, ops, s, p);
  loader.store_halo_unit(halo, smem, s, p);
  loader.advance(ops, s, p);
  if (steps > 1) {
    loader.copy_weights(smem + Tile::kStageBytes, weights_landed + 1);
    loader.load_halo(halo, ops, s, p);
  }
  loader.advance(ops, s, p);  // now at step 2
  fence_proxy_async();
  __syncthreads();
  uint32_t phases = 0;  // bit `stage`: parity of the next phase of weights_landed[stage]

  const uint32_t smem_base = shared_address(smem);
  const int warpgroup = threadIdx.x / 128;
  float acc[2][Tile::kAccRegs];  // written by the first wgmma of each tile (accumulate = false)
  int step = 0, stage = 0;
  for (int t = 0; t < my_tiles; ++t) {
    const TileOrigin origin = tile_origin<Tile>(s, p, first_tile + t * int(gridDim.x));
    uint32_t square_base[2];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int square = 2 * warpgroup + m;
      const int square_row = square / Tile::kSquareCols, square_col = square % Tile::kSquareCols;
      // A strip's second piece starts at halo column 4 * first_vectors.
      const int halo_col = Tile::kStrip && square >= origin.first_squares
                               ? 4 * origin.first_vectors + 8 * (square - origin.first_squares)
                               : square_col * 8;
      square_base[m] = smem_base + (square_row * 8 * Tile::kHaloPitch + halo_col +
                                    origin.col_shift) * kSliceBytes;
    }
    // The accumulators are touched only by wgmmas inside this loop (ordinary instructions
    // reading them here would make the compiler drain the tensor cores every step), but for
    // the 3xTF32 flushes, after a wait for every wgmma.
    int run = 0;           // chunks of the current run done (kFlush)
    bool flushed = false;  // a run of this tile is in the master slots
    for (int chunk = 0; chunk < tile_chunks; ++chunk, ++step) {
      // Here: `stage` holds this step's halo, visible to the tensor cores, and its weights
      // landed or in flight; the next stage has its weights in flight and its halo in `halo`;
      // the wgmmas of step - 1 may still run, all earlier ones have completed.
      const int stage1 = next_stage(stage), stage2 = next_stage(stage1);
      mbarrier_wait(weights_landed + stage, (phases >> stage) & 1u);
      phases ^= 1u << stage;
      const ChunkDescriptors descriptors = chunk_descriptors<Tile>(
          square_base, smem_base + Tile::kHaloBytes, uint32_t(stage * Tile::kStageBytes));
      const bool fresh = kFlush ? run == 0 : chunk == 0;
      wgmma_fence();
      mma_taps<Tile, 0, kSplitTap>(acc, descriptors, fresh);
      if (step + 1 < steps)
        loader.store_halo_unit(halo, smem + stage1 * Tile::kStageBytes, s, p);
      const bool refill = step + 2 < steps;
      if (refill) loader.load_halo(halo, ops, s, p);
      wgmma_fence();  // the halo code wrote registers (ptxas would insert this fence itself)
      mma_taps<Tile, kSplitTap, kTaps>(acc, descriptors, fresh);
      wgmma_commit();
      // stage2 = (step - 1) % 3 is free once every warpgroup is past step - 1.
      if constexpr (kFlush) {
        if (++run == kFlushChunks && chunk + 1 < tile_chunks) {
          run = 0;
          wgmma_wait<0>();
          fence_registers(acc[0]);
          fence_registers(acc[1]);
          flush_run<Tile>(acc, master_slots<Tile>(p), !flushed);
          flushed = true;
        } else {
          wgmma_wait<1>();
        }
      } else {
        wgmma_wait<1>();
      }
      __syncthreads();
      if (refill) loader.copy_weights(smem + stage2 * Tile::kStageBytes, weights_landed + stage2);
      // step + 1's halo stores become visible to the tensor cores. (Fencing them earlier and
      // dropping this barrier measured 5-11% slower on the H200, docs/PERF.md.)
      fence_proxy_async();
      __syncthreads();
      if (refill) loader.advance(ops, s, p);
      stage = stage1;
    }
    wgmma_wait<0>();
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    if constexpr (Tile::kSplit) {  // the cross terms + big * big, the second half
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < Tile::kAccs; ++i) acc[m][i] += acc[m][Tile::kAccs + i];
      if (kFlush && flushed) add_master<Tile>(acc, master_slots<Tile>(p));
    }
    if constexpr (kSplitK) reduce_split<Tile>(acc, smem, p.split, rank);
    // The tile's bias, one load per channel into shared memory; its latency overlaps the
    // pooling (a load per output in the store loop below cost 13-24% on the H200: the L1
    // left beside the stages is small, so those loads went to L2).
    const int bias_channel = origin.channel0 + int(threadIdx.x);
    const float tile_bias = (threadIdx.x < Tile::kN && ops.bias != nullptr &&
                             bias_channel < s.out_channels)
                                ? Tile::Operands::bias(ops, bias_channel)
                                : 0.f;
    if constexpr (Tile::kPool == 2) {
      pool_accumulators<Tile>(acc, pooled);
      if (threadIdx.x < Tile::kN) bias[threadIdx.x] = tile_bias;
      __syncthreads();
      if (p.channels_last_out)
        store_pooled_channels_last<Tile, kSplitK>(ops, s, origin, pooled, bias, p.vector_out,
                                                  p.split, rank);
      else
        store_pooled<Tile, kSplitK>(ops, s, origin, pooled, bias, p.vector_out, p.split, rank);
    } else {
      if (threadIdx.x < Tile::kN) bias[threadIdx.x] = tile_bias;
      __syncthreads();
      // (Channels-last outputs never reach the instances without kChannelsLastOut: launch().)
      if (Tile::kChannelsLastOut && p.channels_last_out)
        store_conv_channels_last<Tile, kSplitK>(ops, s, origin, acc, bias, p.split, rank);
      else
        store_conv_rows<Tile, kSplitK>(ops, s, origin, acc, pooled, bias, p.vector_out,
                                       p.split, rank);
    }
    // `pooled` and `bias` are rewritten only after the next tile's chunk barriers.
  }
  if constexpr (kSplitK) cluster_wait();  // no block of the cluster reads these stages now
#endif
}

// The weights packed ahead of time (conv_relu_maxpool_pack_weight), for launches that then
// skip the packing. Ends with the proxy fence of the in-kernel packing; the kernel boundary
// orders the rest.
template <class Tile>
__global__ void __launch_bounds__(kThreads)
    pack_weights_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const WgmmaPlan p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  pack_weights<Tile>(ops, s, p);
  fence_proxy_async_global();
#endif
}

}  // namespace tiled_wgmma
