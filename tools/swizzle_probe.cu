// What the tensor copy engine's and wgmma's shared-memory swizzles do at arbitrary start rows:
// the question a channels-last input read in whole 32-128 byte runs of channels a pixel (a
// swizzled stage) has to answer before a kernel is built on it. The general kernel's operands
// start at any pixel of a staged halo (a tap's column shift), so a swizzled operand would start
// at any row of the swizzle's 8-row pattern.
//
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/swizzle_probe \
//       tools/swizzle_probe.cu && /tmp/swizzle_probe
//
// For each swizzle width W (32, 64, 128 bytes a row; 16-bit elements) it fills a shared-memory
// matrix of rows of W bytes two ways, (1) by threads, each 16-byte chunk c of row r placed at
// chunk c ^ ((address of the row >> 7) & (W / 16 - 1)) (the swizzle taken on the absolute
// address; the buffer is 1024-byte aligned), and (2) by one TMA box of that swizzle mode, and
// says whether the two agree. Then it runs wgmma m64n64k16 (float16, fp32 sums) with A read
// from that matrix through a descriptor of that swizzle starting at row s = 0..8 and at each
// 32-byte K step of the row, for each matrix base offset 0..7 (descriptor bits 49-51), and
// prints which base offsets give the product of rows s..s+63 exactly (against the host's).
// The unswizzled layout the general kernel uses now (16-byte core-matrix rows, start at any
// row) runs first as the harness's own check. Exit status 0: the harness's check passed.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../kernels/conv_pool_wgmma.cuh"

namespace {

constexpr int kRows = 80;         // A's rows in shared memory (64 + the largest start, padded)
constexpr int kMaxRowBytes = 128;  // the widest swizzle
constexpr int kAElements = kRows * kMaxRowBytes / 2;
constexpr int kBBytes = 2 * 64 * 16;  // B: K = 16 x N = 64, [K slice][n][16 bytes]

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t error_ = (call);                                                          \
    if (error_ != cudaSuccess) {                                                          \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(error_)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

__host__ __device__ int a_value(int row, int k) { return (row * 7 + k * 3) % 11 - 5; }
__host__ __device__ int b_value(int k, int n) { return (k * 5 + n) % 7 - 3; }

// Byte offset of element (row, k) of A in a buffer whose rows are row_bytes wide (0: the
// unswizzled layout, [k / 8][row][16 bytes]), swizzled on the buffer's (1024-aligned) offsets.
__host__ __device__ int a_offset(int row, int k, int row_bytes) {
  if (row_bytes == 0) return ((k / 8) * kRows + row) * 16 + (k % 8) * 2;
  const int row_start = row * row_bytes;
  const int chunk = (k / 8) ^ ((row_start >> 7) & (row_bytes / 16 - 1));
  return row_start + chunk * 16 + (k % 8) * 2;
}

// One block of one warpgroup: A filled by the threads (tma == 0) or by one box of `map`, B by
// the threads; D = A[start .. start + 64) x B over K step `kstep` of A's rows, stored [m][n];
// a copy of A's bytes as staged goes to a_staged.
__global__ void probe_kernel(const __grid_constant__ CUtensorMap map, int use_tma, int row_bytes,
                             int start, int kstep, int base_offset, float* d_out,
                             unsigned char* a_staged) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) unsigned char a[kRows * kMaxRowBytes];
  __shared__ __align__(128) unsigned char b[kBBytes];
  __shared__ uint64_t landed;
  const int t = threadIdx.x;
  uint16_t* a16 = reinterpret_cast<uint16_t*>(a);
  const int k_per_row = row_bytes == 0 ? 16 : row_bytes / 2;
  if (!use_tma) {
    for (int i = t; i < kRows * k_per_row; i += blockDim.x) {
      const int row = i / k_per_row, k = i % k_per_row;
      a16[a_offset(row, k, row_bytes) / 2] = __half_as_ushort(__int2half_rn(a_value(row, k)));
    }
  }
  uint16_t* b16 = reinterpret_cast<uint16_t*>(b);
  for (int i = t; i < 16 * 64; i += blockDim.x) {
    const int k = i / 64, n = i % 64;
    b16[((k / 8) * 64 + n) * 8 + k % 8] = __half_as_ushort(__int2half_rn(b_value(k, n)));
  }
  if (t == 0) {
    mbarrier_init(&landed, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (use_tma) {
    if (t == 0) {
      mbarrier_arrive_expect_tx(&landed, kRows * row_bytes);
      tma_load_5d(a, &map, 0, 0, 0, 0, 0, &landed);
    }
    mbarrier_wait(&landed, 0);
  }
  fence_proxy_async();
  __syncthreads();
  for (int i = t; i < kRows * kMaxRowBytes; i += blockDim.x) a_staged[i] = a[i];

  uint64_t a_desc, b_desc = matrix_descriptor(shared_address(b), 64 * 16, 128);
  if (row_bytes == 0) {
    a_desc = matrix_descriptor(shared_address(a) + start * 16, kRows * 16, 128);
  } else {
    const uint32_t address = shared_address(a) + start * row_bytes + kstep * 32;
    a_desc = uint64_t((address & 0x3FFFF) >> 4) | (1ull << 16) |
             (uint64_t((8 * row_bytes) >> 4) << 32) | (uint64_t(base_offset & 7) << 49) |
             (swizzle_layout(row_bytes) << 62);
  }
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  wgmma_fence();
  WgmmaSS<Float16>::mma(d, a_desc, b_desc, false);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(d);
  const int warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  for (int j = 0; j < 8; ++j)
    for (int v = 0; v < 4; ++v) {
      const int m = 16 * warp + g + (v >= 2 ? 8 : 0), n = 8 * j + 2 * q + (v & 1);
      d_out[m * 64 + n] = d[4 * j + v];
    }
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// A's rows in global memory (row_bytes / 2 halves each) and a tensor map whose one box is all
// kRows of them, in that swizzle; *valid: whether the driver encoded it.
CUtensorMap a_map(EncodeTiled encode, uint16_t* rows, int row_bytes, bool* valid) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  *valid = false;
  if (row_bytes == 0) return map;
  const CUtensorMapSwizzle swizzle = row_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_32B;
  cuuint64_t dims[5] = {cuuint64_t(row_bytes / 2), kRows, 1, 1, 1};
  cuuint64_t strides[4] = {cuuint64_t(row_bytes), cuuint64_t(row_bytes) * kRows,
                           cuuint64_t(row_bytes) * kRows, cuuint64_t(row_bytes) * kRows};
  cuuint32_t box[5] = {cuuint32_t(row_bytes / 2), kRows, 1, 1, 1};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult result =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, rows, dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) std::printf("cuTensorMapEncodeTiled: error %d\n", int(result));
  *valid = result == CUDA_SUCCESS;
  return map;
}

struct Outcome {
  bool exact;
  bool staged_as_threads;  // (TMA fills) its bytes equal the threads' absolute-swizzle fill
};

Outcome run(const CUtensorMap& map, bool use_tma, int row_bytes, int start, int kstep,
            int base_offset, float* d_device, unsigned char* staged_device,
            const std::vector<unsigned char>& thread_bytes) {
  probe_kernel<<<1, 128>>>(map, use_tma, row_bytes, start, kstep, base_offset, d_device,
                           staged_device);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> d(64 * 64);
  std::vector<unsigned char> staged(kRows * kMaxRowBytes);
  CHECK(cudaMemcpy(d.data(), d_device, d.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(staged.data(), staged_device, staged.size(), cudaMemcpyDeviceToHost));
  Outcome outcome{true, true};
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += a_value(start + m, 16 * kstep + k) * b_value(k, n);
      if (d[m * 64 + n] != float(sum)) outcome.exact = false;
    }
  const int bytes = kRows * (row_bytes == 0 ? 32 : row_bytes);
  if (!thread_bytes.empty())
    outcome.staged_as_threads = std::memcmp(staged.data(), thread_bytes.data(), bytes) == 0;
  return outcome;
}

}  // namespace

int main() {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    std::printf("no cuTensorMapEncodeTiled in this driver\n");
    return 2;
  }
  const EncodeTiled encode = reinterpret_cast<EncodeTiled>(function);
  float* d_device;
  unsigned char* staged_device;
  uint16_t* rows_device;
  CHECK(cudaMalloc(&d_device, 64 * 64 * 4));
  CHECK(cudaMalloc(&staged_device, kRows * kMaxRowBytes));
  CHECK(cudaMalloc(&rows_device, kAElements * 2));

  // The harness's check: the unswizzled layout at every start row.
  bool valid;
  const CUtensorMap none = a_map(encode, rows_device, 0, &valid);
  int failures = 0;
  for (int start = 0; start <= 8; ++start)
    failures += !run(none, false, 0, start, 0, 0, d_device, staged_device, {}).exact;
  std::printf("no swizzle (16-byte core-matrix rows), start rows 0..8: %s\n",
              failures == 0 ? "exact at every start" : "WRONG: the harness is broken");
  if (failures != 0) return 1;

  for (int row_bytes : {32, 64, 128}) {
    std::vector<uint16_t> rows(kRows * row_bytes / 2);
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < row_bytes / 2; ++k) {
        const __half h = __int2half_rn(a_value(r, k));
        std::memcpy(&rows[r * row_bytes / 2 + k], &h, 2);
      }
    CHECK(cudaMemcpy(rows_device, rows.data(), rows.size() * 2, cudaMemcpyHostToDevice));
    const CUtensorMap map = a_map(encode, rows_device, row_bytes, &valid);
    // The threads' fill, as staged, for comparison with the box's.
    std::vector<unsigned char> thread_bytes(kRows * row_bytes);
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < row_bytes / 2; ++k)
        std::memcpy(&thread_bytes[a_offset(r, k, row_bytes)], &rows[r * row_bytes / 2 + k], 2);
    for (int use_tma = 0; use_tma <= (valid ? 1 : 0); ++use_tma) {
      bool staged_same = true;
      std::printf("%d-byte swizzle, A staged by %s:\n", row_bytes,
                  use_tma ? "one TMA box" : "threads (chunk ^ address bits 7..)");
      for (int kstep = 0; kstep < row_bytes / 32; ++kstep)
        for (int start = 0; start <= 8; ++start) {
          std::printf("  K step %d, start row %d: exact with base offsets {", kstep, start);
          const char* sep = "";
          for (int base_offset = 0; base_offset < 8; ++base_offset) {
            const Outcome o = run(map, use_tma, row_bytes, start, kstep, base_offset, d_device,
                                  staged_device, use_tma ? thread_bytes
                                                         : std::vector<unsigned char>());
            staged_same = staged_same && o.staged_as_threads;
            if (o.exact) {
              std::printf("%s%d", sep, base_offset);
              sep = ", ";
            }
          }
          std::printf("}\n");
        }
      if (use_tma)
        std::printf("  the box's bytes %s the threads' absolute-address swizzle\n",
                    staged_same ? "equal" : "DIFFER from");
    }
  }
  return 0;
}
