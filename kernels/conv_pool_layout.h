// Layout conversions, our own kernels (conv_pool_layout.cu): to channels-last (NHWC: the general
// kernel's NHWC copy of a NCHW input for its cp.async loaders, and the op's channels-last output
// for the variants that write NCHW), and to slice-planar (the warp-specialized general kernel's
// copy of an input whose channels are not contiguous).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_shape.h"  // CONV_POOL_HD

// Columns of one phase's run in a row of the slice-planar copy with `phases` column phases
// (conv_pool_to_slices): a row is phases x this many 16-byte slots.
CONV_POOL_HD inline int conv_pool_phase_width(int width, int phases) {
  return (width + phases - 1) / phases;
}

// dst[((n * height + h) * width + w) * dst_channels + c] = src(n, c, h, w) for c < channels (at
// src + n * src_stride[0] + c * src_stride[1] + h * src_stride[2] + w * src_stride[3]), 0 for
// channels <= c < dst_channels; elements of element_bytes = 2 or 4 bytes (raw words: no
// conversion). On `stream`.
cudaError_t conv_pool_to_channels_last(const void* src, const int64_t* src_stride,
                                       int element_bytes, int64_t batch, int channels,
                                       int height, int width, int dst_channels, void* dst,
                                       cudaStream_t stream);

// The rows of x the slice-planar copy writes (conv_pool_to_slices).
struct CopyRows {
  int phases;
  uint32_t mask;  // bit r: the rows h with h mod phases = r are copied
};

// The rows of x some tap of `s` reads: kernel row r reads input rows oh x stride_h - pad_h + r x
// dilation_h, so only the residues (r x dilation_h - pad_h) mod stride_h (a 1 x 1 layer at
// stride 2 reads half the rows). {1, 1} where every residue is read or the stride is above the
// mask's 32 bits.
CONV_POOL_HD inline CopyRows conv_pool_copy_rows(const ConvPoolShape& s) {
  if (s.stride_h == 1 || s.stride_h > 32) return {1, 1u};
  uint32_t mask = 0;
  for (int r = 0; r < s.kernel_h; ++r) {
    const int residue = (r * s.dilation_h - s.pad_h) % s.stride_h;
    mask |= 1u << (residue < 0 ? residue + s.stride_h : residue);
  }
  const uint32_t all = s.stride_h == 32 ? ~0u : (1u << s.stride_h) - 1u;
  return mask == all ? CopyRows{1, 1u} : CopyRows{s.stride_h, mask};
}

// Slice-planar: dst[(((n * slices + j) * height + h) * width + w) * E + e] = src(n, j E + e, h, w)
// for channel j E + e < channels, else 0, with E = 16 / element_bytes channels a 16-byte slice
// (element_bytes = 2 or 4; raw words, no conversion). With phases P > 1, a row is P x
// ceil(width / P) slots and column w lands at (w % P) x ceil(width / P) + w / P (zeros in the
// slots no column fills; those of the phases outside phase_mask, bit r phase r, are not
// written: conv_pool_layout.cuh). Rows h whose residue h mod rows.phases is outside rows.mask
// are not written either ({1, 1}: every row). Any strides. On `stream`.
cudaError_t conv_pool_to_slices(const void* src, const int64_t* src_stride, int element_bytes,
                                int64_t batch, int channels, int height, int width, int phases,
                                uint32_t phase_mask, CopyRows rows, int slices, void* dst,
                                cudaStream_t stream);
