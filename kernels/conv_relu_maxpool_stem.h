// The variants for a network's first layer (conv_relu_maxpool_stem.cu): `stem_tf32` (float32)
// and `stem_16bit` (float16 / bfloat16), one kernel for the three element types, as used by the
// launcher in conv_relu_maxpool.cu.
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// Why the stem kernel cannot run `shape` on `device`, or nullptr when it can (the caller checked
// the element type against the variant).
const char* stem_conv_pool_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device);

// Launches it for shape.element (the caller checked stem_conv_pool_unsupported first). With
// out_stride (the output's element strides, image, channel, row, column) it writes that layout
// itself, else NCHW.
cudaError_t stem_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                  const ConvPoolDevice& device, cudaStream_t stream,
                                  const int64_t* out_stride = nullptr);

