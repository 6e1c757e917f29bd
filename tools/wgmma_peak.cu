// Throughput of wgmma m64nNk8 TF32 with both operands in shared memory, for the descriptor
// layouts the fused kernel could use. Data content does not matter for throughput, so the
// operands are whatever shared memory holds. Build and run on the H200:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_peak tools/wgmma_peak.cu && /tmp/wgmma_peak
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t lbo, uint32_t sbo,
                                               uint32_t swizzle) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) |
         (uint64_t(sbo >> 4) << 32) | (uint64_t(swizzle) << 62);
}

__device__ __forceinline__ void wgmma128(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
        "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
        "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b));
}

// mode 0: the fused kernel's layout (A: SBO 640, LBO 6400; B: SBO 128, LBO 2048, no swizzle)
// mode 1: compact no-swizzle (A: SBO 128, LBO 1024)
// mode 2: 32-byte swizzle, mode 3: 128-byte swizzle (K-major, canonical strides)
// two m-tiles per warpgroup, 2 warpgroups, 18 wgmmas per group as in the fused kernel.
__global__ void __launch_bounds__(256, 1) peak(int mode, int iters, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  float acc[2][64];
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 64; ++i) acc[m][i] = 0.f;
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[m][i])::"memory");
  uint32_t a_lbo = 6400, a_sbo = 640, b_lbo = 2048, b_sbo = 128, sw = 0;
  if (mode == 1) { a_lbo = 1024; a_sbo = 128; }
  if (mode == 2) { a_lbo = 16; a_sbo = 256; b_lbo = 16; b_sbo = 256; sw = 3; }
  if (mode == 3) { a_lbo = 16; a_sbo = 1024; b_lbo = 16; b_sbo = 1024; sw = 1; }
  const int wg = threadIdx.x / 128;
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      const uint64_t b = descriptor(base + 65536 + (mode >= 2 ? tap * 4096 : tap * 4096), b_lbo, b_sbo, sw);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint32_t off = mode >= 2 ? (wg * 2 + m) * 2048 : (wg * 2 + m) * 128 + (tap % 3) * 16;
        wgmma128(acc[m], descriptor(base + off, a_lbo, a_sbo, sw), b);
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[m][i])::"memory");
  float s = 0.f;
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 64; ++i) s += acc[m][i];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 200 * 1024, iters = 2000;
  cudaFuncSetAttribute(peak, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  float* sink;
  cudaMalloc(&sink, 1024 * sizeof(float));
  const char* names[] = {"fused layout (no swizzle, SBO 640)", "compact no swizzle",
                         "32B swizzle", "128B swizzle"};
  for (int mode = 0; mode < 4; ++mode) {
    peak<<<sms, 256, smem>>>(mode, 10, sink);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    peak<<<sms, 256, smem>>>(mode, iters, sink);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const double flops = 2.0 * 64 * 128 * 8 * 36.0 * iters * sms;
    printf("%-36s %7.1f TFLOP/s (%s)\n", names[mode], flops / ms / 1e9,
           cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
