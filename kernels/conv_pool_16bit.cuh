// Element types of the kernels. Float16 and BFloat16 serve the 16-bit kernels
// (conv_relu_maxpool_half.cu and the 16-bit instances of conv_relu_maxpool_wgmma.cu): the
// operands arrive as raw 16-bit words (ConvPoolOperands::x16, ...); the kernels accumulate in
// fp32 and round to the 16-bit type once, at the store. Kernels written once for all three
// types (small_*, tiled_*_flat) also take Float32 and reach the operands through
// ElementOperands<E>, which picks the float or the 16-bit pointers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "conv_relu_maxpool.h"

struct Float32 {
  using Raw = float;
  static __device__ __forceinline__ float to_float(float v) { return v; }
  static __device__ __forceinline__ float from_float(float v) { return v; }
};

struct Float16 {
  using T = __half;
  using Raw = uint16_t;
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
  }
  static __device__ __forceinline__ uint16_t from_float(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
  // Two values as one word, `low` in the low half (one cvt.rn.f16x2.f32; exact for values that
  // came from this type).
  static __device__ __forceinline__ uint32_t pack(float low, float high) {
    const __half2 pair = __floats2half2_rn(low, high);
    return reinterpret_cast<const uint32_t&>(pair);
  }
};

struct BFloat16 {
  using T = __nv_bfloat16;
  using Raw = uint16_t;
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
  static __device__ __forceinline__ uint16_t from_float(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
  static __device__ __forceinline__ uint32_t pack(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return reinterpret_cast<const uint32_t&>(pair);
  }
};

// Four 16-bit words (8 bytes, lowest address in the low half of .x) as fp32.
template <class E>
__device__ __forceinline__ float4 to_float4(uint2 bits) {
  return make_float4(E::to_float(uint16_t(bits.x)), E::to_float(uint16_t(bits.x >> 16)),
                     E::to_float(uint16_t(bits.y)), E::to_float(uint16_t(bits.y >> 16)));
}

// The operand pointers of element type E (the member of each union that E's launch set).
template <class E>
struct ElementOperands {
  using Raw = typename E::Raw;
  static constexpr bool kFloat = std::is_same_v<Raw, float>;
  static __device__ __forceinline__ const Raw* x(const ConvPoolOperands& ops) {
    if constexpr (kFloat) return ops.x; else return ops.x16;
  }
  static __device__ __forceinline__ const Raw* weight(const ConvPoolOperands& ops) {
    if constexpr (kFloat) return ops.weight; else return ops.weight16;
  }
  static __device__ __forceinline__ const Raw* bias(const ConvPoolOperands& ops) {
    if constexpr (kFloat) return ops.bias; else return ops.bias16;
  }
  static __device__ __forceinline__ Raw* out(const ConvPoolOperands& ops) {
    if constexpr (kFloat) return ops.out; else return ops.out16;
  }
};

// D += A * B, m16n8k16, 16-bit inputs (two per register, the lower k in the low half), fp32
// accumulators (tiled_16bit_mma in conv_relu_maxpool_half.cu, stem_16bit).
template <class E>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<Float16>(float (&d)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<BFloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                    const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
