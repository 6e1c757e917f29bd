// Layout conversions (conv_pool_layout.h): tiled transposes through shared memory, 32 pixels x
// 32 channels a block, read along the pixels (one channel plane's consecutive pixels per warp)
// and written along the channels: to channels-last one pixel's consecutive channels per warp;
// to slice-planar one 16-byte slice of 32 consecutive pixels per warp (512 contiguous bytes).
// To slice-planar from contiguous channel planes (NCHW), each pixel's slice gathered in registers
// instead.
#include "conv_pool_layout.h"

#include "conv_pool_layout.cuh"

#include <algorithm>

namespace {

// tile[c][p] = src(pixel pixel0 + p, channel channel0 + c), zeros past the pixels and the
// channels; a warp reads 32 consecutive pixels of one channel (blockDim 32 x 8).
template <class Raw>
__device__ __forceinline__ void load_tile(const Raw* src, int64_t s0, int64_t s1, int64_t s2,
                                          int64_t s3, int64_t pixels, int channels, int height,
                                          int width, int64_t pixel0, int channel0,
                                          Raw (&tile)[32][33]) {
  const int64_t pixel = pixel0 + threadIdx.x;
  int64_t offset = 0;
  if (pixel < pixels) {
    const int w = int(pixel % width);
    const int64_t rest = pixel / width;
    const int h = int(rest % height);
    offset = (rest / height) * s0 + h * s2 + w * s3;
  }
  for (int c = threadIdx.y; c < 32; c += blockDim.y) {
    const int channel = channel0 + c;
    tile[c][threadIdx.x] =
        pixel < pixels && channel < channels ? src[offset + channel * s1] : Raw(0);
  }
}

template <class Raw>
__global__ void to_channels_last_kernel(const Raw* src, int64_t s0, int64_t s1, int64_t s2,
                                        int64_t s3, int64_t pixels, int channels, int height,
                                        int width, int dst_channels, Raw* dst) {
  __shared__ Raw tile[32][33];
  const int64_t pixel0 = int64_t(blockIdx.x) * 32;
  const int channel0 = blockIdx.y * 32;
  load_tile(src, s0, s1, s2, s3, pixels, channels, height, width, pixel0, channel0, tile);
  __syncthreads();
  const int channel = channel0 + threadIdx.x;
  if (channel >= dst_channels) return;
  for (int px = threadIdx.y; px < 32; px += blockDim.y) {
    const int64_t pixel = pixel0 + px;
    if (pixel < pixels) dst[pixel * dst_channels + channel] = tile[threadIdx.x][px];
  }
}

// 32 pixels x 32 channels of src -> slice-planar dst: kSlice = 16 / sizeof(Raw) channels a slice,
// one 16-byte vector (a pixel's slice) per thread and step.
// Column phases (phases > 1): a row of phases x phase_width slots, column w at its phase's run.
template <class Raw>
__global__ void to_slices_kernel(const Raw* src, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                                 int64_t pixels, int channels, int height, int width,
                                 int phases, int slices, Raw* dst) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  __shared__ Raw tile[32][33];
  const int64_t pixel0 = int64_t(blockIdx.x) * 32;
  const int channel0 = blockIdx.y * 32;
  const int64_t plane = int64_t(height) * width;  // pixels of one image
  const int phase_width = conv_pool_phase_width(width, phases), pitch = phases * phase_width;
  const int64_t dst_plane = int64_t(height) * pitch;
  load_tile(src, s0, s1, s2, s3, pixels, channels, height, width, pixel0, channel0, tile);
  __syncthreads();
  const int thread = threadIdx.y * 32 + threadIdx.x;
  for (int v = thread; v < 32 * (32 / kSlice); v += 32 * blockDim.y) {
    const int px = v % 32, slice_in_tile = v / 32;
    const int64_t pixel = pixel0 + px;
    const int slice = channel0 / kSlice + slice_in_tile;
    if (pixel >= pixels || slice >= slices) continue;
    Raw values[kSlice];
#pragma unroll
    for (int e = 0; e < kSlice; ++e) values[e] = tile[slice_in_tile * kSlice + e][px];
    const int64_t image = pixel / plane, within = pixel - image * plane;
    const int h = int(within / width), w = int(within - int64_t(h) * width);
    const int64_t slot = int64_t(h) * pitch + (w % phases) * phase_width + w / phases;
    *reinterpret_cast<uint4*>(dst + ((image * slices + slice) * dst_plane + slot) * kSlice) =
        *reinterpret_cast<const uint4*>(values);
  }
}

// Slice-planar from an input whose channel planes are contiguous (NCHW-like): no shared memory,
// one pixel's slice gathered in registers (conv_pool_layout.cuh), one item a thread.
template <class Raw>
__global__ void planes_to_slices_kernel(const PlanesToSlices<Raw> job) {
  planes_to_slices_item(job, int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
}

template <class Raw>
cudaError_t planes_to_slices(const void* src, const int64_t* stride, int64_t batch, int channels,
                             int height, int width, int phases, int slices, void* dst,
                             cudaStream_t stream) {
  const PlanesToSlices<Raw> job = planes_to_slices_job<Raw>(src, stride, batch, channels, height,
                                                            width, phases, slices, dst);
  constexpr int kBlock = PlanesToSlices<Raw>::kSegmentThreads;
  planes_to_slices_kernel<Raw><<<unsigned((job.items() + kBlock - 1) / kBlock), kBlock, 0,
                                 stream>>>(job);
  return cudaGetLastError();
}

}  // namespace

cudaError_t conv_pool_to_slices(const void* src, const int64_t* stride, int element_bytes,
                                int64_t batch, int channels, int height, int width, int phases,
                                int slices, void* dst, cudaStream_t stream) {
  const int64_t pixels = batch * height * width;
  if (pixels == 0 || slices == 0) return cudaSuccess;
  if (phases < 1) return cudaErrorInvalidValue;
  if (conv_pool_planes_contiguous(stride, width)) {
    if (element_bytes == 4)
      return planes_to_slices<float>(src, stride, batch, channels, height, width, phases, slices,
                                     dst, stream);
    if (element_bytes == 2)
      return planes_to_slices<uint16_t>(src, stride, batch, channels, height, width, phases,
                                        slices, dst, stream);
  }
  // The tiled transpose writes the columns only: the slots no column fills are zeroed first.
  const int phase_width = conv_pool_phase_width(width, phases);
  if (phases * phase_width != width) {
    const size_t bytes = size_t(batch) * slices * height * phases * phase_width * 16;
    if (cudaError_t error = cudaMemsetAsync(dst, 0, bytes, stream); error != cudaSuccess)
      return error;
  }
  const int slice_channels = 16 / element_bytes;
  const dim3 grid(unsigned((pixels + 31) / 32),
                  unsigned((int64_t(slices) * slice_channels + 31) / 32));
  if (element_bytes == 4) {
    to_slices_kernel<float><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const float*>(src), stride[0], stride[1], stride[2], stride[3], pixels,
        channels, height, width, phases, slices, static_cast<float*>(dst));
  } else if (element_bytes == 2) {
    to_slices_kernel<uint16_t><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const uint16_t*>(src), stride[0], stride[1], stride[2], stride[3], pixels,
        channels, height, width, phases, slices, static_cast<uint16_t*>(dst));
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t conv_pool_to_channels_last(const void* src, const int64_t* stride, int element_bytes,
                                       int64_t batch, int channels, int height, int width,
                                       int dst_channels, void* dst, cudaStream_t stream) {
  const int64_t pixels = batch * height * width;
  if (pixels == 0 || dst_channels == 0) return cudaSuccess;
  const dim3 grid(unsigned((pixels + 31) / 32), unsigned((dst_channels + 31) / 32));
  if (element_bytes == 4) {
    to_channels_last_kernel<float><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const float*>(src), stride[0], stride[1], stride[2], stride[3], pixels,
        channels, height, width, dst_channels, static_cast<float*>(dst));
  } else if (element_bytes == 2) {
    to_channels_last_kernel<uint16_t><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const uint16_t*>(src), stride[0], stride[1], stride[2], stride[3], pixels,
        channels, height, width, dst_channels, static_cast<uint16_t*>(dst));
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
