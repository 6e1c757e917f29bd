// The slice-planar copy of an input whose channel planes are contiguous (NCHW-like: unit column
// stride, rows `width` apart), as one job a launch can run alone (conv_pool_layout.cu) or beside
// other work in the same grid (the general kernel's preparation launch, general_wgmma.cu).
// Slice-planar: dst[((n * slices + j) * plane + pixel) * E + e] = src(n, j E + e, pixel), zeros
// past the channels, E = 16 / sizeof(Raw) channels a 16-byte slice. With column phases P > 1
// (a layer of column stride P), each row's columns are grouped by phase: column w at
// (w % P) x ceil(width / P) + w / P of a row of P x ceil(width / P) slots, zeros in the slots
// no column fills, so that the columns a strided box reads are one contiguous run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_layout.h"  // conv_pool_phase_width
#include "conv_pool_shape.h"   // CONV_POOL_HD

template <class Raw>
struct PlanesToSlices {
  static constexpr int kSlice = 16 / int(sizeof(Raw));
  // The copy's positions (image, slice, pixel), pixel fastest, are one sequence in dst's order;
  // a segment of it is kSegmentThreads consecutive threads (one block of the launch), each
  // taking kPixelsPerThread positions kSegmentThreads apart, so that small planes fill blocks
  // as large ones do.
  static constexpr int kSegmentThreads = 256;
  static constexpr int kPixelsPerThread = 2;
  static constexpr int kSegmentPixels = kSegmentThreads * kPixelsPerThread;
  const Raw* src;
  int64_t image_stride, channel_stride;  // elements
  int64_t plane;                         // dst slots of one image's slice (height x row)
  int64_t positions;                     // batch x slices x plane
  int channels, slices;
  int width, phases, phase_width;        // phases > 1: a row of phases x phase_width slots
  Raw* dst;

  // Threads the job takes: whole segments over the positions.
  CONV_POOL_HD int64_t items() const {
    return (positions + kSegmentPixels - 1) / kSegmentPixels * kSegmentThreads;
  }
};

template <class Raw>
PlanesToSlices<Raw> planes_to_slices_job(const void* src, const int64_t* stride, int64_t batch,
                                         int channels, int height, int width, int phases,
                                         int slices, void* dst) {
  PlanesToSlices<Raw> job;
  job.src = static_cast<const Raw*>(src);
  job.image_stride = stride[0];
  job.channel_stride = stride[1];
  job.width = width;
  job.phases = phases;
  job.phase_width = conv_pool_phase_width(width, phases);
  job.plane = int64_t(height) * (phases > 1 ? phases * job.phase_width : width);
  job.positions = batch * slices * job.plane;
  job.channels = channels;
  job.slices = slices;
  job.dst = static_cast<Raw*>(dst);
  return job;
}

#if defined(__CUDACC__)
// Item `index` of the job: kPixelsPerThread positions, each kSlice element loads (one a channel)
// and one 16-byte store of the pixel's slice. A warp's loads of one channel are consecutive
// elements (within a plane) and its stores 512 contiguous bytes, whatever the plane's size or
// alignment; all of a thread's loads are issued before its stores.
template <class Raw>
__device__ __forceinline__ void planes_to_slices_item(const PlanesToSlices<Raw>& job,
                                                      int64_t index) {
  using Job = PlanesToSlices<Raw>;
  constexpr int kSlice = Job::kSlice;
  const int64_t first = index / Job::kSegmentThreads * Job::kSegmentPixels +
                        index % Job::kSegmentThreads;
  union Vector {
    Raw raw[kSlice];
    uint4 bits;
  };
  Vector by_pixel[Job::kPixelsPerThread];
#pragma unroll
  for (int i = 0; i < Job::kPixelsPerThread; ++i) {
    const int64_t position = first + i * Job::kSegmentThreads;
    const int64_t row = position / job.plane, pixel = position - row * job.plane;
    const int slice = int(row % job.slices);
    const int64_t image = row / job.slices;
    int64_t offset = pixel;  // of the source pixel in its plane
    bool filled = true;      // (a slot some column fills)
    if (job.phases > 1) {
      const int pitch = job.phases * job.phase_width;
      const int h = int(pixel / pitch), col = int(pixel - int64_t(h) * pitch);
      const int phase = col / job.phase_width;
      const int w = (col - phase * job.phase_width) * job.phases + phase;
      filled = w < job.width;
      offset = int64_t(h) * job.width + w;
    }
    const Raw* planes = job.src + image * job.image_stride +
                        int64_t(slice * kSlice) * job.channel_stride + offset;
    const int live = position < job.positions && filled ? job.channels - slice * kSlice : 0;
#pragma unroll
    for (int c = 0; c < kSlice; ++c)
      by_pixel[i].raw[c] = c < live ? planes[int64_t(c) * job.channel_stride] : Raw(0);
  }
  uint4* out = reinterpret_cast<uint4*>(job.dst);
#pragma unroll
  for (int i = 0; i < Job::kPixelsPerThread; ++i) {
    const int64_t position = first + i * Job::kSegmentThreads;
    if (position < job.positions) out[position] = by_pixel[i].bits;
  }
}
#endif
