// Subsampling for strided layers, in every form by default ($CONV_POOL_GENERAL_SUBSAMPLE,
// general_hooks.h: "0" off, "split" the 3xTF32 form alone). Along a dimension whose stride
// S > 1 is a whole factor of the taps' spacing (a one-tap kernel, or a dilation D that S
// divides), every input row a tap reads is r0 + S j with r0 = (-pad) mod S, so the layer is
// one of stride 1 over x's rows r0, r0 + S, ... only:
//   x'[n, c, j, q] = x[n, c, r0 + S j, q]   (a view: x's pointer and strides, no copy)
//   pad' = (pad + r0) / S, dilation' = D / S (1 for one tap), stride' = 1,
//   in' = ceil((in - r0) / S)
// Conv row o's tap t reads x' row o - pad' + t dilation' = (that x row - r0) / S, so the rows
// of x' it reads are those of x, and rows past x' are past x: the same zeros. The conv and
// pooled lengths stay the layer's (ConvPoolShape holds them), so the epilogue is unchanged.
// A launch's copy of x (the 3xTF32 form's split NHWC copy, the slice-planar copy) holds the
// rows and columns of x' alone (a fourth of x for a 1 x 1 / 2 layer), and the halos hold no
// skipped rows or columns (the TF32 and 16-bit forms without it gather x's rows at the stride
// and stage whole column runs: on 39 of the fuzz's strided rows, an H100, subsampling took
// 0.951x of their kernel time on the geometric mean, 0.76-1.04x).
#pragma once

#include <cstdint>

#include "../conv_relu_maxpool.h"
#include "general_hooks.h"

namespace general_wgmma {

struct SubsampledDim {
  bool applies;
  int length, pad, dilation, first;  // in', pad', dilation', r0
};

inline SubsampledDim subsampled_dim(int length, int kernel, int stride, int pad, int dilation) {
  SubsampledDim d{false, length, pad, dilation, 0};
  if (stride < 2 || (kernel > 1 && dilation % stride != 0)) return d;
  const int first = ((-pad) % stride + stride) % stride;
  if (length <= first) return d;  // no row of x under any tap: left as it is
  d.applies = true;
  d.length = (length - first + stride - 1) / stride;
  d.pad = (pad + first) / stride;
  d.dilation = kernel > 1 ? dilation / stride : 1;
  d.first = first;
  return d;
}

inline SubsampledDim subsampled_rows(const ConvPoolShape& s) {
  return subsampled_dim(s.in_height, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
}
inline SubsampledDim subsampled_cols(const ConvPoolShape& s) {
  return subsampled_dim(s.in_width, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
}

// Whether the launch of `s` (split: the 3xTF32 form) runs on x' instead of x (the geometry
// first: most layers are not strided, and the hook is read only for those that are).
inline bool subsample_applies(const ConvPoolShape& s, bool split) {
  return (subsampled_rows(s).applies || subsampled_cols(s).applies) &&
         hooks::subsample_allowed(split);
}

// The layer over x'.
inline ConvPoolShape subsampled_shape(const ConvPoolShape& s) {
  ConvPoolShape f = s;
  if (const SubsampledDim r = subsampled_rows(s); r.applies) {
    f.in_height = r.length;
    f.pad_h = r.pad;
    f.dilation_h = r.dilation;
    f.stride_h = 1;
  }
  if (const SubsampledDim c = subsampled_cols(s); c.applies) {
    f.in_width = c.length;
    f.pad_w = c.pad;
    f.dilation_w = c.dilation;
    f.stride_w = 1;
  }
  return f;
}

// `ops` with x' for x: the first row and column moved to r0, the strides S times x's.
inline ConvPoolOperands subsampled_operands(const ConvPoolOperands& ops,
                                            const ConvPoolShape& s) {
  ConvPoolOperands o = ops;
  int64_t offset = 0;
  if (const SubsampledDim r = subsampled_rows(s); r.applies) {
    offset += r.first * ops.x_stride[2];
    o.x_stride[2] = ops.x_stride[2] * s.stride_h;
  }
  if (const SubsampledDim c = subsampled_cols(s); c.applies) {
    offset += c.first * ops.x_stride[3];
    o.x_stride[3] = ops.x_stride[3] * s.stride_w;
  }
  if (s.element == kElementFloat32)
    o.x = ops.x + offset;
  else
    o.x16 = ops.x16 + offset;
  return o;
}

// The same for the plan's optional operands: x' of `ops` in `view`, or nullptr (NCHW) for
// nullptr.
inline const ConvPoolOperands* subsampled_operands(const ConvPoolOperands* ops,
                                                   const ConvPoolShape& s,
                                                   ConvPoolOperands& view) {
  if (ops == nullptr) return nullptr;
  view = subsampled_operands(*ops, s);
  return &view;
}

}  // namespace general_wgmma
