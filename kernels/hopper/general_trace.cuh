// Timestamps of the warp-specialized general kernel's phases, a measurement hook
// ($CONV_POOL_GENERAL_TRACE=<file>, read by tools/trace_tiles.py): where a tile's serial chain
// (start, first copies, steps, pooling, stores) spends its time, which sampled stalls cannot
// say for short launches. Off (Plan::trace null) the kernel pays a uniform branch per mark.
//
// Each of the first Plan::trace_blocks blocks writes kTraceWords words: its SM, the global
// timer at entry and exit, and the SM's cycle counter at each TraceMark of its first work
// item (the counter is one clock per SM, so blocks on one SM share a time line). The host
// appends a header and the words of every traced launch to the file.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "../conv_pool_env.h"
#include "general_plan.h"

namespace general_wgmma {

enum TraceMark : int {
  kTraceSm = 0,         // %smid
  kTraceTimerStart,     // %globaltimer (ns) at entry
  kTraceStart,          // cycle counter at entry
  kTraceReady,          // consumers: barriers set up and the K-step table written
  kTraceFirstFull,      // consumers: the first step's copies landed
  kTraceMainloopDone,   // producer: the consumers released the first item's last stage
  kTraceTileDone,       // consumers: the first work item pooled and stored
  kTraceEnd,            // consumers: every work item done
  kTraceTimerEnd,       // %globaltimer (ns) at exit
  kTraceFirstIssue,     // producer: the first step's copies issued
  kTraceLastIssue,      // producer: the first work item's last step issued
  kTraceItems,          // work items the block ran
  // The cluster split's epilogue (Plan::cluster_split; consumers, first item):
  kTraceClusterStaged,  // this block's partial conv tile staged (thread 0's part)
  kTraceClusterJoined,  // every block of the cluster has staged its own
  kTraceClusterSummed,  // this block's share of the channels summed over the cluster
  kTraceEpilogueStaged, // consumers, other plans: the first item's conv tile (its first
                        // epilogue pass, or its 2 x 2 maxima) staged, before the pooling
  kTraceWords = 16
};

__device__ __forceinline__ uint64_t cycle_counter() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Word `mark` of this block's record: the cycle counter, or `value` where given. One thread.
__device__ __forceinline__ void trace(const Plan& p, int mark, uint64_t value = ~0ull) {
  if (p.trace == nullptr || blockIdx.x >= unsigned(p.trace_blocks)) return;
  p.trace[blockIdx.x * uint64_t(kTraceWords) + mark] = value == ~0ull ? cycle_counter() : value;
}

// Host side. The file named by $CONV_POOL_GENERAL_TRACE, or null.
inline const char* trace_path() { return conv_pool_env::hook_env("CONV_POOL_GENERAL_TRACE"); }

// Points p.trace at a zeroed record of up to kMaxTraceBlocks blocks (one buffer, kept).
inline cudaError_t trace_begin(Plan& p, cudaStream_t stream) {
  constexpr int kMaxTraceBlocks = 1 << 16;
  static unsigned long long* buffer = nullptr;
  if (buffer == nullptr) {
    if (cudaError_t error = cudaMalloc(&buffer, sizeof(uint64_t) * kTraceWords * kMaxTraceBlocks);
        error != cudaSuccess)
      return error;
  }
  p.trace = buffer;
  p.trace_blocks = int(p.grid < kMaxTraceBlocks ? p.grid : kMaxTraceBlocks);
  return cudaMemsetAsync(buffer, 0, sizeof(uint64_t) * kTraceWords * p.trace_blocks, stream);
}

// Waits for the launch and appends its record to the file: a header of 16 int64 (tag, grid,
// traced blocks, tiles, split, steps, stages, tile id, blocks per SM, persistent, images,
// words a block, 0...), then the words.
inline cudaError_t trace_end(const Plan& p, cudaStream_t stream) {
  if (cudaError_t error = cudaStreamSynchronize(stream); error != cudaSuccess) return error;
  const size_t words = size_t(kTraceWords) * p.trace_blocks;
  uint64_t* host = static_cast<uint64_t*>(std::malloc(sizeof(uint64_t) * words));
  if (host == nullptr) return cudaErrorMemoryAllocation;
  cudaError_t error = cudaMemcpy(host, p.trace, sizeof(uint64_t) * words, cudaMemcpyDeviceToHost);
  if (error == cudaSuccess) {
    const int64_t header[16] = {0x54524143,   p.grid,         p.trace_blocks, p.tiles,
                                p.split,      p.steps,        p.stages,       p.tile,
                                p.blocks_per_sm, p.persistent, p.images,     kTraceWords};
    if (FILE* file = std::fopen(trace_path(), "ab")) {
      std::fwrite(header, sizeof header, 1, file);
      std::fwrite(host, sizeof(uint64_t), words, file);
      std::fclose(file);
    }
  }
  std::free(host);
  return error;
}

}  // namespace general_wgmma
