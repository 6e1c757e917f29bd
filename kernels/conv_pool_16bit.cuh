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
