// The general Hopper kernel, warp-specialized (Plan::input == kTmaInput): the same tiles, steps,
// operand layout and epilogue as general_kernel.cuh, with the copies taken off the warps that
// issue the wgmmas.
//
// A block is three warpgroups:
//   * a producer (warpgroup 2; 40 registers a thread, 24 where two blocks share an SM; one
//     thread works): for each step it waits until the consumers have freed a stage
//     (empty[stage]), then has the tensor copy engine bring the step's halo, one box of all
//     the step's slices per (image, column phase) of a 5-D view of x (x_map: [image][slice]
//     [row][column][16 bytes] from the launch's slice-planar copy, or x itself where its
//     channels are contiguous), and the step's weights: one box of a 5-D view of the weight
//     itself where its channel slices are whole (Plan::weights_in_place), else one bulk copy
//     of the launch's packing; all completing full[stage] by their byte count;
//   * two consumers (warpgroups 0 and 1; 232 registers, or 104): for each step they wait for
//     full[stage], issue the step's wgmmas (mma_step), then wait for the previous step's wgmmas
//     and free that step's stage (one arrival per warpgroup on empty[stage]), so that a step's
//     wgmmas are always queued behind the running ones. After the last step they run the
//     epilogue (general_epilogue.cuh), synchronizing on a barrier of their own 256 threads.
//     Split reductions: a tile's blocks form a cluster and sum their partials through each
//     other's shared memory, each block then pooling its share of the channels
//     (Plan::cluster_split); persistent plans sum them through global memory as the other
//     kernel does.
// Persistent plans (Plan::persistent: paired plans of several rounds of blocks): a block runs
// work items blockIdx.x, + gridDim.x, ... and both roles carry their stage and phase from one
// item to the next, so the producer loads the next tile's first steps while the consumers pool
// this one (the epilogue tile then has shared memory of its own, past the stages). Otherwise
// one item a block, and the epilogue tile reuses the stages.
// The stages hold [image][phase][slice][halo row][column][16 bytes] boxes (each (image, phase)
// plane padded to 128 bytes, where the copy engine wants a box to land), then the weights
// [tap][chunk][slice][n][16 bytes] (a whole group's taps where read in place); a tap of a square
// is still a constant offset of the square's descriptor (the K-step table), across phase planes.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../conv_pool_layout.cuh"
#include "general_epilogue.cuh"
#include "general_kernel.cuh"
#include "general_mainloop.cuh"
#include "general_trace.cuh"

namespace general_wgmma {

// Registers a thread of each role takes (setmaxnreg): the producer gives back all but a few, the
// consumers take the rest of the block's share (one block per SM: 65536 / 384 at entry; two:
// 80, so 4 x 24 + 8 x 104 warp-registers of the 12 x 80).
template <int kMinBlocks>
struct RoleRegisters {
  static constexpr int kProducer = kMinBlocks == 1 ? 40 : 24;
  static constexpr int kConsumer = kMinBlocks == 1 ? 232 : 104;
};
constexpr int kConsumerBarrier = 1;  // hardware barrier of the consumers' 256 threads

__device__ __forceinline__ void consumer_sync() {
  named_barrier_sync(kConsumerBarrier, kThreads);
}

// The slot of halo column j (of one image's columns) in a stage of kTmaInput: its phase's plane,
// position j / stride_w (pixel_slots(p) slots a position).
__device__ __forceinline__ int tma_column_slot(const ConvPoolShape& s, const Plan& p, int j) {
  const int phase = j % s.stride_w;
  const int planes_before = __popc(p.phase_mask & ((1u << phase) - 1u));
  return planes_before * (p.plane_bytes / kSliceBytes) + (j / s.stride_w) * pixel_slots(p);
}

// Split reductions in a cluster (Plan::cluster_split): a tile's p.split blocks (a power of two)
// are one cluster and each has staged its whole partial conv tile ([channel][pixel]) in its own
// shared memory; block `rank` then adds the p.split tiles' values of its `share` channels (at
// `own`, in its own tile), in rank order, so that every run adds in the same order. Only the
// pixels the pooling reads (Plan::read_rows x read_cols, in float4s along a row): on small
// images most of a tile lies past the output. The blocks read each other's tiles only in rows
// that their owners do not write. kThreads threads (the consumers), two float4s a thread in
// flight from each rank.
template <int kCols>
__device__ __forceinline__ void sum_cluster_tiles(float* own, const Plan& p, int share) {
  constexpr int kRanksInFlight = 4;  // loads in flight a thread and item (registers allowing)
  constexpr int kItems = 2;          // float4s a thread sums at once
  const uint32_t local = shared_address(own);
  const int row_vectors = (p.read_cols + 3) / 4;
  const int vectors = share * p.read_rows * row_vectors;
  const int split = p.split;
  for (int i0 = int(threadIdx.x); i0 < vectors; i0 += kItems * kThreads) {
    uint32_t offset[kItems];
    bool valid[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      valid[j] = i0 + j * kThreads < vectors;
      const int i = valid[j] ? i0 + j * kThreads : i0;
      const int line = i / row_vectors;                    // (channel, row) of the share
      const int channel = line / p.read_rows;
      const int pixel = (line - channel * p.read_rows) * kCols + 4 * (i - line * row_vectors);
      offset[j] = local + uint32_t((channel * p.tile_pitch + pixel) * int(sizeof(float)));
    }
    float4 sum[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) sum[j] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
    for (int q0 = 0; q0 < split; q0 += kRanksInFlight) {
      float4 v[kItems][kRanksInFlight];
#pragma unroll
      for (int q = 0; q < kRanksInFlight; ++q)
#pragma unroll
        for (int j = 0; j < kItems; ++j)
          if (q0 + q < split && valid[j])
            v[j][q] = load_cluster_shared(cluster_shared_address(offset[j], q0 + q));
#pragma unroll
      for (int q = 0; q < kRanksInFlight; ++q) {
        if (q0 + q >= split) break;
#pragma unroll
        for (int j = 0; j < kItems; ++j) {
          if (!valid[j]) continue;
          sum[j].x += v[j][q].x;
          sum[j].y += v[j][q].y;
          sum[j].z += v[j][q].z;
          sum[j].w += v[j][q].w;
        }
      }
    }
    // Every load of the item is in: the stores below may overwrite this block's own values.
#pragma unroll
    for (int j = 0; j < kItems; ++j)
      if (valid[j])
        *reinterpret_cast<float4*>(own + (offset[j] - local) / sizeof(float)) = sum[j];
  }
}

// Work item w of the launch (a block's blockIdx.x, + gridDim.x, ...): its tile and, for split
// reductions, its share of the tile's steps.
struct Work {
  int64_t tile;
  int rank, first_step, end_step;
};

__device__ __forceinline__ Work work_item(const Plan& p, int64_t w) {
  Work k{w, 0, 0, p.steps};
  if (p.split > 1) {
    k.tile = w / p.split;
    k.rank = int(w - k.tile * p.split);
    k.first_step = k.rank * p.split_steps;
    k.end_step = min(p.steps, k.first_step + p.split_steps);
  }
  return k;
}

// Plan::self_copy: this block's part of the slice-planar copy of x (one tile a block, a 1 x 1
// layer at stride 1: every step's boxes span the same rows and columns), written by all its
// threads before its producer's first box: the slices of its steps' chunks over those rows and
// columns clipped to x (the copy engine reads zeros past them), for each of its images, as
// ToSlices' items (a pixel's kGroupSlices slices), columns fastest, so that a warp's loads of
// a channel are consecutive pixels of an NCHW row (named by row-major slots whatever x's
// strides: the launch's band order for a transposed view is a matter of its loads' order, not
// of the copy's layout). Blocks whose boxes overlap write the same bytes.
template <class E, int kTileId>
__device__ __forceinline__ void copy_own_halo(const ConvPoolShape& s, const Plan& p,
                                              const ConvPoolOperands& ops) {
  using Job = ToSlices<typename E::Raw>;
  Job job = to_slices_job<typename E::Raw>(
      ElementOperands<E>::x(ops), ops.x_stride, s.batch, s.in_channels, s.in_height,
      s.in_width, 1, 1u, CopyRows{1, 1u}, p.staged_channels / Job::kSlice,
      const_cast<void*>(p.staged_input));
  job.columns_first = false;
  const Work k = work_item(p, blockIdx.x);
  const TileOrigin o = tile_origin<kTileId>(s, p, k.tile);
  const int row0 = max(o.in_row0, 0), rows = min(o.in_row0 + p.box_rows, s.in_height) - row0;
  const int col0 = max(o.in_col0, 0), cols = min(o.in_col0 + p.phase_cols, s.in_width) - col0;
  const int group0 = 2 * k.first_step * p.step_chunks / Job::kGroupSlices;
  const int groups =
      min(job.groups, (2 * k.end_step * p.step_chunks + Job::kGroupSlices - 1) /
                          Job::kGroupSlices) - group0;
  const int images = int(min(int64_t(p.images), s.batch - o.image));
  if (rows <= 0 || cols <= 0 || groups <= 0 || images <= 0) return;
  const int items = images * groups * rows * cols;
  for (int i = int(threadIdx.x); i < items; i += kWsThreads) {
    const int line = i / cols, col = col0 + (i - line * cols);
    const int plane = line / rows, row = row0 + (line - plane * rows);
    const int image = plane / groups, group = group0 + (plane - image * groups);
    to_slices_item(job, ((o.image + image) * job.groups + group) * job.plane +
                            int64_t(row) * job.pitch + col);
  }
}

// The producer's loop: every step of every work item of this block into the stages, in order,
// each once its stage is free. One thread.
template <int kTileId>
__device__ __forceinline__ void produce(const ConvPoolShape& s, const Plan& p,
                                        const CUtensorMap* x_map, const CUtensorMap* weight_map,
                                        unsigned char* smem, uint64_t* full, uint64_t* empty) {
  // A column is a coordinate of dimension 1, or (merged columns) its phase (col mod stride_w)
  // in dimension 1 and its place in the phase's run, kMergedColWords a column, in dimension 0.
  const uint32_t halo_tx =
      uint32_t(p.images * p.phases * 2 * p.step_chunks * p.slice_plane * kSliceBytes);
  // The box's first slice, or (swizzled stage) W-byte group, of a step's run of chunks.
  const int group_shift = __ffs(pixel_slots(p)) - 1;
  int stage = 0;
  uint32_t empty_parity = 1;  // a fresh barrier's previous phase counts as completed
  for (int64_t w = blockIdx.x; w < p.tiles * p.split; w += gridDim.x) {
    const Work k = work_item(p, w);
    const TileOrigin o = tile_origin<kTileId>(s, p, k.tile);
    const PhaseRun first = s.stride_w == 1 || !p.merged_cols ? PhaseRun{0, o.in_col0}
                                                             : phase_run(o.in_col0, s.stride_w);
    for (int step = k.first_step; step < k.end_step; ++step) {
      mbarrier_wait(empty + stage, empty_parity);
      const Step st = make_step(s, p, o, step);
      const WeightSpan weights =
          p.weights_in_place ? WeightSpan{0, uint32_t(p.weight_stage_bytes)}
                             : step_weight_span<kTileId, true>(s, p, o, st);
      mbarrier_arrive_expect_tx(full + stage, halo_tx + weights.bytes);
      unsigned char* box = smem + stage * p.stage_bytes;
      for (int image = 0; image < p.images; ++image) {
        for (uint32_t mask = p.phase_mask; mask != 0; mask &= mask - 1, box += p.plane_bytes) {
          const int offset = __ffs(mask) - 1;
          const PhaseRun c = offset_phase_run(first, offset, s.stride_w);
          if (p.merged_cols)
            tma_load_5d(box, x_map, c.run * kMergedColWords, c.phase, st.row_first,
                        2 * st.chunk0, int(o.image) + image, full + stage);
          else
            tma_load_5d(box, x_map, 0, o.in_col0 + offset, st.row_first,
                        (2 * st.chunk0) >> group_shift, int(o.image) + image, full + stage);
        }
      }
      unsigned char* staged_weights = smem + stage * p.stage_bytes + p.halo_bytes;
      if (p.weights_in_place)
        tma_load_5d(staged_weights, weight_map, 0, o.channel0, 2 * st.chunk0,
                    st.kernel_row0 * s.kernel_w, 0, full + stage);
      else
        bulk_copy_to_shared(staged_weights,
                            static_cast<const unsigned char*>(p.packed) + weights.offset,
                            weights.bytes, full + stage);
      if (w == blockIdx.x && step == k.first_step) trace(p, kTraceFirstIssue);
      const bool traced_last = p.trace != nullptr && w == blockIdx.x && step == k.end_step - 1;
      if (traced_last) trace(p, kTraceLastIssue);
      const int issued = stage;
      const uint32_t issued_parity = empty_parity;
      if (++stage == p.stages) {
        stage = 0;
        empty_parity ^= 1u;
      }
      // Traced (one item a block): the consumers' release of the last step's stage is the end
      // of their mainloop (their own mark there would cost the accumulators' registers).
      if (traced_last && !p.persistent) {
        mbarrier_wait(empty + issued, issued_parity ^ 1u);
        trace(p, kTraceMainloopDone);
      }
    }
  }
}

// kCluster: the instance for Plan::cluster_split (split reductions in the cluster), one block an
// SM whatever the tile (its split layers have few tiles; the registers of two blocks an SM do
// not hold its epilogue); the other runs every other plan.
template <class E, int kTileId, bool kCluster>
__global__ void __launch_bounds__(kWsThreads, kCluster ? 1 : Tile<kTileId>::kMinBlocks)
    general_ws_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const Plan p,
                      const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap weight_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<kTileId>;
  using X = Element<E>;  // the element type's operations
  constexpr int kBlocksPerSm = kCluster ? 1 : T::kMinBlocks;
  extern __shared__ __align__(1024) unsigned char smem[];  // (a swizzled stage's pattern)
  float* bias = reinterpret_cast<float*>(smem + p.bias_offset);
  int* kstep_table = reinterpret_cast<int*>(smem + p.kstep_table_offset);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + p.barrier_offset);
  uint64_t* empty = full + kMaxStages;
  void* flag = empty + kMaxStages;
  if (threadIdx.x == 0) {
    trace(p, kTraceSm, sm_id());
    trace(p, kTraceTimerStart, global_timer());
    trace(p, kTraceStart);
  }
  if (threadIdx.x == kThreads) {
    for (int stage = 0; stage < p.stages; ++stage) {
      mbarrier_init(full + stage, 1);   // the producer's arrival (and the copies' bytes)
      mbarrier_init(empty + stage, 2);  // one arrival per consumer warpgroup
    }
    fence_mbarrier_init();
    prefetch_tensor_map(&x_map);
    if (p.weights_in_place) prefetch_tensor_map(&weight_map);
  }
  if (p.self_copy) {  // (read only once the kernel before, if a programmatic dependent, ends)
    grid_dependency_wait();
    copy_own_halo<E, kTileId>(s, p, ops);
    fence_proxy_async_global();  // this thread's copy, before the producer's boxes read it
  }
  __syncthreads();  // the barriers (and the block's copy), before the roles split

  // Launched as a programmatic dependent ($CONV_POOL_GENERAL_PDL=1), the block may run up to
  // here under the previous kernel (the preparation launch, or any other); from here on it
  // reads and writes global memory, so each role waits for that kernel first (no-ops else).
  if (threadIdx.x >= kThreads) {  // the producer warpgroup
    set_max_registers_dec<RoleRegisters<kBlocksPerSm>::kProducer>();
    if (threadIdx.x == kThreads) {
      grid_dependency_wait();
      produce<kTileId>(s, p, &x_map, &weight_map, smem, full, empty);
    }
    return;
  }
  set_max_registers_inc<RoleRegisters<kBlocksPerSm>::kConsumer>();
  // The K-step table, written while the first copies are under way.
  fill_kstep_table(s, p, kstep_table, kThreads, [&](int j) { return tma_column_slot(s, p, j); });
  consumer_sync();
  if (threadIdx.x == 0) trace(p, kTraceReady);

  const uint32_t smem_base = shared_address(smem);
  // Each square's tap-(0, 0) slot (an image's planes follow the previous image's): set once,
  // or in the two-block instances rebuilt at every step, a few integer operations that keep
  // the slots out of the 104 registers the paired epilogue needs (set once, they spill there).
  constexpr bool kRebuildSlots = kBlocksPerSm > 1;
  uint32_t set_slot[T::kSquaresPerGroup];
  if constexpr (!kRebuildSlots)
    square_slots<kTileId>(s, p, p.phases * (p.plane_bytes / kSliceBytes), set_slot);
  float* conv_tile = reinterpret_cast<float*>(smem + p.epilogue_offset);
  grid_dependency_wait();
  // Plan::pool_rect: the first item's bias, read while its first copies are under way (its own
  // bytes, past the stages: the item's barriers before the pooling order it); later items'
  // (and every item's without it) after their steps, once the previous item's pooling has
  // read it.
  const bool early_bias = p.pool_rect && (kCluster || !p.direct_pairs);
  if (early_bias)
    load_bias<X, kTileId>(s, ops, tile_origin<kTileId>(s, p, work_item(p, blockIdx.x).tile),
                          bias);

  int stage = 0;
  uint32_t full_parity = 0;
  for (int64_t w = blockIdx.x; w < p.tiles * p.split; w += gridDim.x) {
    const Work k = work_item(p, w);
    float acc[T::kSquaresPerGroup][T::kAccs];  // written by the first wgmma (accumulate = false)
    // A narrow last channel block (Plan::tail_n) writes a prefix of them: the rest zeros (no
    // wgmma is in flight here), whose channels the epilogue stores none of.
    const int width = block_width(p, k.tile, T::kN);
    if (width < T::kN) {
#pragma unroll
      for (int m = 0; m < T::kSquaresPerGroup; ++m)
#pragma unroll
        for (int i = 0; i < T::kAccs; ++i) acc[m][i] = 0.f;
    }
    int held = -1;  // the stage of the previous step, until its wgmmas finish
    if (p.trace != nullptr && w == blockIdx.x) {  // (the loop's first wait passes at once)
      mbarrier_wait(full + stage, full_parity);
      if (threadIdx.x == 0) trace(p, kTraceFirstFull);
    }
    for (int step = k.first_step; step < k.end_step; ++step) {
      mbarrier_wait(full + stage, full_parity);
      uint32_t rebuilt_slot[T::kSquaresPerGroup];
      if constexpr (kRebuildSlots)
        square_slots<kTileId>(s, p, p.phases * (p.plane_bytes / kSliceBytes), rebuilt_slot);
      const uint32_t(&square_slot)[T::kSquaresPerGroup] = kRebuildSlots ? rebuilt_slot : set_slot;
      // A's descriptors: between K core matrices a slice plane (a swizzled stage's K steps lie
      // within its W-byte rows: 16 bytes, as the probe ran it), between a square's conv rows
      // row_rate halo rows of pixels.
      const int row_rate = p.gathered_rows ? 1 : s.stride_h;
      const uint32_t a_leading =
          p.x_swizzle > 0 ? kSliceBytes : uint32_t(p.slice_plane * kSliceBytes);
      const uint32_t a_stride = uint32_t(row_rate * p.row_pitch * pixel_slots(p) * kSliceBytes);
      issue_step<X, kTileId>(s, p, acc, smem_base + uint32_t(stage * p.stage_bytes),
                             square_slot, a_leading, a_stride, swizzle_layout(p.x_swizzle),
                             kstep_table, step, step == k.first_step, width);
      // As in the other kernel: this step's wgmmas are the last two groups or more, so waiting
      // with two pending completes every earlier step's, and the previous stage is free.
      wgmma_wait<2>();
      if (held >= 0 && threadIdx.x % 128 == 0) mbarrier_arrive(empty + held);
      held = stage;
      if (++stage == p.stages) {
        stage = 0;
        full_parity ^= 1u;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < T::kSquaresPerGroup; ++m) fence_registers(acc[m]);
    if (threadIdx.x % 128 == 0) mbarrier_arrive(empty + held);  // the producer's next tile
    const TileOrigin o = tile_origin<kTileId>(s, p, k.tile);  // (not live across the steps)
    if constexpr (!kCluster) {
      // Stored from the registers (one tile a block's share: no split): nothing shared is
      // written, so the warpgroups go on to their next tile (or leave) without a barrier.
      if (p.direct_pairs) {
        float lane_bias[T::kN / 32];
        load_lane_bias<X, kTileId>(s, ops, o.channel0, lane_bias);
        store_pooled_pairs<X, kTileId>(s, p, ops, o, acc, lane_bias);
        if (threadIdx.x == 0 && w == blockIdx.x) trace(p, kTraceTileDone);
        continue;
      }
    }
    if (!early_bias || w != blockIdx.x) load_bias<X, kTileId>(s, ops, o, bias);
    // The bias is written; no wgmma reads the stages any more (where the epilogue tile lies in
    // them: one tile a block, every copy into them landed).
    consumer_sync();
    if constexpr (kCluster) {
      // The whole conv tile staged (one pass), the cluster's tiles summed in the rows of this
      // block's share of the channels, and that share pooled; no block leaves while another
      // may still read its tile.
      const int rank = int(blockIdx.x % unsigned(p.split));
      const int share = T::kN / p.split;
      float* own = conv_tile + rank * share * p.tile_pitch;
      const bool traced = threadIdx.x == 0 && w == blockIdx.x;
      stage_accumulators<kTileId>(acc, conv_tile, p.tile_pitch, 0, T::kN, false);
      if (traced) trace(p, kTraceClusterStaged);
      cluster_arrive();
      cluster_wait();
      if (traced) trace(p, kTraceClusterJoined);
      sum_cluster_tiles<T::kCols>(own, p, share);
      // This block reads no other tile any more: the sums it stored used every loaded value.
      cluster_arrive_relaxed();
      consumer_sync();
      if (traced) trace(p, kTraceClusterSummed);
      pool_tile<X, kTileId>(s, p, ops, o, own, bias, rank, share);
      cluster_wait();  // nor does any other block read this one's
    } else {
      if (p.split > 1 &&
          !reduce_split<kTileId, kConsumerBarrier>(acc, p, k.tile, k.rank, flag))
        continue;
      bool staged_mark = threadIdx.x == 0 && w == blockIdx.x;
      auto sync = [&] {
        consumer_sync();
        if (staged_mark) trace(p, kTraceEpilogueStaged);
        staged_mark = false;
      };
      pool_accumulators<X, kTileId, true>(s, p, ops, o, acc, conv_tile, bias,
                                          T::kN / p.epilogue_passes, sync);
    }
    consumer_sync();  // the pooling read the tile and the bias before the next tile writes them
    if (threadIdx.x == 0 && w == blockIdx.x) trace(p, kTraceTileDone);
  }
  if (threadIdx.x == 0) {
    trace(p, kTraceEnd);
    trace(p, kTraceTimerEnd, global_timer());
    trace(p, kTraceItems, (p.tiles * p.split - blockIdx.x + gridDim.x - 1) / gridDim.x);
  }
#endif
}

}  // namespace general_wgmma
