// The Hopper wgmma variants of the fused Conv2d -> ReLU -> MaxPool2d kernel
// (conv_relu_maxpool_wgmma.cu), as used by the launcher in conv_relu_maxpool.cu:
// tiled_tf32_wgmma for float32 shapes, tiled_16bit_wgmma for float16 / bfloat16 ones, and with
// `split` tiled_3xtf32_wgmma (float32, 3xTF32: allow_tf32 = False). These functions follow
// shape.element; the launcher pairs each variant with its element types. The functions without
// `split` answer for the TF32 and 16-bit variants only (3xTF32 takes no weights packed ahead
// of time).
#pragma once

#include <cuda_runtime.h>

#include "conv_relu_maxpool.h"

// ConvPoolDevice::max_clusters of the current device (zeros where a cluster launch fails:
// off Hopper, or a module without sm_90a code).
void wgmma_cluster_capacity(int (&max_clusters)[kConvPoolMaxCluster + 1]);

// Why no wgmma code can run on `device` (a module built without sm_90a code, or a GPU other than
// Hopper), or nullptr when it can: the flat kernel's wgmma mainloop asks this too.
const char* wgmma_unavailable(const ConvPoolDevice& device);

// Why the wgmma kernel cannot run `shape` on `device`, or nullptr when it can.
const char* wgmma_conv_pool_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                        bool split = false);

// Scratch bytes it needs: the weights in the staged layout, [channel block][chunk][tap]
// [channel slice][out channel][16 bytes: 4 fp32 or 8 16-bit channels], zero-padded.
// (3xTF32: [tap][channel slice][small, big][out channel][16 bytes], then, for reductions of more
// than 8 chunks, the sums of each block's runs of 8 chunks: flush_run in the .cu.)
int64_t wgmma_conv_pool_workspace_bytes(const ConvPoolShape& shape, bool split = false);

// Bytes of the weights packed ahead of time (wgmma_pack_weight_launch): the same layout, for
// the channel-block width that the weight alone decides (shape's channels, kernel size and
// element). Layers of few tiles run narrower blocks and pack their own.
int64_t wgmma_packed_weight_bytes(const ConvPoolShape& shape);

// Whether a wgmma kernel can take this weight (shape's channels, kernel size and element) on
// `device`, so that packing it ahead of time can pay: the module has sm_90a code, the device is
// Hopper, the kernel is 3x3.
bool wgmma_packs_weight(const ConvPoolShape& shape, const ConvPoolDevice& device);

// Whether the launch for this shape reads operands.packed_weight (when given) instead of
// packing into its workspace: the one-block-per-SM tiles (wgmma.cu, takes_packed_weight), not
// the two-blocks ones of layers of at most 64 channels nor their twins, and not layers of few
// tiles (kFewTiles).
bool wgmma_takes_packed_weight(const ConvPoolShape& shape);

// Whether a launch without packed weights packs them in a kernel of its own on every SM first
// (a large weight over few blocks, or a split reduction) rather than in its blocks
// (ConvPoolPlanInfo::packs_weight_apart).
bool wgmma_packs_weight_apart(const ConvPoolShape& shape, const ConvPoolDevice& device,
                              bool split = false);

// Blocks per tile when the launch splits its tiles' chunks over clusters (a layer of few
// tiles on many SMs; ConvPoolPlanInfo::wgmma_split), else 1.
int wgmma_split(const ConvPoolShape& shape, const ConvPoolDevice& device, bool split = false);

// The tile the launch runs (ConvPoolPlanInfo::wgmma_tile): "wide_n128", "strip_n128", ...
const char* wgmma_tile_name(const ConvPoolShape& shape, bool split = false);

// The launch's tile count; for 0 <= tile < count also where that tile sits (origin[0..3]):
// image, first output channel, first pooled row and column (a strip's first piece), as the kernel's
// tile_origin computes them (conv_relu_maxpool_wgmma_tile_origin, for tests).
int wgmma_tile_origin(const ConvPoolShape& shape, int tile, int64_t* origin, bool split = false);

// Packs operands.weight into `packed` (wgmma_packed_weight_bytes, 16-byte aligned) in the
// staged layout, on `stream`: a launch given it as operands.packed_weight skips the packing.
cudaError_t wgmma_pack_weight_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                     float* packed, const ConvPoolDevice& device,
                                     cudaStream_t stream);

// Launches it (the caller checked wgmma_conv_pool_unsupported first; operands.workspace holds
// wgmma_conv_pool_workspace_bytes, or operands.packed_weight the packed weights). out_stride:
// the strides of a dense channels-last output (other strides: cudaErrorInvalidValue), or
// nullptr (NCHW).
cudaError_t wgmma_conv_pool_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                   const ConvPoolDevice& device, cudaStream_t stream,
                                   const int64_t* out_stride = nullptr, bool split = false);

