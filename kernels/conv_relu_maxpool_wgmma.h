// The Hopper wgmma variants of the fused Conv2d -> ReLU -> MaxPool2d kernel
// (conv_relu_maxpool_wgmma.cu), as used by the launcher in conv_relu_maxpool.cu:
// tiled_tf32_wgmma for float32 shapes, tiled_16bit_wgmma for float16 / bfloat16 ones. These
// functions follow shape.element; the launcher pairs each variant with its element types.
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// Why the wgmma kernel cannot run `shape` on `device`, or nullptr when it can.
const char* wgmma_conv_pool_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device);

// Scratch bytes it needs: the weights in the staged layout, [channel block][chunk][tap]
// [channel slice][out channel][16 bytes: 4 fp32 or 8 16-bit channels], zero-padded.
int64_t wgmma_conv_pool_workspace_bytes(const ConvPoolShape& shape);

// Launches it (the caller checked wgmma_conv_pool_unsupported first; operands.workspace holds
// wgmma_conv_pool_workspace_bytes).
cudaError_t wgmma_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                   const ConvPoolDevice& device, cudaStream_t stream);
