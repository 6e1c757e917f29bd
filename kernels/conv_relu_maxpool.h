// C interface of the fused Conv2d -> ReLU -> MaxPool2d launcher (conv_relu_maxpool.cu).
// No PyTorch types: the binding checks tensors and builds the ConvPoolShape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_shape.h"

// Kernel variants, selectable by the `config` argument of the Python op: the ids. A variant is
// one algorithm; where it runs several element types (a float32 and a 16-bit member: dtype twins
// such as direct / direct_16bit), the element type picks the member and its name, and both names
// map to the one id (conv2d_relu_maxpool_variants). What each is and runs (names, family,
// element types, limits, workspace, launch) is the registry's, conv_relu_maxpool_registry.cu,
// the one table of them.
enum ConvPoolVariant : int {
  kVariantAuto = -1,          // pick by shape and precision (conv_relu_maxpool_choose)
  kVariantDirect = 0,         // one thread per pooled output, any shape, fp32 accumulation
  kVariantTiledFp32 = 1,      // shared-memory tiles, FFMA, float32
  kVariantTiledMma = 2,       // implicit GEMM on mma.sync, fp32 accumulation: TF32 chunks of 8
                              // channels (float32), m16n8k16 over a packed copy (16-bit)
  kVariantTiled3xTf32 = 3,    // as 2 (float32) with 3xTF32 error compensation: fp32 accuracy
  kVariantTiledTf32Wide = 4,  // as 2 (float32) with 16 warps (warp tile 64 x 32) instead of 8
  kVariantFlat = 5,           // as 2, reduction over flattened (channel, tap): few input channels
  kVariantWgmma = 6,          // Hopper wgmma (sm_90a), operands from shared memory: 3x3 / 2x2 only
  kVariantSmall = 7,          // CUDA cores, all (<= 16) output channels per thread: tiny layers
  kVariantSmallTf32 = 8,      // as 7 on TF32 tensor cores (mma.sync): <= 8 channels, 2x2 / 2 pool
  kVariantTiled3xTf32Flat = 9,    // as 5 with 3xTF32 (as 3), float32
  kVariantTiled3xTf32Wgmma = 10,  // as 6 with 3xTF32 (as 3), float32
  kVariantStem = 11,          // first layers: in_channels * taps <= 32, <= 64 output channels,
                              // 2x2 / 2 pool; mma.sync with the weights in registers
  kVariantFlatWgmma = 12,     // as 5 on Hopper wgmma (sm_90a), pixels from registers
  kVariantGeneralWgmma = 13,  // Hopper wgmma for any conv and pool geometry, the weights
                              // streamed (kernels/hopper/)
  kVariantGeneral3xTf32Wgmma = 14,  // as 13 with 3xTF32 (as 3), float32
  kVariantCount = 15,
};

// What the choice of variant needs to know about the GPU (conv_relu_maxpool_query_device; the
// binding fills it once per device).
constexpr int kConvPoolMaxCluster = 8;  // the portable limit of blocks per cluster
struct ConvPoolDevice {
  int max_shared_bytes;    // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int sm_count;            // cudaDevAttrMultiProcessorCount
  int compute_capability;  // 10 * major + minor, e.g. 90 for Hopper
  // max_clusters[s]: clusters of s blocks, each filling an SM, that the GPU runs at once
  // (cudaOccupancyMaxActiveClusters; its GPCs bound it, not only sm_count), s = 2..8; 0 where
  // unknown or unsupported (no cluster launches then).
  int max_clusters[kConvPoolMaxCluster + 1];
};

// One variant as the registry describes it (conv_relu_maxpool_variant_info): its members per
// element type, float32 and 16-bit (float16 and bfloat16 share one), each with the name, math
// and source file it has there; nullptr fields where it takes no input of that kind.
struct ConvPoolVariantInfo {
  const char* name;    // the float32 member's name: "direct", "tiled_tf32_wgmma", ...
  const char* family;  // the algorithm: direct, tiled, flat, flat_wgmma, wgmma, small, stem,
                       // general
  const char* math;    // the float32 member's: fp32 (CUDA cores), tf32, 3xtf32 (fp32-accurate)
  const char* source;  // the file under kernels/ with the float32 member's host code
  unsigned elements;   // bit e set: takes ConvPoolElement e
  int arch;            // lowest compute capability it is built for: 0 any, 80, 90 (sm_90a)
  const char* name_16bit;    // the 16-bit member's: "direct_16bit", "tiled_16bit_wgmma", ...
  const char* math_16bit;    // 16bit (tensor cores on 16-bit operands) or fp32 (CUDA cores)
  const char* source_16bit;
};

extern "C" {

// The registry's row for `variant` into *info; false when out of range.
bool conv_relu_maxpool_variant_info(int variant, ConvPoolVariantInfo* info);

// `device`'s ConvPoolDevice (the caller's current device is kept).
cudaError_t conv_relu_maxpool_query_device(int device, ConvPoolDevice* info);

// Name of `variant` for inputs of `element` (a ConvPoolElement): its member's for that element
// type ("direct" for float32, "direct_16bit" for float16), the float32 member's where it has no
// member for it or `element` is out of range; nullptr when `variant` is out of range.
const char* conv_relu_maxpool_variant_name(int variant, int element);

// Why `variant` cannot run `shape` on `device`, or nullptr when it can.
const char* conv_relu_maxpool_unsupported(const ConvPoolShape* shape, int variant,
                                          const ConvPoolDevice* device);

// The variant that `config` resolves to: `config` itself when it names one,
// else the fastest variant that supports the shape at the requested precision
// (TF32 allowed or not, as torch.backends.cudnn.allow_tf32 says).
int conv_relu_maxpool_choose(const ConvPoolShape* shape, int config, bool allow_tf32,
                             const ConvPoolDevice* device);

// Device pointers and element strides of the op's tensors. x and weight may
// have any strides (channels-last included); out is NCHW contiguous.
// The pointers are set through the member that shape.element names: the float ones for
// float32, the 16-bit ones (raw __half / __nv_bfloat16 words, as the element says) otherwise.
struct ConvPoolOperands {
  union { const float* x; const uint16_t* x16; };
  int64_t x_stride[4];       // n, c, h, w
  union { const float* weight; const uint16_t* weight16; };
  int64_t weight_stride[4];  // k, c, r, s
  union { const float* bias; const uint16_t* bias16; };  // nullptr when there is no bias
  int64_t bias_stride;
  union { float* out; uint16_t* out16; };
  // Device scratch of conv_relu_maxpool_workspace_bytes() bytes, 16-byte aligned (nullptr
  // when that is 0): the wgmma variants re-lay the weights out there (tiled_3xtf32_wgmma
  // also keeps partial sums there), tiled_16bit_mma the weights and (unless x already is
  // channels-last) the input.
  float* workspace;
  // The weights packed ahead of time by conv_relu_maxpool_pack_weight, or nullptr; only for
  // a variant and shape that take it (conv_relu_maxpool_takes_packed_weight), which then
  // read it instead of packing into workspace. The caller keeps it in step with weight.
  const float* packed_weight;
};

// Bytes of device scratch `variant` needs for `shape` on `device` (0 for all but the wgmma
// variants and tiled_16bit_mma); `operands` (may be null: taken as NCHW inputs and weights)
// tells the general kernel whether x needs a copy and whether it can read the weight in place.
int64_t conv_relu_maxpool_workspace_bytes(const ConvPoolShape* shape, int variant,
                                          const ConvPoolDevice* device,
                                          const ConvPoolOperands* operands);

// Packing the weights ahead of time, for callers that run the same weights many times: the
// wgmma variants otherwise re-lay them out at the start of every launch (and wait for that at a
// grid-wide barrier). Bytes of the packed copy of a weight with shape's out_channels,
// in_channels, kernel_h, kernel_w and element, on `device`: 0 when no variant takes a packed
// weight there (not 3x3, not Hopper, or no sm_90a code in the module).
int64_t conv_relu_maxpool_packed_weight_bytes(const ConvPoolShape* shape,
                                              const ConvPoolDevice* device);

// Whether `variant` reads operands->packed_weight for `shape` instead of packing the weights
// into its workspace (which it then does not need). Set packed_weight only when it does.
bool conv_relu_maxpool_takes_packed_weight(const ConvPoolShape* shape, int variant);

// Whether `variant` writes `shape`'s channels-last output itself (the launch's out_stride: the
// general kernel takes any strides, the 3 x 3 one dense channels-last ones);
// else it writes NCHW, which the caller re-lays out.
bool conv_relu_maxpool_writes_strided_output(const ConvPoolShape* shape, int variant);

// What `variant` would do with `shape` on `device`: the one plan record that tests, tools and
// the binding's conv2d_relu_maxpool_plan read (conv_relu_maxpool_variant_plan). Fields that do
// not apply to the variant keep their defaults (nullptr, 0, false; wgmma_split 1).
struct ConvPoolPlanInfo {
  int variant;
  const char* unsupported;   // why it cannot run the shape there, or nullptr
  int64_t workspace_bytes;   // conv_relu_maxpool_workspace_bytes for the operands (when it runs)
  bool takes_packed_weight;  // conv_relu_maxpool_takes_packed_weight (when it runs)
  // The 3 x 3 wgmma variants: the pixel tile and channel-block width ("wide_n128",
  // "square_n64", "strip_n128", ...: wide 8 x 32 conv pixels, square 16 x 16, strip four 8 x 8
  // squares in a row of the batch; n output channels per block) and the tile count, both for
  // any device; on Hopper the blocks per tile (> 1: a layer of few tiles splits each tile's
  // reduction over a cluster, partial sums added in distributed shared memory) and whether,
  // given no packed weights, it packs them in a launch of its own on every SM first.
  const char* wgmma_tile;
  int64_t wgmma_tiles;
  int wgmma_split;
  bool packs_weight_apart;
  // The flat variants' warp tiling: "n64_warp32x64" (blocks of 64 output channels, 8 warps of
  // 32 pixels x 64 channels, two blocks per SM; never for 3xTF32), "n64_warp32x32" (16 warps of
  // 32 x 32), "n32_warp32x32" (blocks of 32), "n64_wgmma_m64" (the flat wgmma variants).
  const char* flat_tiling;
  // Output channels per block of the chunked and flat tiled variants (1-5, 12, 14;
  // tiled_3xtf32: 128 or 64 by the grid it fills).
  int out_block;
  // general_wgmma / general_3xtf32_wgmma where they run the shape: their plan as text
  // ("tile=wide_n128 images=1 pooled=4x16 tiles=... split=... steps=...": tile, images side by
  // side, pooled outputs per tile, tiles, split, reduction steps, chunks a step, kernel rows a
  // step, row mode, halo rows x columns, column phases, stage bytes, epilogue passes, shared
  // memory, blocks per SM, NHWC copy, channel chunks, ..., weights read in place or packed,
  // the rows its slice-planar copy writes as copy_rows=phases:mask, hex); "" elsewhere.
  char general[384];
};

// Fills *plan for `variant` (any id, whether or not it runs the shape) with operands of
// `operands`' strides and addresses (the pointers are not read; null: NCHW inputs and weights,
// as for conv_relu_maxpool_workspace_bytes), the ones the launch would be given; false when
// `variant` is out of range.
bool conv_relu_maxpool_variant_plan(const ConvPoolShape* shape, int variant,
                                    const ConvPoolDevice* device,
                                    const ConvPoolOperands* operands, ConvPoolPlanInfo* plan);

// The tile scheduler of the 3 x 3 wgmma variants: the number of tiles `variant` runs `shape` in
// (0 for the other variants and outside their geometry); for 0 <= tile < that number,
// origin[0..3] = the tile's image, first output channel, first pooled row and first pooled
// column (a strip's first piece), as the kernel computes them. For tests.
int conv_relu_maxpool_wgmma_tile_origin(const ConvPoolShape* shape, int variant, int tile,
                                        int64_t* origin);

// Packs operands->weight (its strides in operands->weight_stride) into `packed`
// (conv_relu_maxpool_packed_weight_bytes bytes, 16-byte aligned) on `stream`.
cudaError_t conv_relu_maxpool_pack_weight(const ConvPoolOperands* operands,
                                          const ConvPoolShape* shape, float* packed,
                                          const ConvPoolDevice* device, cudaStream_t stream);

// Launches `variant` (not kVariantAuto) on `stream`; returns the launch's error code.
// out_stride: out's element strides (n, c, h, w), or nullptr for NCHW contiguous; only
// general_wgmma writes other layouts (channels-last), the other variants need nullptr.
cudaError_t conv_relu_maxpool_launch(const ConvPoolOperands* operands,
                                     const ConvPoolShape* shape, int variant,
                                     const ConvPoolDevice* device, cudaStream_t stream,
                                     const int64_t* out_stride);
}
