// The general Hopper kernel: fused Conv2d -> ReLU -> MaxPool2d for any convolution (kernel
// size, stride, dilation, padding, channel counts) and any max-pool (window, stride, padding,
// ceil mode) on wgmma (sm_90a), float32 in TF32 or float16 / bfloat16, fp32 accumulation.
//
// One block (two warpgroups) per tile (general_plan.h: a rectangle of pooled outputs of one
// image and n output channels; the tile scheduler is tile_origin). Its reduction runs over
// steps = (run of input-channel chunks, group of kernel rows), three shared-memory stages deep:
//   * loads: the step's input halo by cp.async from every thread (PlanarHaloLoader or
//     PixelHaloLoader), its weights by bulk copies from warp 0 completing the stage's
//     mbarrier (copy_step_weights), issued two steps ahead;
//   * math: per tap one wgmma per 8 x 8 pixel square, both operands from shared memory
//     (mma_step), so the weights stream through the stages and no kernel size runs out of
//     shared memory;
//   * epilogue: the accumulators through shared memory to bias, ReLU, max-pool and the store
//     (general_epilogue.cuh), the pipeline's bytes reused.
// Per step one barrier: each warpgroup issues the step's wgmmas, waits for its wgmmas of the
// previous step (this step's stay in flight) and for its own copies of the next step's halo,
// fences them to the tensor cores' proxy, then the barrier frees the previous step's stage for
// the loads two steps ahead, which are issued while the tensor cores work through this step.
// A step's wgmmas take one of several unrolled sequences (mma_step), each closed by a commit of
// its own, and one commit after the paths meet (an empty group): wait_group 2 then leaves
// exactly this step's groups pending, whichever path ran (ptxas may close more groups of its
// own inside a path, which only adds groups of this step).
// Split reductions (plan.split > 1, layers of fewer tiles than the SMs hold): `split` blocks
// share a tile, each a run of its steps; each writes its partial sums to the workspace, and the
// last to arrive (a counter per tile) adds all of them, in split order (the same sum whichever
// block is last), and runs the epilogue (reduce_split).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "general_epilogue.cuh"
#include "general_mainloop.cuh"

namespace general_wgmma {

template <class E, int kTileId, int kInput>
struct HaloLoaderFor {
  using Type = PixelHaloLoader<Element<E>, kTileId>;
};
template <int kTileId>
struct HaloLoaderFor<Float32, kTileId, kPlanarInput> {
  using Type = PlanarHaloLoader<kTileId>;
};

// Split reductions: this block's partial sums to its slot of the workspace, [tile][rank]
// [float4 of the accumulators][thread] (a warp's stores contiguous); true for the tile's last
// block, whose `acc` then holds the sum of every block's partials in rank order. `flag`: one
// word of shared memory. kBarrier: the hardware barrier of the kThreads threads that run it (0:
// the whole block's, __syncthreads).
template <int kTileId, int kBarrier = 0>
__device__ __forceinline__ bool reduce_split(
    float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], const Plan& p,
    int64_t tile, int rank, void* flag) {
  using T = Tile<kTileId>;
  constexpr int kVectors = T::kSquaresPerGroup * T::kAccs / 4;  // float4 per thread
  float4* partials = static_cast<float4*>(const_cast<void*>(p.partials)) +
                     tile * p.split * kVectors * kThreads + threadIdx.x;
  float4* mine = partials + int64_t(rank) * kVectors * kThreads;
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
    for (int i = 0; i < T::kAccs / 4; ++i)
      __stcg(mine + (m * (T::kAccs / 4) + i) * kThreads,
             make_float4(acc[m][4 * i], acc[m][4 * i + 1], acc[m][4 * i + 2], acc[m][4 * i + 3]));
  auto sync = [] {
    if constexpr (kBarrier == 0)
      __syncthreads();
    else
      named_barrier_sync(kBarrier, kThreads);
  };
  __threadfence();  // the partials reach L2 before the count says so
  sync();
  int* last = static_cast<int*>(flag);
  if (threadIdx.x == 0) {
    int* counter = static_cast<int*>(const_cast<void*>(p.counters)) + tile;
    *last = atomicAdd(counter, 1) == p.split - 1;
  }
  sync();
  if (!*last) return false;
  __threadfence();  // every block's partials are visible to this one's loads
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
    for (int i = 0; i < T::kAccs / 4; ++i) {
      const float4 v = __ldcg(partials + (m * (T::kAccs / 4) + i) * kThreads);
      acc[m][4 * i] = v.x;
      acc[m][4 * i + 1] = v.y;
      acc[m][4 * i + 2] = v.z;
      acc[m][4 * i + 3] = v.w;
    }
  for (int r = 1; r < p.split; ++r) {
    const float4* theirs = partials + int64_t(r) * kVectors * kThreads;
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
      for (int i = 0; i < T::kAccs / 4; ++i) {
        const float4 v = __ldcg(theirs + (m * (T::kAccs / 4) + i) * kThreads);
        acc[m][4 * i] += v.x;
        acc[m][4 * i + 1] += v.y;
        acc[m][4 * i + 2] += v.z;
        acc[m][4 * i + 3] += v.w;
      }
  }
  return true;
}

// The kernel's math forms (its kSplit): TF32 or 16 bits; 3xTF32 from the staged split copy
// (Plan::split_operands; kInput = kPixelInput); 3xTF32 split in the registers
// (Plan::split_registers; x read as TF32 reads it).
enum SplitForm : int { kUnsplit = 0, kSplitStaged = 1, kSplitRegisters = 2 };

template <class E, int kTileId, int kInput, int kSplit = kUnsplit>
__global__ void __launch_bounds__(kThreads, kSplit != kUnsplit ? 1 : Tile<kTileId>::kMinBlocks)
    general_conv_pool_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const Plan p) {
  static_assert(kSplit == kUnsplit ||
                    (std::is_same_v<E, Float32> && Tile<kTileId>::kN == 64 &&
                     Tile<kTileId>::kSquaresPerGroup == 2 &&
                     (kSplit == kSplitRegisters || kInput == kPixelInput)),
                "3xTF32: float32, N = 64 tiles of two squares a warpgroup; the staged form "
                "reads its copy as pixel slices");
  constexpr int kWeightParts = kSplit == kSplitRegisters ? 2 : 1;  // weight_parts(p)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<kTileId>;
  using X = Element<E>;  // the element type's operations
  extern __shared__ __align__(128) unsigned char smem[];
  float* bias = reinterpret_cast<float*>(smem + p.bias_offset);
  int* kstep_table = reinterpret_cast<int*>(smem + p.kstep_table_offset);
  int* col_slot = reinterpret_cast<int*>(smem + p.col_slot_offset);
  uint64_t* landed = reinterpret_cast<uint64_t*>(smem + p.barrier_offset);

  int64_t tile = blockIdx.x;
  int first_step = 0, end_step = p.steps, rank = 0;
  if (p.split > 1) {
    tile = blockIdx.x / p.split;
    rank = int(blockIdx.x - tile * p.split);
    first_step = rank * p.split_steps;
    end_step = min(p.steps, first_step + p.split_steps);
  }
  const TileOrigin o = tile_origin<kTileId>(s, p, tile);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) mbarrier_init(landed + stage, 1);
    fence_mbarrier_init();
  }
  load_bias<X, kTileId>(s, ops, o, bias);
  fill_kstep_table(s, p, kstep_table, kThreads,
                   [&](int j) { return halo_column_slot(s, p, j); });

  fill_column_slots(s, p, col_slot);

  typename HaloLoaderFor<E, kTileId, kInput>::Type loader;
  loader.init(s, p, ops, o);
  auto stage_base = [&](int stage) { return smem + stage * p.stage_bytes; };
  auto issue = [&](int step, int stage) {
    const Step st = make_step(s, p, o, step);
    loader.load(s, p, ops, st, col_slot, stage_base(stage));
    cp_async_commit();
    if (threadIdx.x == 0)
      copy_step_weights<kTileId, kWeightParts>(s, p, o, st, stage_base(stage) + p.halo_bytes,
                                               landed + stage);
  };
  __syncthreads();  // the barriers' initialisation, before the copies that complete them
  issue(first_step, 0);
  if (first_step + 1 < end_step) issue(first_step + 1, 1);

  // Each square's tap-(0, 0) slot; images side by side start image_span / stride_w slots
  // into each phase of a halo row.
  const int row_rate = p.gathered_rows ? 1 : s.stride_h;
  const uint32_t smem_base = shared_address(smem);
  uint32_t square_slot[T::kSquaresPerGroup];
  square_slots<kTileId>(s, p, p.image_span / s.stride_w, square_slot);
  const uint32_t a_leading = uint32_t(p.slice_plane * kSliceBytes);
  const uint32_t a_stride = uint32_t(row_rate * p.row_pitch * kSliceBytes);

  float acc[T::kSquaresPerGroup][T::kAccs];  // written by the first wgmma (accumulate = false)
  // 3xTF32: the steps' sums, in fp32 (each step's wgmmas start acc afresh).
  constexpr bool kSums = kSplit != kUnsplit;
  float sums[kSums ? T::kSquaresPerGroup : 1][kSums ? T::kAccs : 1];
  if constexpr (kSums) {
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
      for (int i = 0; i < T::kAccs; ++i) sums[m][i] = 0.f;
  }
  uint32_t phases = 0;  // bit `stage`: parity of the next phase of landed[stage]
  int stage = 0;
  // The first step's halo copies landed and are visible to the tensor cores.
  if (first_step + 1 < end_step)
    cp_async_wait<1>();
  else
    cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  for (int step = first_step; step < end_step; ++step) {
    // Here: every thread's halo copies of this step landed and are visible to the tensor
    // cores; its weights landed or are in flight; this warpgroup's wgmmas of step - 1 may
    // still run, all earlier ones completed.
    mbarrier_wait(landed + stage, (phases >> stage) & 1u);
    phases ^= 1u << stage;
    if constexpr (kSplit == kSplitRegisters)
      issue_split_step<kTileId>(s, p, acc, reinterpret_cast<const float*>(stage_base(stage)),
                                smem_base + uint32_t(stage * p.stage_bytes), square_slot,
                                a_leading, a_stride, kstep_table, step);
    else
      issue_step<X, kTileId>(s, p, acc, smem_base + uint32_t(stage * p.stage_bytes),
                             square_slot, a_leading, a_stride, 0, kstep_table, step,
                             kSums || step == first_step);
    // The step's wgmmas are at least two groups, the last one empty (mma_step commits its own;
    // this commit closes nothing more): keeping two groups in flight keeps this step's running
    // and waits for every earlier one, however many groups each step's path made.
    wgmma_wait<2>();
    // Step + 1's halo copies (issued a step ago) landed.
    if (step + 1 < end_step) cp_async_wait<0>();
    fence_proxy_async();
    // Every warpgroup's wgmmas of step - 1 completed, so its stage is free, and step + 1's
    // halo is visible to the tensor cores. The loads of step + 2 run while the tensor cores
    // work through this step.
    __syncthreads();
    if (step + 2 < end_step) issue(step + 2, stage == 0 ? kStages - 1 : stage - 1);
    if constexpr (kSums) {
      // 3xTF32: the step's sum into fp32 (so this form waits for its wgmmas every step).
      wgmma_wait<0>();
#pragma unroll
      for (int m = 0; m < T::kSquaresPerGroup; ++m) {
        fence_registers(acc[m]);
#pragma unroll
        for (int i = 0; i < T::kAccs; ++i) sums[m][i] += acc[m][i];
      }
    }
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) fence_registers(acc[m]);
  if constexpr (kSums) {
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
      for (int i = 0; i < T::kAccs; ++i) acc[m][i] = sums[m][i];
  }
  __syncthreads();  // no wgmma reads the stages any more
  if (p.split > 1 && !reduce_split<kTileId>(acc, p, tile, rank, landed + kStages)) return;

  pool_accumulators<X, kTileId, false>(s, p, ops, o, acc, reinterpret_cast<float*>(smem), bias,
                                T::kN / p.epilogue_passes, [] { __syncthreads(); });
#endif
}

}  // namespace general_wgmma
