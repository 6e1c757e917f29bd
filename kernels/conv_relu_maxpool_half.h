// The float16 / bfloat16 variants of the fused Conv2d -> ReLU -> MaxPool2d kernel
// (conv_relu_maxpool_half.cu), as used by the launcher in conv_relu_maxpool.cu:
//   direct_16bit     one thread per pooled output, any shape (the 16-bit fallback);
//   tiled_16bit_mma  implicit GEMM on mma.sync m16n8k16 (f16 / bf16 in, fp32 accumulation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_relu_maxpool.h"

// Why `variant` (kVariantDirect or kVariantTiledMma) cannot run `shape` on `device`, or
// nullptr when it can.
const char* half_conv_pool_unsupported(const ConvPoolShape& shape, int variant,
                                       const ConvPoolDevice& device);

// Scratch bytes `variant` needs: tiled_16bit_mma re-lays out the weights ([out channel][tap]
// [channel], channels padded to 16) and the input (NHWC, channels padded to 16) there.
int64_t half_conv_pool_workspace_bytes(const ConvPoolShape& shape, int variant);

// Launches `variant` (the caller checked half_conv_pool_unsupported first; operands.workspace
// holds half_conv_pool_workspace_bytes).
cudaError_t half_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                  int variant, cudaStream_t stream);
