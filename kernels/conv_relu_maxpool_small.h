// The variants for few output channels (conv_relu_maxpool_small.cu: small_fp32 and small_16bit
// on CUDA cores, one kernel for the three element types; small_tf32, the same kernel with a TF32
// tensor-core inner loop), as used by the launcher in conv_relu_maxpool.cu.
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// Why the small variant (tensor_cores: small_tf32) cannot run `shape` on `device`, or nullptr
// when it can.
const char* small_conv_pool_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                        bool tensor_cores);

// Whether small_fp32 / small_16bit run `shape` with their patch loop (stride 1, 3x3 or 5x5, 2x2
// windows, at most 8 channels), which measured as fast as small_tf32 there (LeNet: 16.7 against
// 17.7 us); elsewhere their generic loop is the slower one (docs/PERF.md).
bool small_conv_pool_patch_loop(const ConvPoolShape& shape);

// Launches it for shape.element (the caller checked small_conv_pool_unsupported first).
cudaError_t small_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                   bool tensor_cores, cudaStream_t stream);
