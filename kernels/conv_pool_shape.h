// Geometry of one fused Conv2d -> ReLU -> MaxPool2d problem.
//
// Built and validated once, on the host, by conv_relu_maxpool_binding.cpp
// (make_conv_pool_shape); the kernels receive it by value and never re-derive
// a size on their own. Plain C++ so that both nvcc and the host compiler read it.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define CONV_POOL_HD __host__ __device__
#else
#define CONV_POOL_HD
#endif

// Element type of x, weight, bias and the output (all four share it). 0 is float32, so a
// zero-initialised shape is a float32 one.
enum ConvPoolElement : int {
  kElementFloat32 = 0,
  kElementFloat16 = 1,   // IEEE half (__half)
  kElementBFloat16 = 2,  // bfloat16 (__nv_bfloat16)
};

struct ConvPoolShape {
  // Input x: [batch, in_channels, in_height, in_width], NCHW contiguous.
  int batch, in_channels, in_height, in_width;
  // Weight: [out_channels, in_channels, kernel_h, kernel_w], contiguous.
  int out_channels, kernel_h, kernel_w;
  int stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  // Convolution output (never stored): [batch, out_channels, conv_height, conv_width].
  int conv_height, conv_width;
  // Max-pool over the ReLU'd convolution output; pool dilation is 1.
  int pool_h, pool_w, pool_stride_h, pool_stride_w, pool_pad_h, pool_pad_w;
  // Output: [batch, out_channels, out_height, out_width], NCHW contiguous.
  int out_height, out_width;
  bool has_bias;
  ConvPoolElement element;
  // The output is channels-last (it follows x's or the weight's layout, as PyTorch's
  // convolution): the automatic choice weighs the re-layout that a kernel writing NCHW alone
  // pays (conv_relu_maxpool_choose). The kernels read the layouts from their operands' strides.
  bool channels_last;

  CONV_POOL_HD int64_t input_elements() const {
    return int64_t(batch) * in_channels * in_height * in_width;
  }
  CONV_POOL_HD int64_t output_elements() const {
    return int64_t(batch) * out_channels * out_height * out_width;
  }
  CONV_POOL_HD int taps() const { return kernel_h * kernel_w; }
  // First conv row / column of the pooling window of pooled output row / column `out` (< 0 in
  // the pool padding).
  CONV_POOL_HD int window_row0(int out) const { return out * pool_stride_h - pool_pad_h; }
  CONV_POOL_HD int window_col0(int out) const { return out * pool_stride_w - pool_pad_w; }
  // Input row / column under tap (0, 0) of conv row / column `conv` (< 0 in the padding).
  CONV_POOL_HD int input_row0(int conv) const { return conv * stride_h - pad_h; }
  CONV_POOL_HD int input_col0(int conv) const { return conv * stride_w - pad_w; }
};

// The output lengths, the one home of these formulas: the binding's checks use them on int64_t
// sizes and, for the op's fake implementation (torch.compile, torch.export, meta tensors), on
// c10::SymInt ones, which may be symbolic (a comparison then guards). Size is either.
//
// Output length of one pooling dimension, exactly as PyTorch's pooling_output_shape:
// in ceil mode the last window must start inside the input or the left padding.
template <class Size>
Size pooled_length(const Size& in, int64_t kernel, int64_t pad, int64_t stride, bool ceil_mode) {
  const Size numerator = in + 2 * pad - kernel + (ceil_mode ? stride - 1 : 0);
  // Floor division that is also right for negative numerators.
  Size out = numerator >= 0 ? numerator / stride + 1 : Size(1) - (stride - 1 - numerator) / stride;
  if (ceil_mode && (out - 1) * stride >= in + pad) out = out - 1;
  return out;
}

template <class Size>
Size conv_length(const Size& in, const Size& kernel, int64_t pad, int64_t stride,
                 int64_t dilation) {
  const Size numerator = in + 2 * pad - (kernel - 1) * dilation - 1;
  if (numerator < 0) return Size(0);
  return numerator / stride + 1;
}

// The geometry both fast paths compile in: a 3x3 / stride 1 / dilation 1 convolution (any
// padding, conv_3x3_applies) followed by a 2x2 / stride 2 max-pool whose every window lies
// inside the conv output (no pool padding; floor mode, or ceil mode that adds no partial
// window).
inline bool conv_3x3_applies(const ConvPoolShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 1 && s.stride_w == 1 &&
         s.dilation_h == 1 && s.dilation_w == 1;
}
// A 2 x 2 / stride 2 pool whose every window lies inside the conv output (windows start at even
// conv rows and columns and never clip).
inline bool pool_2x2_inside(const ConvPoolShape& s) {
  return s.pool_h == 2 && s.pool_w == 2 && s.pool_stride_h == 2 && s.pool_stride_w == 2 &&
         s.pool_pad_h == 0 && s.pool_pad_w == 0 && 2 * s.out_height <= s.conv_height &&
         2 * s.out_width <= s.conv_width;
}
inline bool fast_path_applies(const ConvPoolShape& s) {
  return conv_3x3_applies(s) && pool_2x2_inside(s);
}

// A 1 x 1 / stride 1 pool without padding: no pool at all (conv -> ReLU), the output the conv
// output (ceil mode changes nothing there).
inline bool identity_pool(const ConvPoolShape& s) {
  return s.pool_h == 1 && s.pool_w == 1 && s.pool_stride_h == 1 && s.pool_stride_w == 1 &&
         s.pool_pad_h == 0 && s.pool_pad_w == 0;
}

// The 3 x 3 Hopper kernel's geometry: the fast path's, or the same convolution with no pool.
inline bool wgmma_3x3_applies(const ConvPoolShape& s) {
  return fast_path_applies(s) || (conv_3x3_applies(s) && identity_pool(s));
}
