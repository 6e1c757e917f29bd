// The slice-planar copy of an input whose channel planes are contiguous (NCHW-like: unit column
// stride, rows `width` apart), as one job a launch can run alone (conv_pool_layout.cu) or beside
// other work in the same grid (the general kernel's preparation launch, general_wgmma.cu).
// Slice-planar: dst[((n * slices + j) * plane + pixel) * E + e] = src(n, j E + e, pixel), zeros
// past the channels, E = 16 / sizeof(Raw) channels a 16-byte slice.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_shape.h"  // CONV_POOL_HD

template <class Raw>
struct PlanesToSlices {
  static constexpr int kSlice = 16 / int(sizeof(Raw));
  const Raw* src;
  int64_t image_stride, channel_stride;  // elements
  int64_t plane;                         // pixels of one image
  int64_t groups;                        // kSlice-pixel groups of a plane
  int64_t batch;
  int channels, slices;
  bool vector;  // 16-byte loads: the plane, the strides and the address whole slices
  Raw* dst;

  // Threads the job takes: one per (image, slice, pixel group).
  CONV_POOL_HD int64_t items() const { return batch * slices * groups; }
};

template <class Raw>
PlanesToSlices<Raw> planes_to_slices_job(const void* src, const int64_t* stride, int64_t batch,
                                         int channels, int64_t plane, int slices, void* dst) {
  constexpr int kSlice = PlanesToSlices<Raw>::kSlice;
  PlanesToSlices<Raw> job;
  job.src = static_cast<const Raw*>(src);
  job.image_stride = stride[0];
  job.channel_stride = stride[1];
  job.plane = plane;
  job.groups = (plane + kSlice - 1) / kSlice;
  job.batch = batch;
  job.channels = channels;
  job.slices = slices;
  job.vector = plane % kSlice == 0 && stride[1] % kSlice == 0 && stride[0] % kSlice == 0 &&
               reinterpret_cast<uintptr_t>(src) % 16 == 0;
  job.dst = static_cast<Raw*>(dst);
  return job;
}

#if defined(__CUDACC__)
// Item `index` of the job: kSlice consecutive pixels of one (image, slice): kSlice loads of
// kSlice pixels (one channel each, 16 bytes where `vector` allows), a transpose in registers,
// and kSlice 16-byte stores, one pixel's slice each (kSlice x 16 contiguous bytes). Consecutive
// items take consecutive pixel groups, so both the loads of a channel and the stores are
// contiguous across a warp.
template <class Raw>
__device__ __forceinline__ void planes_to_slices_item(const PlanesToSlices<Raw>& job,
                                                      int64_t index) {
  constexpr int kSlice = PlanesToSlices<Raw>::kSlice;
  const int64_t group = index % job.groups, rest = index / job.groups;
  const int slice = int(rest % job.slices);
  const int64_t image = rest / job.slices;
  if (image >= job.batch) return;
  const int64_t pixel0 = group * kSlice;
  union Vector {
    Raw raw[kSlice];
    uint4 bits;
  };
  Vector by_channel[kSlice];  // [channel][pixel]
#pragma unroll
  for (int c = 0; c < kSlice; ++c) {
    const int channel = slice * kSlice + c;
    const Raw* row = job.src + image * job.image_stride + int64_t(channel) * job.channel_stride +
                     pixel0;
    if (channel >= job.channels) {
      by_channel[c].bits = make_uint4(0, 0, 0, 0);
    } else if (job.vector && pixel0 + kSlice <= job.plane) {
      by_channel[c].bits = *reinterpret_cast<const uint4*>(row);
    } else {
#pragma unroll
      for (int e = 0; e < kSlice; ++e)
        by_channel[c].raw[e] = pixel0 + e < job.plane ? row[e] : Raw(0);
    }
  }
  uint4* out = reinterpret_cast<uint4*>(job.dst) + (image * job.slices + slice) * job.plane +
               pixel0;
#pragma unroll
  for (int e = 0; e < kSlice; ++e) {
    if (pixel0 + e >= job.plane) break;
    Vector by_pixel;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) by_pixel.raw[c] = by_channel[c].raw[e];
    out[e] = by_pixel.bits;
  }
}
#endif
