// The general Hopper kernel (general_kernel.cuh) as the launcher in conv_relu_maxpool.cu uses it:
// variant general_wgmma, for float32 (TF32) and float16 / bfloat16 shapes of any geometry.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "../conv_relu_maxpool.h"
#include "general_plan.h"

// Each function takes `split`: the 3xTF32 form (variant general_3xtf32_wgmma, float32 only;
// Plan::split_operands) instead of TF32 / 16-bit operands (general_wgmma).

// Why the general kernel cannot run `shape` on `device`, or nullptr when it can.
const char* general_wgmma_unsupported(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                      bool split = false);

// The plan the launch runs `shape` with on `device` (tile, reduction steps, shared memory),
// given the operands' layout when `operands` is not null (else as for NCHW inputs). The caller
// checked general_wgmma_unsupported first.
general_wgmma::Plan general_wgmma_plan(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                       const ConvPoolOperands* operands, bool split = false);

// Scratch bytes of the launch: the packed weights, an NHWC copy of x where the kernel reads one
// (16-bit and 3xTF32 inputs without contiguous channels, float32 ones feeding enough work),
// the split reductions' partial sums; `operands` as for general_wgmma_plan.
int64_t general_wgmma_workspace_bytes(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                      const ConvPoolOperands* operands, bool split = false);

// Launches it on `stream` (operands.workspace holds general_wgmma_workspace_bytes); out_stride:
// the output's element strides (n, c, h, w), nullptr for NCHW contiguous.
cudaError_t general_wgmma_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                 const ConvPoolDevice& device, cudaStream_t stream,
                                 const int64_t* out_stride, bool split = false);

namespace general_wgmma {
// The output's element strides (n, c, h, w): out_stride's, or NCHW contiguous for nullptr.
inline void output_strides(const ConvPoolShape& shape, const int64_t* out_stride,
                           int64_t (&strides)[4]) {
  if (out_stride != nullptr) {
    for (int d = 0; d < 4; ++d) strides[d] = out_stride[d];
    return;
  }
  strides[3] = 1;
  strides[2] = shape.out_width;
  strides[1] = strides[2] * shape.out_height;
  strides[0] = strides[1] * shape.out_channels;
}
// x's strides in `operands` for a dense channels-last x of `shape` (the copies that the folded
// and windowed layers read in place).
void set_dense_channels_last_x(const ConvPoolShape& shape, ConvPoolOperands* operands);
// Column folding (general_fold.cu; off with $CONV_POOL_GENERAL_FOLD=0): whether `shape` runs
// folded; the folded shape; the dense channels-last operands' strides with the given pointers;
// the bytes of the folded x and weight; and the launch that writes them into `region` (folded:
// the operands the general kernel then takes, with ops' bias, output and workspace).
bool fold_applies(const ConvPoolShape& shape, bool split);
ConvPoolShape folded_shape(const ConvPoolShape& shape);
ConvPoolOperands folded_operands(const ConvPoolShape& folded, void* x, void* weight);
int64_t fold_bytes(const ConvPoolShape& folded);
cudaError_t fold_inputs(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                        const ConvPoolShape& folded_shape, void* region, cudaStream_t stream,
                        ConvPoolOperands* folded);
// Window-major 1 x 1 layers (general_windows.cu; $CONV_POOL_GENERAL_WINDOWS): whether `shape`
// can run windowed (its geometry); whether it does (the hook, else the rule of
// kWindowsMaxWaveShare); the windowed shape; whether the launch's slice-planar copy makes x' from x
// (fused) rather than a gather of its own; the windowed layer's operands as its plan and launch
// take them (x' at `x` where gathered; the rest `operands`', or contiguous weights for nullptr);
// the bytes of a gathered x'; and the launch: x' (gathered into the workspace past the windowed
// layer's own, or by its copy), then that layer, storing each window's outputs in place.
bool windows_apply(const ConvPoolShape& shape);
bool windows_chosen(const ConvPoolShape& shape, const ConvPoolDevice& device,
                    const ConvPoolOperands* operands, bool split);
ConvPoolShape windowed_shape(const ConvPoolShape& shape);
bool windows_fused(const ConvPoolShape& shape, const ConvPoolDevice& device,
                   const ConvPoolOperands* operands, bool split);
ConvPoolOperands windowed_operands(const ConvPoolShape& shape, const ConvPoolDevice& device,
                                   const ConvPoolOperands* operands, bool split, void* x);
int64_t windows_bytes(const ConvPoolShape& shape, const ConvPoolDevice& device,
                      const ConvPoolOperands* operands, bool split);
cudaError_t launch_windowed(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                            const ConvPoolDevice& device, cudaStream_t stream,
                            const int64_t* out_stride, bool split);
// Whether the general_wgmma_* functions above run `shape` as its transpose
// (general_transpose.h; $CONV_POOL_GENERAL_TRANSPOSE): x read by the copy engine, in place or
// from the preparation launch's copy, neither orientation folded or windowed, and the
// transposed layer's plan cheaper by kTransposeGain; `operands` as for
// general_wgmma_plan (nullptr: never).
bool transpose_chosen(const ConvPoolShape& shape, const ConvPoolDevice& device,
                      const ConvPoolOperands* operands, bool split);
// The plan, workspace bytes and launch of `shape` as given (general_wgmma_* after the
// orientation: their fold, windows and view choices, then shape_plan / launch_shape).
Plan layer_plan(const ConvPoolShape& shape, const ConvPoolDevice& device,
                const ConvPoolOperands* operands, bool split);
int64_t layer_workspace_bytes(const ConvPoolShape& shape, const ConvPoolDevice& device,
                              const ConvPoolOperands* operands, bool split);
cudaError_t layer_launch(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                         const ConvPoolDevice& device, cudaStream_t stream,
                         const int64_t* out_stride, bool split);
// The plan of `shape` itself, x read as `operands` say (layer_plan after its fold, windows and
// view choices).
Plan shape_plan(const ConvPoolShape& shape, const ConvPoolDevice& device,
                const ConvPoolOperands* operands, bool split);
// The launch of `shape` itself (layer_launch after its fold, windows and view
// choices); `windowed`: a window-major launch's remaps (general_windows.cuh), or nullptr.
struct WindowedLayer;
cudaError_t launch_shape(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                         const ConvPoolDevice& device, cudaStream_t stream,
                         const int64_t* out_stride, bool split, const WindowedLayer* windowed);
}  // namespace general_wgmma

// The instance launchers, one file per element type and input path so that they compile in
// parallel (general_wgmma_<type>[_planar].cu): plan.tile picks the kernel instance.
cudaError_t general_wgmma_launch_float32_planar(const ConvPoolOperands& operands,
                                                const ConvPoolShape& shape,
                                                const general_wgmma::Plan& plan,
                                                cudaStream_t stream);
cudaError_t general_wgmma_launch_float32(const ConvPoolOperands& operands,
                                         const ConvPoolShape& shape,
                                         const general_wgmma::Plan& plan, cudaStream_t stream);
cudaError_t general_wgmma_launch_float16(const ConvPoolOperands& operands,
                                         const ConvPoolShape& shape,
                                         const general_wgmma::Plan& plan, cudaStream_t stream);
cudaError_t general_wgmma_launch_float32_3xtf32(const ConvPoolOperands& operands,
                                                const ConvPoolShape& shape,
                                                const general_wgmma::Plan& plan,
                                                cudaStream_t stream);
cudaError_t general_wgmma_launch_float32_3xtf32_registers(const ConvPoolOperands& operands,
                                                          const ConvPoolShape& shape,
                                                          const general_wgmma::Plan& plan,
                                                          cudaStream_t stream);
cudaError_t general_wgmma_launch_bfloat16(const ConvPoolOperands& operands,
                                          const ConvPoolShape& shape,
                                          const general_wgmma::Plan& plan, cudaStream_t stream);

namespace general_wgmma {
// The warp-specialized kernel of element type E (Float32, Float16, BFloat16) on tile kTileId
// (plan.input == kTmaInput): its two instances, split reductions in a cluster or not. Defined in
// general_launch.cuh and instantiated once each, one file an (element type, tile) under
// kernels/hopper/instances/ so that the instances compile in parallel; general_wgmma.cu picks
// one. x_map and weight_map: the 5-D views of x and (plan.weights_in_place) of the weight that
// the launch encoded (encode_x_map and encode_weight_map).
template <class E, int kTileId>
cudaError_t launch_ws_tile(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                           const Plan& plan, const CUtensorMap& x_map,
                           const CUtensorMap& weight_map, cudaStream_t stream);

// launch_ws_tile of plan.tile.
template <class E>
cudaError_t launch_ws(const ConvPoolOperands& ops, const ConvPoolShape& s, const Plan& p,
                      const CUtensorMap& x_map, const CUtensorMap& weight_map,
                      cudaStream_t stream) {
  switch (p.tile) {
    case kWide128: return launch_ws_tile<E, kWide128>(ops, s, p, x_map, weight_map, stream);
    case kSquare128: return launch_ws_tile<E, kSquare128>(ops, s, p, x_map, weight_map, stream);
    case kWide64: return launch_ws_tile<E, kWide64>(ops, s, p, x_map, weight_map, stream);
    case kSquare64: return launch_ws_tile<E, kSquare64>(ops, s, p, x_map, weight_map, stream);
    case kTall64: return launch_ws_tile<E, kTall64>(ops, s, p, x_map, weight_map, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace general_wgmma
