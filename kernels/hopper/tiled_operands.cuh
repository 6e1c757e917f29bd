// The 3 x 3 / 2 x 2 Hopper kernel's operand traits: what its TF32, 3xTF32 and 16-bit
// variants do differently (element type, channels per chunk, halo loads and their transposes,
// the weight packing, the wgmma, the bias and output conversions).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../conv_pool_16bit.cuh"
#include "../conv_pool_wgmma.cuh"
#include "tiled_tile.cuh"

namespace tiled_wgmma {

// ---------------------------------------------------------------------------
// Operand traits: what the TF32 and the 16-bit kernels do differently.
//   Element        x, weight, bias and out in global memory (float, or the raw 16-bit word)
//   kChunk         input channels per stage = K of one wgmma = 2 slices
//   kSliceChannels channels per 16-byte slice
//   RowVector      4 consecutive columns of one channel (one halo load)
//   Pixel          one staged 16-byte slice of a pixel or a weight row

// Where pixel j (0..3) of a halo unit goes, in 16-byte slots from the unit's first: j, plus
// `skip` for the pixels from `first_wrapped` on (a plane vector that crosses into the next image
// row continues at the next halo row). Row and scalar units never wrap (first_wrapped = 4).
struct PixelWrap {
  int first_wrapped, skip;
  __device__ __forceinline__ int slot(int j) const { return j >= first_wrapped ? j + skip : j; }
};

struct Tf32Operands {
  using Element = float;
  static constexpr bool kSplit = false;  // 3xTF32: Tf32SplitOperands
  static constexpr int kChunk = 8;
  static constexpr int kSliceChannels = 4;
  using RowVector = float4;
  using Pixel = float4;

  static bool vector_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
    return vectorizable_input(ops, s);
  }
  static __device__ __forceinline__ const float* input(const ConvPoolOperands& ops) {
    return ops.x;
  }
  static __device__ __forceinline__ const float* weight(const ConvPoolOperands& ops) {
    return ops.weight;
  }
  static __device__ __forceinline__ float* output(const ConvPoolOperands& ops) { return ops.out; }
  static __device__ __forceinline__ float bias(const ConvPoolOperands& ops, int channel) {
    return __ldg(ops.bias + int64_t(channel) * ops.bias_stride);
  }
  static __device__ __forceinline__ float to_output(float v) { return v; }
  // 4 consecutive outputs, 16-byte aligned (store_pooled).
  static __device__ __forceinline__ void store_run(float* out, float a, float b, float c,
                                                   float d) {
    *reinterpret_cast<float4*>(out) = make_float4(a, b, c, d);
  }
  // 2 consecutive outputs, 8-byte aligned (store_conv_channels_last).
  static __device__ __forceinline__ void store_pair(float* out, float a, float b) {
    *reinterpret_cast<float2*>(out) = make_float2(a, b);
  }
  // 8 consecutive outputs, 16-byte aligned (store_conv_rows).
  static __device__ __forceinline__ void store_row8(float* out, const float (&v)[8]) {
    reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  // 16 bytes of consecutive outputs, 16-byte aligned (store_pooled_channels_last).
  static constexpr int kOutVector = 4;
  static __device__ __forceinline__ void store_vector(float* out, const float (&v)[4]) {
    *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
  }
  static __device__ __forceinline__ float load(const float* p) { return __ldg(p); }
  static __device__ __forceinline__ float4 load_row(const float* p) {
    return __ldg(reinterpret_cast<const float4*>(p));
  }
  static __device__ __forceinline__ float4 zero_row() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  // fp32: a pixel vector (4 channels) is the same 16-byte load as a row vector (4 columns).
  static __device__ __forceinline__ float4 load_pixel(const float* p) { return load_row(p); }
  static __device__ __forceinline__ float4 zero_pixel() { return zero_row(); }
  static __device__ __forceinline__ float4 make_row(const float (&v)[4]) {
    return make_float4(v[0], v[1], v[2], v[3]);
  }
  // pack_weights' row: element f (= channel i * 9 + tap) of a weight row's slice is word f.
  static __device__ __forceinline__ void put(uint32_t (&row)[36], int f, float v) {
    row[f] = __float_as_uint(v);
  }
  // The slice's channels under `tap` -> the tap's staged 16 bytes.
  static __device__ __forceinline__ float4 weight_slice(const uint32_t (&row)[36], int tap) {
    return make_float4(__uint_as_float(row[tap]), __uint_as_float(row[9 + tap]),
                       __uint_as_float(row[18 + tap]), __uint_as_float(row[27 + tap]));
  }
  // 4 channels x 4 columns (one row vector per channel) -> 4 pixels x 4 channels, pixel j at
  // dst[wrap.slot(j)].
  static __device__ __forceinline__ void store_pixels(const float4 (&c)[4], float4* dst,
                                                      const PixelWrap& wrap) {
    dst[wrap.slot(0)] = make_float4(c[0].x, c[1].x, c[2].x, c[3].x);
    dst[wrap.slot(1)] = make_float4(c[0].y, c[1].y, c[2].y, c[3].y);
    dst[wrap.slot(2)] = make_float4(c[0].z, c[1].z, c[2].z, c[3].z);
    dst[wrap.slot(3)] = make_float4(c[0].w, c[1].w, c[2].w, c[3].w);
  }
  template <int kCount>
  static __device__ __forceinline__ void mma(float (&d)[kCount], uint64_t a, uint64_t b,
                                             bool accumulate) {
    WgmmaSS<Float32>::mma(d, a, b, accumulate);
  }
};

// 3xTF32 (tiled_3xtf32_wgmma: float32 with allow_tf32 = False). Each operand x is staged as a
// big part and a small part (split_tf32_operand, conv_pool_device.cuh), and a product is
// big * big' + small * big' + big * small'; a zero x gives zeros, as fp32 would (0 * inf is
// NaN there too).
struct Tf32SplitOperands : Tf32Operands {
  static constexpr bool kSplit = true;
  static __device__ __forceinline__ void split(float x, float& big, float& small) {
    split_tf32_operand(x, big, small);
  }
  static __device__ __forceinline__ void split(const float4& x, float4& big, float4& small) {
    split(x.x, big.x, small.x);
    split(x.y, big.y, small.y);
    split(x.z, big.z, small.z);
    split(x.w, big.w, small.w);
  }
  // The small halo times the big weights (b: the big rows, kN on from the small ones; N = 64),
  // into the first half of the N = 128 accumulators, beside big halo * small weights. Not into
  // the big * big half: the tensor cores add into fp32 accumulators with an error that grows
  // with each wgmma added to a sum and scales with the sum (not with the terms added), so that
  // half gets one wgmma per tap and the cross terms accumulate in a sum ~2^-11 its size
  // (docs/PERF.md). (Into the second half, ptxas waited for every wgmma before the next:
  // a chain of wgmmas whose accumulators overlap must start at the same register.)
  static __device__ __forceinline__ void mma_cross(float (&d)[64], uint64_t a, uint64_t b,
                                                   bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "1, 1");
#endif
  }
};

// Two 16-bit values in one 32-bit word, `low` at the lower address (little endian).
__device__ __forceinline__ uint32_t pair(uint16_t low, uint16_t high) {
  return uint32_t(low) | (uint32_t(high) << 16);
}

template <class E>
struct HalfOperands : WgmmaSS<E> {  // its mma(): conv_pool_wgmma.cuh
  using Element = uint16_t;
  static constexpr bool kSplit = false;
  static constexpr int kChunk = 16;
  static constexpr int kSliceChannels = 8;
  using RowVector = uint2;  // columns 0, 1 in x (low, high half), 2, 3 in y
  using Pixel = uint4;      // channels 2i, 2i + 1 in word i (low, high half)

  static bool vector_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
    return vectorizable_input_16bit(ops, s);
  }
  static __device__ __forceinline__ const uint16_t* input(const ConvPoolOperands& ops) {
    return ops.x16;
  }
  static __device__ __forceinline__ const uint16_t* weight(const ConvPoolOperands& ops) {
    return ops.weight16;
  }
  static __device__ __forceinline__ uint16_t* output(const ConvPoolOperands& ops) {
    return ops.out16;
  }
  static __device__ __forceinline__ float bias(const ConvPoolOperands& ops, int channel) {
    return E::to_float(__ldg(ops.bias16 + int64_t(channel) * ops.bias_stride));
  }
  static __device__ __forceinline__ uint16_t to_output(float v) { return E::from_float(v); }
  // 4 consecutive outputs, 8-byte aligned (store_pooled).
  static __device__ __forceinline__ void store_run(uint16_t* out, float a, float b, float c,
                                                   float d) {
    *reinterpret_cast<uint2*>(out) = make_uint2(pair(to_output(a), to_output(b)),
                                                pair(to_output(c), to_output(d)));
  }
  // 2 consecutive outputs, 4-byte aligned (store_conv_channels_last).
  static __device__ __forceinline__ void store_pair(uint16_t* out, float a, float b) {
    *reinterpret_cast<uint32_t*>(out) = pair(to_output(a), to_output(b));
  }
  // 8 consecutive outputs, 16-byte aligned (store_conv_rows).
  static __device__ __forceinline__ void store_row8(uint16_t* out, const float (&v)[8]) {
    store_vector(out, v);
  }
  // 16 bytes of consecutive outputs, 16-byte aligned (store_pooled_channels_last).
  static constexpr int kOutVector = 8;
  static __device__ __forceinline__ void store_vector(uint16_t* out, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(out) = make_uint4(
        pair(to_output(v[0]), to_output(v[1])), pair(to_output(v[2]), to_output(v[3])),
        pair(to_output(v[4]), to_output(v[5])), pair(to_output(v[6]), to_output(v[7])));
  }
  static __device__ __forceinline__ uint16_t load(const uint16_t* p) { return __ldg(p); }
  static __device__ __forceinline__ uint2 load_row(const uint16_t* p) {
    return __ldg(reinterpret_cast<const uint2*>(p));
  }
  static __device__ __forceinline__ uint2 zero_row() { return make_uint2(0u, 0u); }  // +0.0
  static __device__ __forceinline__ uint4 load_pixel(const uint16_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  }
  static __device__ __forceinline__ uint4 zero_pixel() { return make_uint4(0u, 0u, 0u, 0u); }
  static __device__ __forceinline__ uint2 make_row(const uint16_t (&v)[4]) {
    return make_uint2(pair(v[0], v[1]), pair(v[2], v[3]));
  }
  // pack_weights' row: element f (= channel i * 9 + tap) is half f % 2 of word f / 2, as in
  // memory. Called for f = 0, 1, 2, ... in order.
  static __device__ __forceinline__ void put(uint32_t (&row)[36], int f, uint16_t v) {
    row[f / 2] = f % 2 == 0 ? uint32_t(v) : row[f / 2] | (uint32_t(v) << 16);
  }
  // The slice's channels under `tap` -> the tap's staged 16 bytes: word j pairs channels 2 j
  // and 2 j + 1, elements f = 18 j + tap and f + 9 (opposite halves of their words).
  static __device__ __forceinline__ uint4 weight_slice(const uint32_t (&row)[36], int tap) {
    uint32_t word[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int f = 18 * j + tap;
      // __byte_perm selectors: low half of the first word + high half of the second, or the
      // high half of the first + the low half of the second.
      word[j] = __byte_perm(row[f / 2], row[(f + 9) / 2], f % 2 == 0 ? 0x7610 : 0x5432);
    }
    return make_uint4(word[0], word[1], word[2], word[3]);
  }
  // 8 channels x 4 columns -> 4 pixels x 8 channels, pixel j at dst[wrap.slot(j)]. Pixel j's
  // word i pairs column j of channels 2i and 2i + 1: the low (j even) or high (j odd) halves of
  // the x (j < 2) or y words.
  static __device__ __forceinline__ void store_pixels(const uint2 (&c)[8], uint4* dst,
                                                      const PixelWrap& wrap) {
    constexpr uint32_t kLowHalves = 0x5410, kHighHalves = 0x7632;  // __byte_perm selectors
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t selector = j % 2 == 0 ? kLowHalves : kHighHalves;
      uint32_t word[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        word[i] = j < 2 ? __byte_perm(c[2 * i].x, c[2 * i + 1].x, selector)
                        : __byte_perm(c[2 * i].y, c[2 * i + 1].y, selector);
      dst[wrap.slot(j)] = make_uint4(word[0], word[1], word[2], word[3]);
    }
  }
};

}  // namespace tiled_wgmma
