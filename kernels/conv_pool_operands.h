// Host-side checks on the operands that decide whether a kernel may move input rows and weight
// rows with 16-byte copies. Shared by the launchers in conv_relu_maxpool.cu and
// conv_relu_maxpool_wgmma.cu.
#pragma once

#include <cstdint>

#include "conv_relu_maxpool.h"

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte copies of input rows: unit column stride, every row start 16-byte aligned.
inline bool vectorizable_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return ops.x_stride[3] == 1 && ops.x_stride[2] % 4 == 0 && ops.x_stride[1] % 4 == 0 &&
         ops.x_stride[0] % 4 == 0 && s.in_width % 4 == 0 && aligned16(ops.x);
}

// 16-byte copies of weight rows: a contiguous (K, C, kH, kW) weight with C * kH * kW % 4 == 0.
inline bool vectorizable_weights(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  const int64_t taps = s.taps();
  return ops.weight_stride[3] == 1 && ops.weight_stride[2] == s.kernel_w &&
         ops.weight_stride[1] == taps && ops.weight_stride[0] == s.in_channels * taps &&
         (s.in_channels * taps) % 4 == 0 && aligned16(ops.weight);
}
