// Layout conversions (conv_pool_layout.h). To channels-last: a tiled transpose through shared
// memory, 32 pixels x 32 channels a block (load_channel_tile, conv_pool_layout.cuh), written
// along the channels (one pixel's consecutive channels per warp). To slice-planar: each pixel's
// slices gathered in registers (conv_pool_layout.cuh).
#include "conv_pool_layout.h"

#include "conv_pool_layout.cuh"

#include <algorithm>

namespace {

template <class Raw>
__global__ void to_channels_last_kernel(const Raw* src, int64_t s0, int64_t s1, int64_t s2,
                                        int64_t s3, int64_t pixels, int channels, int height,
                                        int width, int dst_channels, Raw* dst) {
  __shared__ Raw tile[32][33];
  const int64_t pixel0 = int64_t(blockIdx.x) * 32;
  const int channel0 = blockIdx.y * 32;
  load_channel_tile<8>(src, s0, s1, s2, s3, pixels, channels, height, width, pixel0,
                       channel0, tile);
  __syncthreads();
  const int channel = channel0 + threadIdx.x;
  if (channel >= dst_channels) return;
  for (int px = threadIdx.y; px < 32; px += blockDim.y) {
    const int64_t pixel = pixel0 + px;
    if (pixel < pixels) dst[pixel * dst_channels + channel] = tile[threadIdx.x][px];
  }
}

// The slice-planar copy (conv_pool_layout.cuh), one item a thread.
template <class Raw>
__global__ void __launch_bounds__(256) to_slices_kernel(const ToSlices<Raw> job) {
  to_slices_item(job, int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
}

template <class Raw>
cudaError_t to_slices(const void* src, const int64_t* stride, int64_t batch, int channels,
                      int height, int width, int phases, uint32_t phase_mask, CopyRows rows,
                      int slices, void* dst, cudaStream_t stream) {
  const ToSlices<Raw> job = to_slices_job<Raw>(src, stride, batch, channels, height, width,
                                               phases, phase_mask, rows, slices, dst);
  constexpr int kBlock = ToSlices<Raw>::kBlockThreads;
  to_slices_kernel<Raw><<<unsigned(job.items() / kBlock), kBlock, 0, stream>>>(job);
  return cudaGetLastError();
}

}  // namespace

cudaError_t conv_pool_to_slices(const void* src, const int64_t* stride, int element_bytes,
                                int64_t batch, int channels, int height, int width, int phases,
                                uint32_t phase_mask, CopyRows rows, int slices, void* dst,
                                cudaStream_t stream) {
  if (batch * height * width == 0 || slices == 0) return cudaSuccess;
  if (phases < 1 || rows.phases < 1 || rows.phases > 32) return cudaErrorInvalidValue;
  if (element_bytes == 4)
    return to_slices<float>(src, stride, batch, channels, height, width, phases, phase_mask,
                            rows, slices, dst, stream);
  if (element_bytes == 2)
    return to_slices<uint16_t>(src, stride, batch, channels, height, width, phases, phase_mask,
                               rows, slices, dst, stream);
  return cudaErrorInvalidValue;
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
