// Hopper wgmma, proxy-fence, mbarrier and bulk-copy wrappers (PTX ISA 8.0+, sm_90a) shared by
// the wgmma kernels (conv_relu_maxpool_wgmma.cu), the flat kernel's wgmma mainloop
// (conv_relu_maxpool.cu) and the general kernel (kernels/hopper/).
// The instructions themselves exist only in sm_90a code: callers guard them with
// __CUDA_ARCH_FEAT_SM90_ALL (the fences and waits assemble for any sm_90 target).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_16bit.cuh"

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Shared-memory matrix descriptor: start address, leading byte offset (between core matrices
// along K), stride byte offset (between core matrices along M or N), all in 16-byte units; no
// swizzle unless `layout` names one (swizzle_layout).
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t address, uint32_t k_stride,
                                                      uint32_t mn_stride, uint64_t layout = 0) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(k_stride >> 4) << 16) |
         (uint64_t(mn_stride >> 4) << 32) | (layout << 62);
}
// A descriptor's layout field for rows of `swizzle` bytes in the copy engine's swizzle of that
// width (0: none). wgmma applies the swizzle to the shared addresses themselves, as the copy
// engine does, so an operand may start at any row of the 8-row pattern with base offset 0
// (tools/swizzle_probe.cu, on the H200).
__host__ __device__ constexpr uint64_t swizzle_layout(int swizzle) {
  return swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Ordinary shared-memory stores become visible to the tensor cores' (async proxy) reads.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma wait.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x 64, fp32) += A (64 x K, registers) * B (K x 64, shared memory: descriptor b,
// K-major), K = 8 for TF32 and 16 for float16 / bfloat16. Warp w of the warpgroup holds rows
// 16 w + [0, 16) of A in the mma.sync A fragment layout of that K (TF32, m16n8k8: a[0] row g
// col t, a[1] row g + 8 col t, a[2] row g col t + 4, a[3] row g + 8 col t + 4; 16 bits,
// m16n8k16: the same rows, cols 2t and 2t + 1 in a[0] and a[1], 2t + 8 and 2t + 9 in a[2] and
// a[3], the lower col in the low half; g = lane / 4, t = lane % 4), and of D in the m16n8 C
// layout of its 8 n-tiles (d[4 j + v] as acc[j][v]). The A registers must not change until a
// wgmma_wait has seen this wgmma's group. IMMEDIATES: scale-d, scale-a, scale-b (and, for 16
// bits, trans-b).
#define CONV_POOL_WGMMA_RS_N64(INSTRUCTION, IMMEDIATES)                                         \
  asm volatile(INSTRUCTION                                                                     \
               " {%0, %1, %2, %3, %4, %5, %6, %7, "                                            \
               "%8, %9, %10, %11, %12, %13, %14, %15, "                                        \
               "%16, %17, %18, %19, %20, %21, %22, %23, "                                      \
               "%24, %25, %26, %27, %28, %29, %30, %31}, "                                      \
               "{%32, %33, %34, %35}, %36, " IMMEDIATES ";\n"                                  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),       \
                 "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),     \
                 "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),              \
                 "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),              \
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]),              \
                 "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))

__device__ __forceinline__ void wgmma_tf32_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                                  uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  CONV_POOL_WGMMA_RS_N64("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "1, 1, 1");
#endif
}
__device__ __forceinline__ void wgmma_f16_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                                 uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  CONV_POOL_WGMMA_RS_N64("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "1, 1, 1, 0");
#endif
}
__device__ __forceinline__ void wgmma_bf16_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                                  uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  CONV_POOL_WGMMA_RS_N64("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "1, 1, 1, 0");
#endif
}
#undef CONV_POOL_WGMMA_RS_N64

// wgmma_tf32_rs_n64 with scale-d a predicate: accumulate = false ignores D's old value
// (D = A * B).
__device__ __forceinline__ void wgmma_tf32_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
        "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
#endif
}

// Generic-proxy global writes become visible to later async-proxy (bulk copy) reads.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Programmatic dependent launch (PTX 7.8+, sm_90). A kernel launched with programmatic stream
// serialization may start before the previous kernel in its stream has finished: it waits in
// grid_dependency_wait until that kernel has completed and its writes are visible, so every
// global access must follow the wait. The previous kernel lets it start once each of its
// blocks has called launch_dependents (or exited). Both are no-ops without such a launch.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// mbarrier (shared memory, this CTA) and the 1D bulk copy engine (cp.async.bulk, PTX 8.0+).
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)),
               "r"(arrivals)
               : "memory");
}
// The initialised barriers become visible to the async proxy (the bulk copies complete them).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` more of transactions in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}
// Returns once the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared; the copy engine
// counts them against `barrier`'s expected transactions.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes,
                                                    uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
}

// One arrival on `barrier` (no transaction count).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier))
               : "memory");
}

// The tensor copy engine (TMA, cp.async.bulk.tensor, sm_90): the box of a 5-D tensor that
// `map` describes (a CUtensorMap, in the kernel's parameters: __grid_constant__) at element
// coordinates c0..c4 (innermost first; out-of-bounds elements, negative coordinates included,
// arrive as zeros) -> shared memory at dst (128-byte aligned), densely, innermost dimension
// fastest; the engine counts the box's bytes against `barrier`'s expected transactions.
__device__ __forceinline__ void tma_load_5d(void* dst, const void* map, int c0, int c1, int c2,
                                            int c3, int c4, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
      ::"r"(shared_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3), "r"(c4), "r"(shared_address(barrier))
      : "memory");
}

// Fetches a tensor map (a kernel parameter) ahead of its first copy.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Warp specialization (sm_90a): a warpgroup gives back registers (dec) or takes more (inc), up
// to kRegisters a thread; every warp of the warpgroup executes it. The kernel needs a register
// cap at entry (__launch_bounds__ with a minimum of blocks) for these to take effect.
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// A barrier over `threads` threads (whole warps) of the block on hardware barrier `id` (0 is
// __syncthreads'), so that some warps can synchronize while the others run on.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// D (64 x N, fp32) += A (64 x K, smem) * B (K x N, smem), N = 128 (64 accumulators per thread)
// or 64 (32), K = 8 TF32 or 16 16-bit elements: 32 bytes of K either way, two core matrices.
// Thread t of the warpgroup holds rows 16 * (t / 32) + (t % 32) / 4 (+ 8) and columns
// 8 j + 2 (t % 4) (+ 1), for every K. accumulate = false ignores D's old value (D = A * B).
// The operands after the descriptors: scale-d (the predicate), imm-scale-a, imm-scale-b (1: no
// negation) and, for .f16 / .bf16 only, imm-trans-a, imm-trans-b (0: K-major, no transpose).
#define WGMMA_N128_ASM(INSTRUCTION, IMMEDIATES)             \
  asm volatile(                                             \
      "{\n"                                                 \
      ".reg .pred p;\n"                                     \
      "setp.ne.b32 p, %66, 0;\n"                            \
      INSTRUCTION " "                                       \
      "{%0, %1, %2, %3, %4, %5, %6, %7, "                   \
      "%8, %9, %10, %11, %12, %13, %14, %15, "              \
      "%16, %17, %18, %19, %20, %21, %22, %23, "            \
      "%24, %25, %26, %27, %28, %29, %30, %31, "            \
      "%32, %33, %34, %35, %36, %37, %38, %39, "            \
      "%40, %41, %42, %43, %44, %45, %46, %47, "            \
      "%48, %49, %50, %51, %52, %53, %54, %55, "            \
      "%56, %57, %58, %59, %60, %61, %62, %63}, "           \
      "%64, %65, p, " IMMEDIATES ";\n"                      \
      "}\n"                                                 \
      :                                                     \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),     \
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),   \
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
      : "l"(a), "l"(b), "r"(int(accumulate)))

#define WGMMA_N64_ASM(INSTRUCTION, IMMEDIATES)              \
  asm volatile(                                             \
      "{\n"                                                 \
      ".reg .pred p;\n"                                     \
      "setp.ne.b32 p, %34, 0;\n"                            \
      INSTRUCTION " "                                       \
      "{%0, %1, %2, %3, %4, %5, %6, %7, "                   \
      "%8, %9, %10, %11, %12, %13, %14, %15, "              \
      "%16, %17, %18, %19, %20, %21, %22, %23, "            \
      "%24, %25, %26, %27, %28, %29, %30, %31}, "           \
      "%32, %33, p, " IMMEDIATES ";\n"                      \
      "}\n"                                                 \
      :                                                     \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),     \
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),   \
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
      : "l"(a), "l"(b), "r"(int(accumulate)))

// The narrow form, N = 32 (16 accumulators per thread): the general kernel's N = 64 tiles'
// last channel block where it holds at most 32 channels (Plan::tail_n).
#define WGMMA_N32_ASM(INSTRUCTION, IMMEDIATES)              \
  asm volatile(                                             \
      "{\n"                                                 \
      ".reg .pred p;\n"                                     \
      "setp.ne.b32 p, %18, 0;\n"                            \
      INSTRUCTION " "                                       \
      "{%0, %1, %2, %3, %4, %5, %6, %7, "                   \
      "%8, %9, %10, %11, %12, %13, %14, %15}, "             \
      "%16, %17, p, " IMMEDIATES ";\n"                      \
      "}\n"                                                 \
      :                                                     \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),     \
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),   \
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])  \
      : "l"(a), "l"(b), "r"(int(accumulate)))

// wgmma with both operands in shared memory (descriptors a and b), fp32 accumulators, for
// element type E: m64nNk8 TF32 for Float32 (the tensor cores read an fp32 word's top 19 bits),
// m64nNk16 for Float16 / BFloat16; N = 128 (64 accumulators per thread), 64 (32) or 32 (16):
// the overload of d's length. The wgmma kernels (conv_relu_maxpool_wgmma.cu) and the
// general kernel (kernels/hopper/) issue theirs through these.
template <class E>
struct WgmmaSS;

template <>
struct WgmmaSS<Float32> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "1, 1");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "1, 1");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N32_ASM("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32", "1, 1");
#endif
  }
};

template <>
struct WgmmaSS<Float16> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N32_ASM("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16", "1, 1, 0, 0");
#endif
  }
};

template <>
struct WgmmaSS<BFloat16> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N128_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "1, 1, 0, 0");
#endif
  }
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N32_ASM("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16", "1, 1, 0, 0");
#endif
  }
};

// ---------------------------------------------------------------------------
// Cluster and global-memory wrappers (PTX ISA 7.8+, sm_90), for the split reductions of the
// 3 x 3 / 2 x 2 kernel (kernels/hopper/tiled_epilogue.cuh).

// Thread block clusters (PTX ISA 7.8+, sm_90): this block's rank in its cluster and the
// cluster's index in the grid (x: the kernels launch 1-D clusters); a barrier over the
// cluster's threads in two halves (the release orders this thread's shared-memory writes
// before the other blocks' reads after their wait); the address in the shared memory of the
// cluster's block `rank` of what this block's `p` points to, and 16 bytes read from there.
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return int(rank);
}
__device__ __forceinline__ int cluster_index() {
  uint32_t index;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(index));
  return int(index);
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
// An arrival that orders no memory access (a release is a fence before it): for "this block
// reads no other block's shared memory any more", once every value it loaded from them has
// been used, so that the loads are complete.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// A shared-window address (shared_address) of this block mapped to the same place in the shared
// memory of the cluster's block `rank`.
__device__ __forceinline__ uint32_t cluster_shared_address(uint32_t local, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ uint32_t cluster_shared_address(const void* p, int rank) {
  return cluster_shared_address(shared_address(p), rank);
}
// (Volatile, so that it stays between the cluster barriers; no memory clobber, so that the
// compiler may keep several in flight.)
__device__ __forceinline__ float4 load_cluster_shared(uint32_t address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "r"(address));
  return v;
}

// 16 bytes stored to, added into (at L2; no value back) and read back from global memory, all
// at gpu scope (relaxed), so that the load sees this thread's earlier store and reductions
// there rather than a stale L1 line.
__device__ __forceinline__ void store_relaxed(float4* p, const float4& v) {
  asm volatile("st.relaxed.gpu.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void red_add(float4* p, const float4& v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ float4 load_relaxed(const float4* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
