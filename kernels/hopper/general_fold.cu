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

// Item `item` of x': one 16-byte slice of a folded pixel, so that a warp's stores are 512
// contiguous bytes and a thread's index arithmetic is done once for its slice's channels.
// I: 32-bit indices where every item fits them.
template <class Raw, class I>
__device__ __forceinline__ void fold_x_slice(const Raw* __restrict__ x, int64_t xn, int64_t xc,
                                             int64_t xh, int64_t xw, const ConvPoolShape& s,
                                             const ConvPoolShape& f, int64_t item,
                                             uint4* __restrict__ folded_x) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  const I slices = I(f.in_channels / kSlice);
  const I pixel = I(item) / slices, row = pixel / I(f.in_width), n = row / I(f.in_height);
  const int slice = int(I(item) - pixel * slices);
  const int q = int(pixel - row * I(f.in_width)), h = int(row - n * I(f.in_height));
  const Raw* image = x + int64_t(n) * xn + int64_t(h) * xh;
  union {
    Raw raw[kSlice];
    uint4 bits;
  } v;
  // The slice's first channel's tap and channel of x, then stepped along (a division an
  // element cost ResNet's stem 45 µs of copy where this takes 38).
  int tap = slice * kSlice / s.in_channels, c = slice * kSlice - tap * s.in_channels;
  int col = q * s.stride_w + tap * s.dilation_w - s.pad_w;
#pragma unroll
  for (int e = 0; e < kSlice; ++e) {
    v.raw[e] = tap < s.kernel_w && col >= 0 && col < s.in_width ? image[c * xc + col * xw]
                                                                 : Raw(0);
    if (++c == s.in_channels) {
      c = 0;
      ++tap;
      col += s.dilation_w;
    }
  }
  folded_x[item] = v.bits;
}

// x' and w' of `f` (a folded shape) from x and w of `s` with their element strides: the x'
// slices first, then w' one element a thread (a few thousand).
template <class Raw>
__global__ void fold_kernel(const Raw* __restrict__ x, int64_t xn, int64_t xc, int64_t xh,
                            int64_t xw, const Raw* __restrict__ w, int64_t wk, int64_t wc,
                            int64_t wr, int64_t ws, ConvPoolShape s, ConvPoolShape f,
                            Raw* __restrict__ folded_x, Raw* __restrict__ folded_w) {
  constexpr int kSlice = 16 / int(sizeof(Raw));
  const int64_t x_items = int64_t(f.batch) * f.in_height * f.in_width * (f.in_channels / kSlice);
  const int64_t w_items = int64_t(f.out_channels) * f.in_channels * f.kernel_h;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  uint4* slices = reinterpret_cast<uint4*>(folded_x);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < x_items + w_items;
       i += step) {
    if (i < x_items) {
      if (x_items <= INT_MAX)
        fold_x_slice<Raw, uint32_t>(x, xn, xc, xh, xw, s, f, i, slices);
      else
        fold_x_slice<Raw, int64_t>(x, xn, xc, xh, xw, s, f, i, slices);
      continue;
    }
    const int64_t j = i - x_items;
    folded_w[j] = folded_weight(w, wk, wc, wr, ws, s, f, j);
  }
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
  const int64_t items = int64_t(f.batch) * f.in_height * f.in_width * f.in_channels /
                            slice_channels(f.element) +
                        int64_t(f.out_channels) * f.in_channels * f.kernel_h;
  const unsigned blocks = unsigned(std::min<int64_t>((items + 255) / 256, 16 * 1024));
  const int64_t* xs = ops.x_stride;
  const int64_t* ws = ops.weight_stride;
  if (s.element == kElementFloat32) {
    fold_kernel<float><<<blocks, 256, 0, stream>>>(
        ops.x, xs[0], xs[1], xs[2], xs[3], ops.weight, ws[0], ws[1], ws[2], ws[3], s, f,
        static_cast<float*>(folded_x), static_cast<float*>(folded_w));
  } else {
    fold_kernel<uint16_t><<<blocks, 256, 0, stream>>>(
        ops.x16, xs[0], xs[1], xs[2], xs[3], ops.weight16, ws[0], ws[1], ws[2], ws[3], s, f,
        static_cast<uint16_t*>(folded_x), static_cast<uint16_t*>(folded_w));
  }
  *folded = folded_operands(f, folded_x, folded_w);
  folded->bias = ops.bias;
  folded->bias_stride = ops.bias_stride;
  folded->out = ops.out;
  folded->workspace = ops.workspace;
  return cudaGetLastError();
}

}  // namespace general_wgmma
