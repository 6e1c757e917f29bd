// float16 / bfloat16 element types of the 16-bit kernels (conv_relu_maxpool_half.cu and the
// 16-bit instances of conv_relu_maxpool_wgmma.cu). The operands arrive as raw 16-bit words
// (ConvPoolOperands::x16, ...); the kernels accumulate in fp32 and round to the 16-bit type once,
// at the store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

struct Float16 {
  using T = __half;
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
  }
  static __device__ __forceinline__ uint16_t from_float(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};

struct BFloat16 {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
  static __device__ __forceinline__ uint16_t from_float(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};
