// Window-major 1 x 1 layers ($CONV_POOL_GENERAL_WINDOWS, general_hooks.h). A 1 x 1
// convolution treats every conv pixel alike, so its pixels may be computed in any order: the
// layer runs as one over x', a dense channels-last image whose pixels are the pooling windows'
// conv pixels, window after window:
//   window w = (n, ph, pw) of the layer's pooled output, in that order (w < W = N OH OW),
//   x'[0, (w / Cw) kh + a, (w % Cw) kw + b, c] = x[n, c, i sh - padh, j sw - padw]
//     (zeros past x: the padding's conv pixels are the bias alone)
//   i = clamp(ph psh - pph + a, 0, conv_h - 1), j likewise (a window element in the pool's
//     padding or past a ceil-mode edge repeats one of the window's own pixels, so the maximum
//     is the window's)
// with Cw = min(W, kWindowCols) windows a row of x'. Its pool is kh x kw / kh x kw without
// padding, so pooled pixel (r, q) of the windowed layer is window r Cw + q of the layer. The
// general kernel's tiles then hold whole windows side by side, where on a small image they
// hold the image's width rounded up to the tile's (a 14 x 14 conv image in 16 x 16 tiles:
// 77% of their pixels), and pixels that no window reads (a pool stride above its size) are
// not computed at all. Pools whose windows overlap (kernel above stride) are not windowed:
// their shared pixels would be computed once a window.
// The windowed output is the layer's own where it is dense channels-last and W a whole number
// of rows of x' (its offset w K + k either way); otherwise it goes to the workspace and a copy
// puts each window's outputs in place.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "general_hooks.h"
#include "general_wgmma.h"

namespace general_wgmma {
namespace {

constexpr int kWindowCols = 32;  // windows a row of x' (16 x 16 and 8 x 32 tiles fill with it)

int64_t region(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int element_size(const ConvPoolShape& s) { return s.element == kElementFloat32 ? 4 : 2; }
__host__ __device__ int64_t window_count(const ConvPoolShape& s) {
  return int64_t(s.batch) * s.out_height * s.out_width;
}

// Where window w's element (a, b) reads x (element offset), or -1 where it reads the padding.
template <class I>
__device__ __forceinline__ int64_t window_source(const ConvPoolShape& s, const ConvPoolShape& f,
                                                 int64_t xn, int64_t xh, int64_t xw, I pixel) {
  const I r = pixel / I(f.in_width), q = pixel - r * I(f.in_width);
  const I w = r / I(s.pool_h) * I(f.out_width) + q / I(s.pool_w);
  if (w >= I(window_count(s))) return -1;
  const I image_windows = I(s.out_height) * I(s.out_width);
  const I n = w / image_windows, at = w - n * image_windows;
  const int ph = int(at / I(s.out_width)), pw = int(at - I(ph) * I(s.out_width));
  const int a = int(r % I(s.pool_h)), b = int(q % I(s.pool_w));
  const int i = min(max(s.window_row0(ph) + a, 0), s.conv_height - 1);
  const int j = min(max(s.window_col0(pw) + b, 0), s.conv_width - 1);
  const int row = s.input_row0(i), col = s.input_col0(j);
  if (row < 0 || row >= s.in_height || col < 0 || col >= s.in_width) return -1;
  return int64_t(n) * xn + int64_t(row) * xh + int64_t(col) * xw;
}

// x' from channels-last x: a warp's lanes take one pixel's 16-byte slices (whole-slice loads
// where `vector`), so both sides run contiguous. I: 32-bit indices where they fit.
template <class Raw, class I>
__global__ void __launch_bounds__(256)
    gather_slices_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                         int64_t xw, bool vector, ConvPoolShape s, ConvPoolShape f,
                         uint4* __restrict__ windowed) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  const int slices = f.in_channels / kSlice;
  const I pixel = I(blockIdx.x) * I(blockDim.y) + I(threadIdx.y);
  if (pixel >= I(f.in_height) * I(f.in_width)) return;
  const int64_t source = window_source<I>(s, f, xn, xh, xw, pixel);
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

// x' from x of other strides (NCHW): 32 pixels a block, 8 slices at a time; warp j reads slice
// j's channels for the 32 pixels (lanes along x's rows), and after a pass through shared memory
// each warp stores 4 pixels' 8 slices, 128 contiguous bytes each.
template <class Raw, class I>
__global__ void __launch_bounds__(256)
    gather_planes_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                         int64_t xw, ConvPoolShape s, ConvPoolShape f,
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
    source[t] = pixel0 + I(t) < pixels ? window_source<I>(s, f, xn, xh, xw, pixel0 + I(t)) : -1;
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

// The layer's output from the windowed one (element offsets k vk + w vw). Channels fastest in
// the output (kChannelsFast): a thread a channel of window blockIdx.y (+ gridDim.y, ...);
// otherwise a thread a pooled position of line (n, k) = (blockIdx.z, blockIdx.y) (+ grid
// steps), so that reads and writes run along the output's fastest dimension.
template <class Raw, bool kChannelsFast>
__global__ void __launch_bounds__(256)
    scatter_windows_kernel(const Raw* __restrict__ windowed, int64_t vk, int64_t vw,
                           Raw* __restrict__ out, int64_t on, int64_t ok, int64_t oh,
                           int64_t ow, ConvPoolShape s) {
  const int positions = s.out_height * s.out_width;
  const int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kChannelsFast) {
    if (x >= s.out_channels) return;
    const int64_t windows = int64_t(s.batch) * positions;
    for (int64_t w = blockIdx.y; w < windows; w += gridDim.y) {
      const int64_t n = w / positions;
      const int at = int(w - n * positions), ph = at / s.out_width, pw = at - ph * s.out_width;
      out[n * on + x * ok + ph * oh + pw * ow] = windowed[x * vk + w * vw];
    }
  } else {
    if (x >= positions) return;
    const int ph = int(x) / s.out_width, pw = int(x) - ph * s.out_width;
    for (int64_t k = blockIdx.y; k < s.out_channels; k += gridDim.y)
      for (int64_t n = blockIdx.z; n < s.batch; n += gridDim.z)
        out[n * on + k * ok + ph * oh + pw * ow] = windowed[k * vk + (n * positions + x) * vw];
  }
}

// The windowed output's element strides (n, k, r, q): channels fastest where the layer's
// output has them so (the scatter's reads then run with its writes).
void windowed_strides(const ConvPoolShape& f, bool channels_fast, int64_t* stride) {
  const int64_t k = f.out_channels, pixels = int64_t(f.out_height) * f.out_width;
  stride[0] = k * pixels;
  stride[1] = channels_fast ? 1 : pixels;
  stride[2] = channels_fast ? int64_t(f.out_width) * k : f.out_width;
  stride[3] = channels_fast ? k : 1;
}

bool channels_fast(const int64_t* out_stride) {
  return out_stride != nullptr && out_stride[1] == 1;
}

}  // namespace

bool windows_apply(const ConvPoolShape& s) {
  if (s.kernel_h != 1 || s.kernel_w != 1 || s.in_channels % slice_channels(s.element) != 0 ||
      s.pool_h > s.pool_stride_h || s.pool_w > s.pool_stride_w || s.output_elements() == 0)
    return false;
  if (!hooks::windows_allowed()) return false;
  // A windowed layer is its own windowed form (which also ends the launch's recursion).
  const ConvPoolShape f = windowed_shape(s);
  return !(s.batch == 1 && s.in_height == f.in_height && s.in_width == f.in_width &&
           s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0 &&
           s.pool_stride_h == s.pool_h && s.pool_stride_w == s.pool_w && s.pool_pad_h == 0 &&
           s.pool_pad_w == 0 && s.out_height == f.out_height && s.out_width == f.out_width);
}

ConvPoolShape windowed_shape(const ConvPoolShape& s) {
  const int64_t windows = window_count(s);
  const int cols = int(std::min<int64_t>(windows, kWindowCols));
  const int rows = int((windows + cols - 1) / cols);
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

ConvPoolOperands windowed_operands(const ConvPoolShape& f, const ConvPoolOperands* ops,
                                   void* windowed_x) {
  ConvPoolOperands o = ops != nullptr ? *ops : ConvPoolOperands{};
  if (f.element == kElementFloat32)
    o.x = static_cast<const float*>(windowed_x);
  else
    o.x16 = static_cast<const uint16_t*>(windowed_x);
  set_dense_channels_last_x(f, &o);
  if (ops == nullptr) {  // the weight as the plans take it without operands: contiguous
    o.weight_stride[0] = f.in_channels;
    o.weight_stride[1] = o.weight_stride[2] = o.weight_stride[3] = 1;
  }
  return o;
}

// Whether the windowed layer writes the layer's output itself (dense channels-last, whole rows
// of windows).
static bool windows_in_place(const ConvPoolShape& s, const ConvPoolShape& f,
                             const int64_t* out_stride) {
  if (out_stride == nullptr || window_count(s) % f.out_width != 0) return false;
  const int64_t k = s.out_channels;
  return out_stride[1] == 1 && out_stride[3] == k && out_stride[2] == k * s.out_width &&
         out_stride[0] == k * s.out_width * s.out_height;
}

int64_t windows_bytes(const ConvPoolShape& f) {
  const int64_t bytes = element_size(f);
  return region(int64_t(f.in_height) * f.in_width * f.in_channels * bytes) +
         region(int64_t(f.out_channels) * f.out_height * f.out_width * bytes);
}

static cudaError_t gather_windows(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                  const ConvPoolShape& f, void* region_start,
                                  cudaStream_t stream, ConvPoolOperands* windowed) {
  const int64_t* xs = ops.x_stride;
  const bool fast = xs[1] == 1;
  const int per_slice = slice_channels(s.element);
  const void* x = s.element == kElementFloat32 ? static_cast<const void*>(ops.x)
                                               : static_cast<const void*>(ops.x16);
  const bool vector = fast && xs[0] % per_slice == 0 && xs[2] % per_slice == 0 &&
                      xs[3] % per_slice == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t pixels = int64_t(f.in_height) * f.in_width;
  const bool narrow = pixels <= INT_MAX / 2 && window_count(s) <= INT_MAX / 2;
  uint4* to = static_cast<uint4*>(region_start);
  if (fast) {  // (slices, pixels) a block
    const unsigned blocks = unsigned((pixels + 7) / 8);
#define GATHER(RAW, I)                                                                   \
  gather_slices_kernel<RAW, I><<<blocks, dim3(32, 8), 0, stream>>>(                      \
      static_cast<const RAW*>(x), xs[0], xs[1], xs[2], xs[3], vector, s, f, to)
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
      static_cast<const RAW*>(x), xs[0], xs[1], xs[2], xs[3], s, f, to)
    if (s.element == kElementFloat32) {
      if (narrow) GATHER(float, uint32_t); else GATHER(float, int64_t);
    } else {
      if (narrow) GATHER(uint16_t, uint32_t); else GATHER(uint16_t, int64_t);
    }
#undef GATHER
  }
  *windowed = windowed_operands(f, &ops, region_start);
  return cudaGetLastError();
}

cudaError_t launch_windowed(const ConvPoolOperands& ops, const ConvPoolShape& s,
                            const ConvPoolDevice& device, cudaStream_t stream,
                            const int64_t* out_stride, bool split) {
  const ConvPoolShape f = windowed_shape(s);
  const ConvPoolOperands layout = windowed_operands(f, &ops, nullptr);
  unsigned char* base = reinterpret_cast<unsigned char*>(ops.workspace) +
                        region(general_wgmma_workspace_bytes(f, device, &layout, split));
  ConvPoolOperands windowed;
  if (cudaError_t error = gather_windows(ops, s, f, base, stream, &windowed);
      error != cudaSuccess)
    return error;
  const bool fast = channels_fast(out_stride);
  int64_t stride[4];
  windowed_strides(f, fast, stride);
  if (windows_in_place(s, f, out_stride))  // (window w's outputs at w K, as the layer's)
    return general_wgmma_launch(windowed, f, device, stream, stride, split);
  const int64_t bytes = element_size(f);
  void* staged = base + region(int64_t(f.in_height) * f.in_width * f.in_channels * bytes);
  if (f.element == kElementFloat32)
    windowed.out = static_cast<float*>(staged);
  else
    windowed.out16 = static_cast<uint16_t*>(staged);
  if (cudaError_t error = general_wgmma_launch(windowed, f, device, stream, stride, split);
      error != cudaSuccess)
    return error;
  int64_t os[4];
  if (out_stride != nullptr) {
    std::copy(out_stride, out_stride + 4, os);
  } else {
    os[3] = 1;
    os[2] = s.out_width;
    os[1] = os[2] * s.out_height;
    os[0] = os[1] * s.out_channels;
  }
  const int64_t vw = stride[3];  // window w's pixel (w / Cw, w % Cw): offset w vw either way
  const int positions = s.out_height * s.out_width;
  const dim3 grid = fast ? dim3(unsigned((s.out_channels + 255) / 256),
                                unsigned(std::min<int64_t>(window_count(s), 65535)))
                         : dim3(unsigned((positions + 255) / 256),
                                unsigned(std::min(s.out_channels, 65535)),
                                unsigned(std::min(s.batch, 65535)));
#define SCATTER(RAW, FAST, TO)                                                               \
  scatter_windows_kernel<RAW, FAST><<<grid, 256, 0, stream>>>(                              \
      static_cast<const RAW*>(staged), stride[1], vw, TO, os[0], os[1], os[2], os[3], s)
  if (s.element == kElementFloat32) {
    if (fast) SCATTER(float, true, ops.out); else SCATTER(float, false, ops.out);
  } else {
    if (fast) SCATTER(uint16_t, true, ops.out16); else SCATTER(uint16_t, false, ops.out16);
  }
#undef SCATTER
  return cudaGetLastError();
}

}  // namespace general_wgmma
