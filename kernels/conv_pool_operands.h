// Host-side views of the operands (their data and element size) and the checks that decide
// whether a kernel may move input rows and weight rows with vector copies. Shared by the
// launchers.
#pragma once

#include <cstdint>

#include "conv_relu_maxpool.h"

inline bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}
inline bool aligned16(const void* ptr) { return aligned(ptr, 16); }

// The bytes of one element of x, the weight and the output, and x's and the weight's data,
// whatever their element type.
inline int element_bytes(const ConvPoolShape& s) { return s.element == kElementFloat32 ? 4 : 2; }
inline const void* input_data(const ConvPoolShape& s, const ConvPoolOperands& ops) {
  return s.element == kElementFloat32 ? static_cast<const void*>(ops.x)
                                      : static_cast<const void*>(ops.x16);
}
inline const void* weight_data(const ConvPoolShape& s, const ConvPoolOperands& ops) {
  return s.element == kElementFloat32 ? static_cast<const void*>(ops.weight)
                                      : static_cast<const void*>(ops.weight16);
}

// Input rows that split into runs of 4 consecutive elements: unit column stride, every row start
// a multiple of 4 elements from x, a width that is a multiple of 4.
inline bool input_rows_in_runs_of_4(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return ops.x_stride[3] == 1 && ops.x_stride[2] % 4 == 0 && ops.x_stride[1] % 4 == 0 &&
         ops.x_stride[0] % 4 == 0 && s.in_width % 4 == 0;
}

// 16-byte copies of float32 input rows (4 elements each).
inline bool vectorizable_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return input_rows_in_runs_of_4(ops, s) && aligned16(ops.x);
}

// 8-byte loads of float16 / bfloat16 input rows (4 elements each).
inline bool vectorizable_input_16bit(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return input_rows_in_runs_of_4(ops, s) && aligned(ops.x16, 8);
}

// 16-byte copies of float16 / bfloat16 input rows (8 elements each): unit column stride, every
// row start a multiple of 8 elements from a 16-byte aligned x, a width that is a multiple of 8.
inline bool input_rows_in_runs_of_8_16bit(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return ops.x_stride[3] == 1 && ops.x_stride[2] % 8 == 0 && ops.x_stride[1] % 8 == 0 &&
         ops.x_stride[0] % 8 == 0 && s.in_width % 8 == 0 && aligned16(ops.x16);
}

// 4-byte copies of float16 / bfloat16 input rows in column pairs: unit column stride, every row
// start an even number of elements from a 4-byte aligned x, an even width.
inline bool input_rows_in_pairs_16bit(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  return ops.x_stride[3] == 1 && ops.x_stride[2] % 2 == 0 && ops.x_stride[1] % 2 == 0 &&
         ops.x_stride[0] % 2 == 0 && s.in_width % 2 == 0 && aligned(ops.x16, 4);
}

// 16-byte copies of weight rows: a contiguous (K, C, kH, kW) weight with C * kH * kW a multiple
// of the elements in 16 bytes (4 float32, 8 float16 / bfloat16).
inline bool vectorizable_weights(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                 int elements_per_16_bytes = 4) {
  const int64_t taps = s.taps();
  return ops.weight_stride[3] == 1 && ops.weight_stride[2] == s.kernel_w &&
         ops.weight_stride[1] == taps && ops.weight_stride[0] == s.in_channels * taps &&
         (s.in_channels * taps) % elements_per_16_bytes == 0 && aligned16(ops.weight);
}
