// Device helpers shared by the fused Conv2d -> ReLU -> MaxPool2d kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// cp.async: global -> shared copies that bypass registers; src-size 0 writes zeros without
// reading (the padding and the tails).
__device__ __forceinline__ void cp_async_4(float* smem_dst, const float* global_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_16(float* smem_dst, const float* global_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
}
// 8 bytes (four 16-bit words) at a time: the float16 / bfloat16 input rows of tiled_16bit_flat.
__device__ __forceinline__ void cp_async_8(void* smem_dst, const void* global_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 8 : 0));
}
// The same, to a shared-memory address already in the shared window (no conversion per copy).
__device__ __forceinline__ void cp_async_4_shared(unsigned smem_dst, const void* global_src,
                                                  bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_dst), "l"(global_src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_16_shared(unsigned smem_dst, const void* global_src,
                                                   bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst),
               "l"(global_src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// D += A * B, m16n8k8, TF32 inputs, fp32 accumulators (conv_relu_maxpool.cu, small_tf32 in
// conv_relu_maxpool_small.cu).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// max that lets NaN win, like PyTorch's max_pool2d: one max.NaN (FMNMX.NAN), whose NaN result
// is the canonical one (PyTorch keeps the payload; both are NaN).
__device__ __forceinline__ float max_keeping_nan(float running, float v) {
  float out;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(out) : "f"(running), "f"(v));
  return out;
}

// ReLU that keeps NaN, like torch.relu.
__device__ __forceinline__ float relu_keeping_nan(float v) { return max_keeping_nan(v, 0.f); }

// x clamped to +-FLT_MAX, a NaN made the canonical NaN (max.NaN / min.NaN): the finite value
// the 3xTF32 splits take their small part from (split_tf32 in conv_relu_maxpool.cu,
// Tf32SplitOperands in conv_relu_maxpool_wgmma.cu).
__device__ __forceinline__ float clamp_to_finite(float x) {
  float clamped;
  asm("max.NaN.f32 %0, %1, 0fFF7FFFFF;\n\tmin.NaN.f32 %0, %0, 0f7F7FFFFF;"
      : "=f"(clamped) : "f"(x));
  return clamped;
}

// The 3xTF32 split of an fp32 operand for the wgmma kernels, which read TF32 from fp32 words
// by truncation (the low 13 bits dropped): big = x, its NaN made the canonical one (which the
// truncation keeps even where x's payload lies in the dropped bits); small = c - trunc(c) +
// c x 2^-30 with c = clamp_to_finite(x): finite for x = +-inf, with x's sign, and never zero
// where x is not (the 2^-30 term, an error below 2^-29 |x y| a product), so that a cross term
// with an infinite other operand is an infinity of big x big's sign, not the NaN of inf x 0.
// A product is then big * big' + small * big' + big * small' (the dropped small * small' is
// below 2^-20 |x y|).
__device__ __forceinline__ void split_tf32_operand(float x, float& big, float& small) {
  const float clamped = clamp_to_finite(x);
  asm("min.NaN.f32 %0, %1, 0f7F800000;" : "=f"(big) : "f"(x));
  small = fmaf(clamped, 0x1p-30f,
               clamped - __uint_as_float(__float_as_uint(clamped) & 0xffffe000u));
}
