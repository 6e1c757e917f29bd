// Fused Conv2d -> ReLU -> MaxPool2d on CUDA cores (FFMA, fp32) for few output channels:
// variant `small_fp32`.
//
// For problems like LeNet's first layer (1 input channel, 6 output channels, 5x5) a tensor-core
// tile multiplies mostly padding: at most 16 output channels are real, and the whole reduction
// (input channels x taps) is a few dozen products. Here a block owns a 16 x 16 tile of pooled
// outputs of one image, for all output channels: it stages the input region those windows read
// (every channel, zero outside the image) and all weights in shared memory, then each thread
// computes the conv pixels of one pooling window for all output channels at once (the weights
// of one (channel, tap) are a 16-byte broadcast load per 4 output channels), takes their max,
// and stores relu(max) for every channel. Any convolution and pooling geometry; exact fp32
// (no TF32), so it also serves allow_tf32 = False.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "conv_pool_device.cuh"
#include "conv_relu_maxpool_small.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 16;  // pooled outputs per tile side: one per thread
constexpr int kMaxOutChannels = 16;
constexpr int kMaxReduction = 256;  // in_channels * taps

struct SmallPlan {
  int tiles_h, tiles_w;
  int in_rows, in_cols;  // staged input region per channel
  int out_block;         // output channels rounded up to 4, 8 or 16 (the kernel's kOut)
  int smem_bytes;
};

SmallPlan make_plan(const ConvPoolShape& s) {
  SmallPlan p{};
  p.tiles_h = (s.out_height + kTile - 1) / kTile;
  p.tiles_w = (s.out_width + kTile - 1) / kTile;
  const int conv_rows = (kTile - 1) * s.pool_stride_h + s.pool_h;
  const int conv_cols = (kTile - 1) * s.pool_stride_w + s.pool_w;
  p.in_rows = (conv_rows - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
  p.in_cols = (conv_cols - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  p.out_block = s.out_channels <= 4 ? 4 : s.out_channels <= 8 ? 8 : kMaxOutChannels;
  const int64_t floats = int64_t(s.in_channels) * s.taps() * p.out_block + p.out_block +
                         int64_t(s.in_channels) * p.in_rows * p.in_cols;
  p.smem_bytes = int(std::min<int64_t>(4 * floats, INT32_MAX));
  return p;
}

// Several blocks of 256 threads per SM (3 while <= 85 registers fit the accumulators): a block
// is short, the others hide its staging.
template <int kOut>  // output channels, rounded up to 4
__global__ void __launch_bounds__(kThreads, kOut <= 8 ? 3 : 2)
    conv_pool_small_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const SmallPlan p) {
  extern __shared__ __align__(16) float smem[];
  const int reduction = s.in_channels * s.taps();
  float* weights = smem;                   // [channel * taps + tap][kOut]
  float* bias = weights + reduction * kOut;  // [kOut]
  float* input = bias + kOut;              // [channel][in_rows][in_cols]

  int tile = blockIdx.x;
  const int tile_col = tile % p.tiles_w;
  tile /= p.tiles_w;
  const int tile_row = tile % p.tiles_h;
  const int64_t image = tile / p.tiles_h;
  const int out_row0 = tile_row * kTile, out_col0 = tile_col * kTile;
  // Conv pixel and input pixel at the region's origin (may be negative: padding).
  const int conv_row0 = out_row0 * s.pool_stride_h - s.pool_pad_h;
  const int conv_col0 = out_col0 * s.pool_stride_w - s.pool_pad_w;
  const int in_row0 = conv_row0 * s.stride_h - s.pad_h;
  const int in_col0 = conv_col0 * s.stride_w - s.pad_w;

  for (int i = threadIdx.x; i < reduction * kOut; i += kThreads) {
    const int k = i % kOut, e = i / kOut;
    const int c = e / s.taps(), tap = e % s.taps();
    const int r = tap / s.kernel_w, q = tap % s.kernel_w;
    weights[i] = k < s.out_channels ? __ldg(ops.weight + k * ops.weight_stride[0] +
                                            c * ops.weight_stride[1] + r * ops.weight_stride[2] +
                                            q * ops.weight_stride[3])
                                    : 0.f;
  }
  for (int k = threadIdx.x; k < kOut; k += kThreads)
    bias[k] = (ops.bias != nullptr && k < s.out_channels) ? __ldg(ops.bias + k * ops.bias_stride)
                                                          : 0.f;
  const float* x = ops.x + image * ops.x_stride[0];
  const int plane = p.in_rows * p.in_cols;
  for (int i = threadIdx.x; i < s.in_channels * plane; i += kThreads) {
    const int c = i / plane, rest = i % plane;
    const int h = in_row0 + rest / p.in_cols, w = in_col0 + rest % p.in_cols;
    const bool inside = h >= 0 && h < s.in_height && w >= 0 && w < s.in_width;
    input[i] = inside ? __ldg(x + c * ops.x_stride[1] + int64_t(h) * ops.x_stride[2] +
                              int64_t(w) * ops.x_stride[3])
                      : 0.f;
  }
  __syncthreads();

  const int out_row = out_row0 + int(threadIdx.x) / kTile;
  const int out_col = out_col0 + int(threadIdx.x) % kTile;
  if (out_row >= s.out_height || out_col >= s.out_width) return;
  // The window's conv pixels, clipped to the conv output (pool padding is never a maximum).
  const int row_begin = max(out_row * s.pool_stride_h - s.pool_pad_h, 0);
  const int row_end = min(out_row * s.pool_stride_h - s.pool_pad_h + s.pool_h, s.conv_height);
  const int col_begin = max(out_col * s.pool_stride_w - s.pool_pad_w, 0);
  const int col_end = min(out_col * s.pool_stride_w - s.pool_pad_w + s.pool_w, s.conv_width);

  float best[kOut];
#pragma unroll
  for (int k = 0; k < kOut; ++k) best[k] = -INFINITY;
  for (int conv_row = row_begin; conv_row < row_end; ++conv_row) {
    for (int conv_col = col_begin; conv_col < col_end; ++conv_col) {
      float acc[kOut];
#pragma unroll
      for (int k = 0; k < kOut; ++k) acc[k] = bias[k];
      const float* in = input + ((conv_row - conv_row0) * s.stride_h) * p.in_cols +
                        (conv_col - conv_col0) * s.stride_w;
      const float4* w = reinterpret_cast<const float4*>(weights);
      for (int c = 0; c < s.in_channels; ++c, in += plane) {
        for (int r = 0; r < s.kernel_h; ++r) {
          const float* in_row = in + r * s.dilation_h * p.in_cols;
          for (int q = 0; q < s.kernel_w; ++q, w += kOut / 4) {
            const float v = in_row[q * s.dilation_w];
#pragma unroll
            for (int k4 = 0; k4 < kOut / 4; ++k4) {
              const float4 w4 = w[k4];  // same address in every lane: a broadcast
              acc[4 * k4] = fmaf(v, w4.x, acc[4 * k4]);
              acc[4 * k4 + 1] = fmaf(v, w4.y, acc[4 * k4 + 1]);
              acc[4 * k4 + 2] = fmaf(v, w4.z, acc[4 * k4 + 2]);
              acc[4 * k4 + 3] = fmaf(v, w4.w, acc[4 * k4 + 3]);
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kOut; ++k) best[k] = max_keeping_nan(best[k], acc[k]);
    }
  }
  const int64_t plane_out = int64_t(s.out_height) * s.out_width;
  float* out = ops.out + image * s.out_channels * plane_out + int64_t(out_row) * s.out_width +
               out_col;
#pragma unroll
  for (int k = 0; k < kOut; ++k)
    if (k < s.out_channels) out[k * plane_out] = relu_keeping_nan(best[k]);
}

template <int kOut>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s, const SmallPlan& p,
                   cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> allowed[kMaxDevices];  // dynamic shared-memory limit already set
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (p.smem_bytes > 48 * 1024 &&
      (device >= kMaxDevices || allowed[device].load(std::memory_order_acquire) < p.smem_bytes)) {
    err = cudaFuncSetAttribute(conv_pool_small_kernel<kOut>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
    if (err != cudaSuccess) return err;
    if (device < kMaxDevices) allowed[device].store(p.smem_bytes, std::memory_order_release);
  }
  const int64_t blocks = int64_t(s.batch) * p.tiles_h * p.tiles_w;
  conv_pool_small_kernel<kOut><<<unsigned(blocks), kThreads, p.smem_bytes, stream>>>(ops, s, p);
  return cudaGetLastError();
}

}  // namespace

const char* small_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device) {
  if (s.out_channels > kMaxOutChannels) return "more than 16 output channels";
  if (int64_t(s.in_channels) * s.taps() > kMaxReduction)
    return "in_channels * kernel taps is larger than 256";
  const SmallPlan p = make_plan(s);
  if (p.smem_bytes > device.max_shared_bytes)
    return "the input region and weights of a 16 x 16 pooled tile do not fit in shared memory";
  if (int64_t(s.batch) * p.tiles_h * p.tiles_w > INT32_MAX) return "more than 2^31 - 1 tiles";
  return nullptr;
}

cudaError_t small_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   cudaStream_t stream) {
  const SmallPlan p = make_plan(s);
  switch (p.out_block) {
    case 4: return launch<4>(ops, s, p, stream);
    case 8: return launch<8>(ops, s, p, stream);
    default: return launch<kMaxOutChannels>(ops, s, p, stream);
  }
}
