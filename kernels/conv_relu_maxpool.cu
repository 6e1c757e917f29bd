// Fused Conv2d -> ReLU -> MaxPool2d (work in progress: direct variant only).
#include <cuda_runtime.h>

#include <cstdint>

#include "conv_relu_maxpool.h"

namespace {

__device__ __forceinline__ float max_propagating_nan(float running, float v) {
  return (v > running || v != v) ? v : running;
}

__device__ __forceinline__ float relu_keeping_nan(float v) { return v > 0.f || v != v ? v : 0.f; }

__global__ void conv_pool_direct_kernel(ConvPoolOperands ops, ConvPoolShape s) {
  const int64_t total = s.output_elements();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    const int ow = int(rest % s.out_width); rest /= s.out_width;
    const int oh = int(rest % s.out_height); rest /= s.out_height;
    const int k = int(rest % s.out_channels);
    const int64_t n = rest / s.out_channels;
    const float bias = ops.bias ? ops.bias[k * ops.bias_stride] : 0.f;
    float best = -INFINITY;
    const int ch0 = oh * s.pool_stride_h - s.pool_pad_h, cw0 = ow * s.pool_stride_w - s.pool_pad_w;
    for (int ph = max(ch0, 0); ph < min(ch0 + s.pool_h, s.conv_height); ++ph)
      for (int pw = max(cw0, 0); pw < min(cw0 + s.pool_w, s.conv_width); ++pw) {
        float acc = bias;
        for (int c = 0; c < s.in_channels; ++c)
          for (int r = 0; r < s.kernel_h; ++r) {
            const int h = ph * s.stride_h - s.pad_h + r * s.dilation_h;
            if (h < 0 || h >= s.in_height) continue;
            for (int q = 0; q < s.kernel_w; ++q) {
              const int w = pw * s.stride_w - s.pad_w + q * s.dilation_w;
              if (w < 0 || w >= s.in_width) continue;
              acc = fmaf(__ldg(ops.x + n * ops.x_stride[0] + c * ops.x_stride[1] +
                               h * ops.x_stride[2] + w * ops.x_stride[3]),
                         __ldg(ops.weight + k * ops.weight_stride[0] + c * ops.weight_stride[1] +
                               r * ops.weight_stride[2] + q * ops.weight_stride[3]),
                         acc);
            }
          }
        best = max_propagating_nan(best, acc);
      }
    ops.out[i] = relu_keeping_nan(best);
  }
}

}  // namespace

extern "C" const char* conv_relu_maxpool_variant_name(int variant) {
  switch (variant) {
    case kVariantDirect: return "direct";
    case kVariantTiledFp32: return "tiled_fp32";
    case kVariantTiledTf32: return "tiled_tf32";
    case kVariantTiled3xTf32: return "tiled_3xtf32";
    default: return nullptr;
  }
}

extern "C" const char* conv_relu_maxpool_unsupported(const ConvPoolShape*, int variant, int) {
  return variant == kVariantDirect ? nullptr : "not implemented yet";
}

extern "C" int conv_relu_maxpool_choose(const ConvPoolShape*, int config, bool, int) {
  return config == kVariantAuto ? kVariantDirect : config;
}

extern "C" cudaError_t conv_relu_maxpool_launch(const ConvPoolOperands* ops,
                                                const ConvPoolShape* s, int, cudaStream_t stream) {
  const int64_t total = s->output_elements();
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  conv_pool_direct_kernel<<<unsigned(blocks < 65535 * 16 ? blocks : 65535 * 16), threads, 0,
                            stream>>>(*ops, *s);
  return cudaGetLastError();
}
