// The CUDA-core variants for few output channels (conv_relu_maxpool_small.cu: small_fp32 and
// small_16bit, one kernel for the three element types), as used by the launcher in
// conv_relu_maxpool.cu.
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// Why the small variant cannot run `shape` on `device`, or nullptr when it can.
const char* small_conv_pool_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device);

// Launches it for shape.element (the caller checked small_conv_pool_unsupported first).
cudaError_t small_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                   cudaStream_t stream);
