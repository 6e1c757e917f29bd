// Column folding for few-channel layers ($CONV_POOL_GENERAL_FOLD=0 turns it off,
// general_hooks.h): a layer of C channels and a kernel_w-column kernel runs as one of kernel_w x
// C channels and a one-column kernel over x', whose pixel (h, q) holds the C channels of x's
// kernel_w input columns under conv column q:
//   x'[n, h, q, t C + c] = x[n, c, h, q stride_w + t dilation_w - pad_w]   (0 outside x)
//   w'[k, t C + c, r, 0] = w[k, c, r, t]
// Both are dense channels-last copies in the launch's workspace, their channels padded with
// zeros to whole 16-byte slices, so the general kernel reads x' in place. The convolution's
// output, and so the pooling, is the same; the reduction's chunks hold kernel_w taps of C
// channels instead of one tap of C channels padded to a chunk (an RGB 7 x 7 stem: 14 chunk
// steps of 16 channels instead of 49 in 16 bits).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "general_hooks.h"
#include "general_wgmma.h"

namespace general_wgmma {
namespace {

// The most channels a folded pixel holds (kernel_w x C), and the most x' may hold over x (its
// elements over x's): x' is about kernel_w / stride_w times x (padded to whole slices), and
// it lives in the workspace, so wide kernels at small strides are left unfolded (a 1-channel
// 1 x 64 kernel at stride 1 would take 64 times x). ResNet's stem folds at 4 times x.
constexpr int kMaxFoldedChannels = 64;
constexpr int kMaxFoldedGrowth = 8;
// The fold launch's most blocks for x' (past them a thread steps over several pixels, its
// slice's index arithmetic done once) and for w'.
constexpr int64_t kFoldXBlocks = 2048;
constexpr int64_t kFoldWBlocks = 1024;

int64_t region(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int element_size(const ConvPoolShape& s) { return s.element == kElementFloat32 ? 4 : 2; }

// Element j of w', (k, channel, r) with r fastest.
template <class Raw>
__device__ __forceinline__ Raw folded_weight(const Raw* __restrict__ w, int64_t wk, int64_t wc,
                                             int64_t wr, int64_t ws, const ConvPoolShape& s,
                                             const ConvPoolShape& f, int64_t j) {
  const int r = int(j % f.kernel_h);
  const int channel = int(j / f.kernel_h % f.in_channels);
  const int64_t k = j / f.kernel_h / f.in_channels;
  const int tap = channel / s.in_channels, c = channel % s.in_channels;
  return tap < s.kernel_w ? w[k * wk + c * wc + r * wr + tap * ws] : Raw(0);
}

// x' is written in 16-byte slices, `slices` to a folded pixel, each thread keeping one slice
// position of its pixels: the tap and channel of each of its slice's elements, so the x offset
// of each, are set once a thread, and a pixel's elements cost a compare and a load each. A
// warp's stores are 512 contiguous bytes. I: the offsets' type (32 bits where x's span fits).
template <class Raw, class I>
struct SlicePositions {
  static constexpr int kSlice = 16 / int(sizeof(Raw));
  I offset[kSlice];        // x's offset of the element from the pixel's first input column
  int column[kSlice];      // the element's input column less that first one
  unsigned valid = 0;      // bit e: element e is a tap of the kernel (else a padding zero)

  __device__ SlicePositions(int slice, int64_t xc, int64_t xw, const ConvPoolShape& s) {
    int tap = slice * kSlice / s.in_channels, c = slice * kSlice - tap * s.in_channels;
#pragma unroll
    for (int e = 0; e < kSlice; ++e) {
      column[e] = tap * s.dilation_w;
      offset[e] = I(c * xc + int64_t(column[e]) * xw);
      if (tap < s.kernel_w) valid |= 1u << e;
      if (++c == s.in_channels) {
        c = 0;
        ++tap;
      }
    }
  }
};

// A pixel of x' as (image, row, column), stepped along by a fixed number of pixels with
// carries, so that a thread's later pixels cost no division.
template <class I>
struct PixelCursor {
  I n;
  int h, q;

  __device__ PixelCursor(I pixel, const ConvPoolShape& f) {
    const I row = pixel / I(f.in_width);
    n = row / I(f.in_height);
    q = int(pixel - row * I(f.in_width));
    h = int(row - n * I(f.in_height));
  }
  __device__ void advance(const PixelCursor& step, const ConvPoolShape& f) {
    q += step.q;
    const int carry_h = q >= f.in_width;
    if (carry_h) q -= f.in_width;
    h += step.h + carry_h;
    const int carry_n = h >= f.in_height;
    if (carry_n) h -= f.in_height;
    n += step.n + carry_n;
  }
};

// The x' part of the launch: `threads` threads (whole pixels' slices a block), thread `thread`
// on slice position thread % slices of pixels thread / slices, + threads / slices, ... I:
// 32-bit indices and offsets where x's span and the threads' pixels fit them.
template <class Raw, class I>
__device__ __forceinline__ void fold_x(const Raw* __restrict__ x, int64_t xn, int64_t xc,
                                       int64_t xh, int64_t xw, const ConvPoolShape& s,
                                       const ConvPoolShape& f, I thread, I threads,
                                       uint4* __restrict__ folded_x) {
  constexpr int kSlice = SlicePositions<Raw, I>::kSlice;
  const I slices = I(f.in_channels / kSlice);
  const I pixels = I(f.batch) * I(f.in_height) * I(f.in_width);
  I pixel = thread / slices;
  if (pixel >= pixels) return;
  const int slice = int(thread - pixel * slices);
  const SlicePositions<Raw, I> positions(slice, xc, xw, s);
  const I step = threads / slices;
  PixelCursor<I> at(pixel, f);
  // The step's own (image, row, column), only where a thread has a second pixel (a launch of
  // one pixel a thread pays no more division than that pixel's).
  const PixelCursor<I> by(pixel + step < pixels ? step : I(0), f);
  for (; pixel < pixels; pixel += step) {
    const int first_column = at.q * s.stride_w - s.pad_w;
    const Raw* origin = x + int64_t(at.n) * xn + int64_t(at.h) * xh + int64_t(first_column) * xw;
    union {
      Raw raw[kSlice];
      uint4 bits;
    } v;
#pragma unroll
    for (int e = 0; e < kSlice; ++e) {
      const unsigned col = unsigned(first_column + positions.column[e]);
      v.raw[e] = (positions.valid >> e & 1u) && col < unsigned(s.in_width)
                     ? origin[positions.offset[e]]
                     : Raw(0);
    }
    folded_x[int64_t(pixel) * int64_t(slices) + slice] = v.bits;
    at.advance(by, f);
  }
}

// x' and w' of `f` (a folded shape) from x and w of `s` with their element strides: the grid's
// first x_blocks blocks write x' (fold_x), the others w', one element a thread (most layers'
// w' is a few thousand elements, a wide layer's a few hundred thousand), so that no thread
// does both in series. I: as fold_x's (chosen by the launch).
template <class Raw, class I>
__global__ void fold_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                            int64_t xw, const Raw* __restrict__ w, int64_t wk, int64_t wc,
                            int64_t wr, int64_t ws, ConvPoolShape s, ConvPoolShape f,
                            unsigned x_blocks, Raw* __restrict__ folded_x,
                            Raw* __restrict__ folded_w) {
  if (blockIdx.x < x_blocks) {
    fold_x<Raw, I>(x, xn, xc, xh, xw, s, f, I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x),
                   I(x_blocks) * I(blockDim.x), reinterpret_cast<uint4*>(folded_x));
    return;
  }
  const int64_t w_items = int64_t(f.out_channels) * f.in_channels * f.kernel_h;
  const int64_t step = int64_t(gridDim.x - x_blocks) * blockDim.x;
  for (int64_t j = int64_t(blockIdx.x - x_blocks) * blockDim.x + threadIdx.x; j < w_items;
       j += step)
    folded_w[j] = folded_weight(w, wk, wc, wr, ws, s, f, j);
}

}  // namespace

bool fold_applies(const ConvPoolShape& s, bool split) {
  if (split || !hooks::fold_allowed() || s.kernel_w < 2 ||
      s.in_channels >= chunk_channels(s.element) ||
      s.kernel_w * s.in_channels > kMaxFoldedChannels)
    return false;
  const ConvPoolShape f = folded_shape(s);
  return int64_t(f.in_width) * f.in_channels <=
         int64_t(kMaxFoldedGrowth) * s.in_width * s.in_channels;
}

ConvPoolShape folded_shape(const ConvPoolShape& s) {
  ConvPoolShape f = s;
  const int per_slice = slice_channels(s.element);
  f.in_channels = (s.kernel_w * s.in_channels + per_slice - 1) / per_slice * per_slice;
  f.in_width = s.conv_width;
  f.kernel_w = 1;
  f.stride_w = 1;
  f.pad_w = 0;
  f.dilation_w = 1;
  return f;
}

void set_dense_channels_last_x(const ConvPoolShape& f, ConvPoolOperands* o) {
  const int64_t c = f.in_channels;
  o->x_stride[0] = int64_t(f.in_height) * f.in_width * c;
  o->x_stride[1] = 1;
  o->x_stride[2] = int64_t(f.in_width) * c;
  o->x_stride[3] = c;
}

ConvPoolOperands folded_operands(const ConvPoolShape& f, void* folded_x, void* folded_w) {
  ConvPoolOperands o{};
  if (f.element == kElementFloat32) {
    o.x = static_cast<const float*>(folded_x);
    o.weight = static_cast<const float*>(folded_w);
  } else {
    o.x16 = static_cast<const uint16_t*>(folded_x);
    o.weight16 = static_cast<const uint16_t*>(folded_w);
  }
  const int64_t c = f.in_channels;
  set_dense_channels_last_x(f, &o);
  o.weight_stride[0] = c * f.kernel_h;
  o.weight_stride[1] = f.kernel_h;
  o.weight_stride[2] = 1;
  o.weight_stride[3] = 1;
  return o;
}

int64_t fold_bytes(const ConvPoolShape& f) {
  const int64_t bytes = element_size(f);
  return region(int64_t(f.batch) * f.in_height * f.in_width * f.in_channels * bytes) +
         region(int64_t(f.out_channels) * f.in_channels * f.kernel_h * bytes);
}

cudaError_t fold_inputs(const ConvPoolOperands& ops, const ConvPoolShape& s,
                        const ConvPoolShape& f, void* region_start, cudaStream_t stream,
                        ConvPoolOperands* folded) {
  unsigned char* base = static_cast<unsigned char*>(region_start);
  const int64_t x_bytes = int64_t(f.batch) * f.in_height * f.in_width * f.in_channels *
                          element_size(f);
  void* folded_x = base;
  void* folded_w = base + region(x_bytes);
  // Blocks of whole pixels' slices; past kFoldXBlocks of them a thread takes several pixels.
  const int slices = f.in_channels / slice_channels(f.element);
  const int block = 256 / slices * slices;
  const int64_t x_items = int64_t(f.batch) * f.in_height * f.in_width * slices;
  const int64_t w_items = int64_t(f.out_channels) * f.in_channels * f.kernel_h;
  const unsigned x_blocks = unsigned(std::min<int64_t>((x_items + block - 1) / block,
                                                       kFoldXBlocks));
  const unsigned blocks = x_blocks + unsigned(std::min<int64_t>((w_items + block - 1) / block,
                                                                kFoldWBlocks));
  const int64_t* xs = ops.x_stride;
  const int64_t* ws = ops.weight_stride;
  // 32-bit indices and offsets where the x' threads' pixels and x's span fit them
  // ($CONV_POOL_GENERAL_FOLD=wide: 64-bit ones on any layer).
  const int64_t span = int64_t(s.batch - 1) * xs[0] + int64_t(s.in_channels - 1) * xs[1] +
                       int64_t(s.in_height - 1) * xs[2] + int64_t(s.in_width - 1) * xs[3];
  const bool narrow = !hooks::fold_wide_indices() &&
                      x_items + int64_t(x_blocks) * block <= INT_MAX && span <= INT_MAX;
  auto launch = [&](auto kernel, const auto* x, const auto* w, auto* out_x, auto* out_w) {
    kernel<<<blocks, block, 0, stream>>>(x, xs[0], xs[1], xs[2], xs[3], w, ws[0], ws[1], ws[2],
                                         ws[3], s, f, x_blocks, out_x, out_w);
  };
  if (s.element == kElementFloat32) {
    float* out_x = static_cast<float*>(folded_x);
    float* out_w = static_cast<float*>(folded_w);
    if (narrow)
      launch(fold_kernel<float, uint32_t>, ops.x, ops.weight, out_x, out_w);
    else
      launch(fold_kernel<float, int64_t>, ops.x, ops.weight, out_x, out_w);
  } else {
    uint16_t* out_x = static_cast<uint16_t*>(folded_x);
    uint16_t* out_w = static_cast<uint16_t*>(folded_w);
    if (narrow)
      launch(fold_kernel<uint16_t, uint32_t>, ops.x16, ops.weight16, out_x, out_w);
    else
      launch(fold_kernel<uint16_t, int64_t>, ops.x16, ops.weight16, out_x, out_w);
  }
  *folded = folded_operands(f, folded_x, folded_w);
  folded->bias = ops.bias;
  folded->bias_stride = ops.bias_stride;
  folded->out = ops.out;
  folded->workspace = ops.workspace;
  return cudaGetLastError();
}

}  // namespace general_wgmma
