// The sm_80 kernels of conv_relu_maxpool.cu (direct, the chunked tiled variants and the flat
// ones, the flat wgmma mainloop included), as the registry (conv_relu_maxpool_registry.cu) and
// the choice (conv_relu_maxpool_choose.cu) use them.
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// Input channels per stage of the chunked tiled kernels (= the mma K): layers with fewer take
// the flat reduction off the 3x3 / 2x2 path.
constexpr int kTiledChannelChunk = 8;

// Why the tiled or flat `variant` cannot run `shape` on `device` (its tile, shared memory and
// grid; the element type is the registry's check), or nullptr when it can.
const char* tiled_conv_pool_unsupported(const ConvPoolShape& shape, int variant,
                                        const ConvPoolDevice& device);

// Whether the mma.sync flat `variant` (tiled_tf32_flat, tiled_16bit_flat) runs `shape` in
// blocks of 64 channels, one per SM: where its wgmma mainloop measured faster.
bool flat_conv_pool_one_block_per_sm(const ConvPoolShape& shape, int variant,
                                     const ConvPoolDevice& device);

// Launch `direct` / a tiled or flat `variant` (the caller checked the variant runs `shape`).
cudaError_t direct_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                    cudaStream_t stream);
cudaError_t tiled_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                   int variant, const ConvPoolDevice& device,
                                   cudaStream_t stream);
