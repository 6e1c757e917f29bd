// The layer transposed (general_wgmma.cu's transpose_chosen; $CONV_POOL_GENERAL_TRANSPOSE,
// general_hooks.h). A convolution and a max-pool treat rows and columns alike, so the layer
// over x with rows and columns exchanged, every per-dimension setting exchanged with them
// (lengths, kernel, stride, padding, dilation, pool window, pool stride and padding; ceil mode
// is one for both), writes the layer's output with rows and columns exchanged:
//   x'[n, c, j, i] = x[n, c, i, j],  w'[k, c, q, r] = w[k, c, r, q],  out' likewise
// A view: the row and column strides of x, the weight and the output swapped. The
// general kernel's tiles (8 x 32, 16 x 16 or 32 x 8 conv pixels, small images side by side
// along the columns) and its steps (whole kernel rows a stage) are not symmetric, so a tall,
// narrow layer or a kernel of one column can plan fewer or fuller tiles, or fewer steps, the
// other way round. The taps' order in the reduction changes with it (the sums' rounding, not
// their terms).
#pragma once

#include <utility>

#include "../conv_relu_maxpool.h"

namespace general_wgmma {

inline ConvPoolShape transposed_shape(const ConvPoolShape& s) {
  ConvPoolShape t = s;
  std::swap(t.in_height, t.in_width);
  std::swap(t.kernel_h, t.kernel_w);
  std::swap(t.stride_h, t.stride_w);
  std::swap(t.pad_h, t.pad_w);
  std::swap(t.dilation_h, t.dilation_w);
  std::swap(t.conv_height, t.conv_width);
  std::swap(t.pool_h, t.pool_w);
  std::swap(t.pool_stride_h, t.pool_stride_w);
  std::swap(t.pool_pad_h, t.pool_pad_w);
  std::swap(t.out_height, t.out_width);
  return t;
}

// x's and the weight's row and column strides swapped (bias, output pointer and workspace as
// they are).
inline ConvPoolOperands transposed_operands(const ConvPoolOperands& ops) {
  ConvPoolOperands t = ops;
  std::swap(t.x_stride[2], t.x_stride[3]);
  std::swap(t.weight_stride[2], t.weight_stride[3]);
  return t;
}

}  // namespace general_wgmma
