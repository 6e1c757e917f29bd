// Window-major 1 x 1 layers ($CONV_POOL_GENERAL_WINDOWS, general_hooks.h). A 1 x 1
// convolution treats every conv pixel alike, so its pixels may be computed in any order: the
// layer runs as one over x', one image whose pixels are the pooling windows' conv pixels,
// window after window, Cw = min(W, kWindowCols) windows a row of x', each window's kh x kw
// pixels a kh x kw block (the map: window_source, general_windows.cuh). Its pool is kh x kw /
// kh x kw without padding, so pooled pixel (r, q) of the windowed layer is window r Cw + q of
// the layer, and the kernel's epilogue stores it at that window's place in the layer's output
// (Plan::windows). The general kernel's tiles then hold whole windows side by side, where on a
// small image they hold the image's width rounded up to the tile's (a 14 x 14 conv image in
// 16 x 16 tiles: 77% of their pixels), and pixels that no window reads (a pool stride above
// its size) are not computed at all. Pools whose windows overlap (kernel above stride) are not
// windowed: their shared pixels would be computed once a window.
// x' comes from the preparation launch's slice-planar copy reading x through the map where the
// windowed layer reads such a copy anyway (x without contiguous channels, the warp-specialized
// kernel: one pass over x, as unwindowed), else from a gather of its own into a dense
// channels-last x' in the workspace, which the kernel reads in place.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "general_hooks.h"
#include "general_wgmma.h"
#include "general_windows.cuh"

namespace general_wgmma {
namespace {

constexpr int kWindowCols = 32;  // windows a row of x' (16 x 16 and 8 x 32 tiles fill with it)

int64_t region(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int element_size(const ConvPoolShape& s) { return s.element == kElementFloat32 ? 4 : 2; }
int64_t window_count(const ConvPoolShape& s) {
  return int64_t(s.batch) * s.out_height * s.out_width;
}

// x' pixel `pixel` (of the single image, row-major) as (row, column).
template <class I>
__device__ __forceinline__ int64_t pixel_source(const WindowSource& ws, const ConvPoolShape& f,
                                                int64_t xn, int64_t xh, int64_t xw, I pixel) {
  const I r = pixel / I(f.in_width);
  return window_source(ws, xn, xh, xw, int(r), int(pixel - r * I(f.in_width)));
}

// x' from channels-last x: a warp's lanes take one pixel's 16-byte slices (whole-slice loads
// where `vector`), so both sides run contiguous. I: 32-bit indices where they fit.
template <class Raw, class I>
__global__ void __launch_bounds__(256)
    gather_slices_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                         int64_t xw, bool vector, WindowSource ws, ConvPoolShape f,
                         uint4* __restrict__ windowed) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  const int slices = f.in_channels / kSlice;
  const I pixel = I(blockIdx.x) * I(blockDim.y) + I(threadIdx.y);
  if (pixel >= I(f.in_height) * I(f.in_width)) return;
  const int64_t source = pixel_source<I>(ws, f, xn, xh, xw, pixel);
  uint4* to = windowed + int64_t(pixel) * slices;
  for (int slice = threadIdx.x; slice < slices; slice += blockDim.x) {
    union {
      Raw raw[kSlice];
      uint4 bits;
    } v;
    if (source < 0) {
      v.bits = make_uint4(0, 0, 0, 0);
    } else if (vector) {
      v.bits = *reinterpret_cast<const uint4*>(x + source + int64_t(slice) * kSlice);
    } else {
      const Raw* from = x + source + int64_t(slice) * kSlice * xc;
#pragma unroll
      for (int e = 0; e < kSlice; ++e) v.raw[e] = from[e * xc];
    }
    to[slice] = v.bits;
  }
}

// x' from x of other strides where the windowed layer reads no copy of its own (the cp.async
// loaders' paths): 32 pixels a block, 8 slices at a time; warp j reads slice j's channels for
// the 32 pixels (lanes along x's rows), and after a pass through shared memory each warp stores
// 4 pixels' 8 slices, 128 contiguous bytes each.
template <class Raw, class I>
__global__ void __launch_bounds__(256)
    gather_planes_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                         int64_t xw, WindowSource ws, ConvPoolShape f,
                         uint4* __restrict__ windowed) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  constexpr int kPixels = 32, kSlices = 8;  // a block's pixels, slices a pass
  __shared__ uint4 tile[kPixels][kSlices + 1];  // (+1: a warp's stores hit distinct banks)
  __shared__ int64_t source[kPixels];
  const int slices = f.in_channels / kSlice;
  const I pixels = I(f.in_height) * I(f.in_width);
  const I pixel0 = I(blockIdx.x) * I(kPixels);
  const int t = threadIdx.x;
  if (t < kPixels)
    source[t] = pixel0 + I(t) < pixels ? pixel_source<I>(ws, f, xn, xh, xw, pixel0 + I(t)) : -1;
  __syncthreads();
  const int load_pixel = t % kPixels, load_slice = t / kPixels;
  const int store_pixel = t / kSlices, store_slice = t % kSlices;
  const int64_t from_pixel = source[load_pixel];
  const bool stores = pixel0 + I(store_pixel) < pixels;
  uint4* to = windowed + int64_t(pixel0 + I(store_pixel)) * slices;
  for (int s0 = 0; s0 < slices; s0 += kSlices) {
    union {
      Raw raw[kSlice];
      uint4 bits;
    } v;
    const int slice = s0 + load_slice;
    if (from_pixel < 0 || slice >= slices) {
      v.bits = make_uint4(0, 0, 0, 0);
    } else {
      const Raw* from = x + from_pixel + int64_t(slice) * kSlice * xc;
#pragma unroll
      for (int e = 0; e < kSlice; ++e) v.raw[e] = from[e * xc];
    }
    tile[load_pixel][load_slice] = v.bits;
    __syncthreads();
    if (stores && s0 + store_slice < slices) to[s0 + store_slice] = tile[store_pixel][store_slice];
    __syncthreads();
  }
}

// The windowed layer's x as its plan sees it: from the copy (fused: x's own pointer, NCHW
// strides of the windowed shape, so that the plan copies it) or dense channels-last at x'.
ConvPoolOperands windowed_x_operands(const ConvPoolShape& f, const ConvPoolOperands* ops,
                                     bool fused, void* windowed_x) {
  ConvPoolOperands o = ops != nullptr ? *ops : ConvPoolOperands{};
  if (fused) {
    o.x_stride[3] = 1;
    o.x_stride[2] = f.in_width;
    o.x_stride[1] = int64_t(f.in_width) * f.in_height;
    o.x_stride[0] = o.x_stride[1] * f.in_channels;
  } else {
    if (f.element == kElementFloat32)
      o.x = static_cast<const float*>(windowed_x);
    else
      o.x16 = static_cast<const uint16_t*>(windowed_x);
    set_dense_channels_last_x(f, &o);
  }
  if (ops == nullptr) {  // the weight as the plans take it without operands: contiguous
    o.weight_stride[0] = f.in_channels;
    o.weight_stride[1] = o.weight_stride[2] = o.weight_stride[3] = 1;
  }
  return o;
}

// The bytes of a gathered x'.
int64_t gathered_bytes(const ConvPoolShape& f) {
  return region(int64_t(f.in_height) * f.in_width * f.in_channels * element_size(f));
}

cudaError_t gather_windows(const ConvPoolOperands& ops, const ConvPoolShape& s,
                           const ConvPoolShape& f, void* region_start, cudaStream_t stream) {
  const int64_t* xs = ops.x_stride;
  const bool fast = xs[1] == 1;
  const int per_slice = slice_channels(s.element);
  const void* x = s.element == kElementFloat32 ? static_cast<const void*>(ops.x)
                                               : static_cast<const void*>(ops.x16);
  const bool vector = fast && xs[0] % per_slice == 0 && xs[2] % per_slice == 0 &&
                      xs[3] % per_slice == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t pixels = int64_t(f.in_height) * f.in_width;
  const bool narrow = pixels <= INT_MAX / 2;
  const WindowSource ws{s, f.out_width};
  uint4* to = static_cast<uint4*>(region_start);
  if (fast) {  // (slices, pixels) a block
    const unsigned blocks = unsigned((pixels + 7) / 8);
#define GATHER(RAW, I)                                                                   \
  gather_slices_kernel<RAW, I><<<blocks, dim3(32, 8), 0, stream>>>(                      \
      static_cast<const RAW*>(x), xs[0], xs[1], xs[2], xs[3], vector, ws, f, to)
    if (s.element == kElementFloat32) {
      if (narrow) GATHER(float, uint32_t); else GATHER(float, int64_t);
    } else {
      if (narrow) GATHER(uint16_t, uint32_t); else GATHER(uint16_t, int64_t);
    }
#undef GATHER
  } else {
    const unsigned blocks = unsigned((pixels + 31) / 32);
#define GATHER(RAW, I)                                       \
  gather_planes_kernel<RAW, I><<<blocks, 256, 0, stream>>>(  \
      static_cast<const RAW*>(x), xs[0], xs[1], xs[2], xs[3], ws, f, to)
    if (s.element == kElementFloat32) {
      if (narrow) GATHER(float, uint32_t); else GATHER(float, int64_t);
    } else {
      if (narrow) GATHER(uint16_t, uint32_t); else GATHER(uint16_t, int64_t);
    }
#undef GATHER
  }
  return cudaGetLastError();
}

}  // namespace

bool windows_apply(const ConvPoolShape& s) {
  if (s.kernel_h != 1 || s.kernel_w != 1 || s.in_channels % slice_channels(s.element) != 0 ||
      s.pool_h > s.pool_stride_h || s.pool_w > s.pool_stride_w || s.output_elements() == 0)
    return false;
  // The windows and x''s pixels in int (window_source, the epilogue's Plan::windows).
  const ConvPoolShape f = windowed_shape(s);
  if (window_count(s) > INT_MAX || int64_t(f.in_height) * f.in_width > INT_MAX) return false;
  // A windowed layer is its own windowed form (which also ends the launch's recursion).
  return !(s.batch == 1 && s.in_height == f.in_height && s.in_width == f.in_width &&
           s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0 &&
           s.pool_stride_h == s.pool_h && s.pool_stride_w == s.pool_w && s.pool_pad_h == 0 &&
           s.pool_pad_w == 0 && s.out_height == f.out_height && s.out_width == f.out_width);
}

ConvPoolShape windowed_shape(const ConvPoolShape& s) {
  const int64_t windows = window_count(s);
  const int cols = int(std::min<int64_t>(windows, kWindowCols));
  const int rows = int(std::min<int64_t>((windows + cols - 1) / cols, INT_MAX / s.pool_h));
  ConvPoolShape f = s;
  f.batch = 1;
  f.in_height = f.conv_height = rows * s.pool_h;
  f.in_width = f.conv_width = cols * s.pool_w;
  f.stride_h = f.stride_w = 1;
  f.pad_h = f.pad_w = 0;
  f.dilation_h = f.dilation_w = 1;
  f.pool_stride_h = s.pool_h;
  f.pool_stride_w = s.pool_w;
  f.pool_pad_h = f.pool_pad_w = 0;
  f.out_height = rows;
  f.out_width = cols;
  return f;
}

namespace {

// Whether x' could come from the preparation launch's copy: x without contiguous channels
// (channels-last x is read in place unwindowed, so any copy of it is extra), the copy in that
// launch.
bool copy_may_window(const ConvPoolOperands* ops) {
  return (ops == nullptr || ops->x_stride[1] != 1) && !hooks::separate_preparation();
}

// The windowed layer's plan with x' from that copy (x's own pointer, NCHW strides of the
// windowed shape), and whether the plan makes the copy there.
Plan copied_plan(const ConvPoolShape& s, const ConvPoolDevice& device,
                 const ConvPoolOperands* ops, bool split) {
  const ConvPoolShape f = windowed_shape(s);
  const ConvPoolOperands copied = windowed_x_operands(f, ops, true, nullptr);
  return layer_plan(f, device, &copied, split);
}
bool copies_in_preparation(const Plan& p) { return p.input == kTmaInput && p.staged_copy; }

}  // namespace

bool windows_chosen(const ConvPoolShape& s, const ConvPoolDevice& device,
                    const ConvPoolOperands* ops, bool split) {
  const int forced = hooks::windows_forced();
  if (forced == 0 || !windows_apply(s)) return false;
  if (forced == 1) return true;
  if (!copy_may_window(ops)) return false;
  const Plan windowed = copied_plan(s, device, ops, split);
  if (!copies_in_preparation(windowed)) return false;
  const auto waves = [&](const Plan& p) {
    const int64_t resident = int64_t(device.sm_count) * p.blocks_per_sm;
    return (p.tiles * p.split + resident - 1) / resident;
  };
  const int64_t plain = waves(shape_plan(s, device, ops, split));
  return plain >= conv_pool_heuristics::kWindowsMinWaves &&
         double(waves(windowed)) <= conv_pool_heuristics::kWindowsMaxWaveShare * double(plain);
}

bool windows_fused(const ConvPoolShape& s, const ConvPoolDevice& device,
                   const ConvPoolOperands* ops, bool split) {
  return copy_may_window(ops) && copies_in_preparation(copied_plan(s, device, ops, split));
}

ConvPoolOperands windowed_operands(const ConvPoolShape& s, const ConvPoolDevice& device,
                                   const ConvPoolOperands* ops, bool split, void* windowed_x) {
  const ConvPoolShape f = windowed_shape(s);
  return windowed_x_operands(f, ops, windows_fused(s, device, ops, split), windowed_x);
}

int64_t windows_bytes(const ConvPoolShape& s, const ConvPoolDevice& device,
                      const ConvPoolOperands* ops, bool split) {
  return windows_fused(s, device, ops, split) ? 0 : gathered_bytes(windowed_shape(s));
}

cudaError_t launch_windowed(const ConvPoolOperands& ops, const ConvPoolShape& s,
                            const ConvPoolDevice& device, cudaStream_t stream,
                            const int64_t* out_stride, bool split) {
  const ConvPoolShape f = windowed_shape(s);
  WindowedLayer layer{{s, f.out_width}, {}, windows_fused(s, device, &ops, split)};
  std::copy(ops.x_stride, ops.x_stride + 4, layer.x_stride);
  const ConvPoolOperands plan_ops = windowed_x_operands(f, &ops, layer.copy_x, nullptr);
  unsigned char* x_region = reinterpret_cast<unsigned char*>(ops.workspace) +
                            region(layer_workspace_bytes(f, device, &plan_ops, split));
  const ConvPoolOperands windowed = windowed_x_operands(f, &ops, layer.copy_x, x_region);
  if (!layer.copy_x) {
    if (cudaError_t error = gather_windows(ops, s, f, x_region, stream); error != cudaSuccess)
      return error;
  }
  int64_t os[4];
  output_strides(s, out_stride, os);
  return launch_shape(windowed, f, device, stream, os, split, &layer);
}

}  // namespace general_wgmma
