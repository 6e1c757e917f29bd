// The flat kernels' mainloop on Hopper wgmma (FlatWgmmaMainloop: tiled_tf32_flat_wgmma and
// tiled_16bit_flat_wgmma): the tile and offset table of sm80/flat_mainloop.cuh, one
// m64n64k8 / m64n64k16 wgmma per warpgroup step with the gathered pixels as register A and the
// weights from shared memory.
#pragma once

#include "../conv_pool_wgmma.cuh"
#include "../sm80/flat_mainloop.cuh"

namespace conv_pool_mma {

// Flat-K mainloop on Hopper wgmma (tiled_tf32_flat_wgmma for float32 with TF32,
// tiled_16bit_flat_wgmma for float16 / bfloat16): the same tile and table as
// FlatTensorCoreMainloop, but each step is one wgmma per warpgroup with A (the gathered pixels)
// from registers and B (the weights) from shared memory: 16 warps, warp w the tile's m-tile w
// (4 warpgroups of 64 pixels), all 64 channels, in the m16n8 C layout of
// FlatTensorCoreMainloop<64, 1, 1>'s warps (so the epilogue is theirs). A float32 step is
// m64n64k8 TF32: 2 table loads, 4 gathered loads and one wgmma per warp, instead of the
// mma.sync loop's 4 B pair loads and 8 mmas per 32 x 32 warp tile. A 16-bit step is m64n64k16
// with 16-bit operands (kStepK = 16: half as many wgmmas for the same gathers): 2 paired table
// loads, 8 gathered fp32 loads packed back to 16-bit pairs (exact). The tensor cores work while
// the next steps' pixels are gathered (two groups of steps in flight per warpgroup).
// Weights: the wgmma layout of K-major B in the operands' type, [k / kCoreK][channel][kCoreK]
// (core matrices of 8 channels x 16 bytes: 4 fp32 or 8 16-bit k; 1 KB between k groups),
// staged once per block like the others'.
template <class E, int kStepsPerGroupT = 2>
struct FlatWgmmaMainloop {
  static constexpr bool kFloatOperands = ElementOperands<E>::kFloat;
  static constexpr int kOutBlock = 64;
  static constexpr bool kWgmma = true;
  static constexpr int kSteps = kStepsPerGroupT;  // k steps per committed wgmma group
  static constexpr int kStepK = kFloatOperands ? 8 : 16;  // k per step (one wgmma)
  static constexpr int kCoreShift = kFloatOperands ? 2 : 3;
  static constexpr int kCoreK = 1 << kCoreShift;  // k per 16-byte row of a core matrix
  static constexpr int kWarpsM = conv_pool_epilogue::kTileMTiles;
  static constexpr int kThreads = 32 * kWarpsM;
  static constexpr int kWarpChannels = kOutBlock;
  static constexpr int kNTiles = kOutBlock / 8;
  static constexpr int kMinBlocks = 1;
  static constexpr int kGroupBytes = 16 * kOutBlock;  // one k group: 64 channels x 16 bytes
  float acc[1][kNTiles][4];

  __device__ __forceinline__ FlatWgmmaMainloop() {
    conv_pool_epilogue::zero_mma_accumulators(acc);
  }

  // Staged position of weight (channel k, flattened reduction entry e).
  static __device__ __forceinline__ int weight_index(int k, int e) {
    return (e >> kCoreShift) * (kCoreK * kOutBlock) + kCoreK * k + (e & (kCoreK - 1));
  }

  __device__ __forceinline__ float (&accumulators())[32] {
    return reinterpret_cast<float(&)[32]>(acc);
  }

  // One step's A fragment (conv_pool_wgmma.cuh's layout for its K) for the warp's pixels at
  // src: row g at src, row g + 8 at src + next8; table entry k + j gives column j's offset.
  template <bool kPadded>
  static __device__ __forceinline__ void gather(uint32_t (&a)[4], const float* src,
                                                const int* k_offset, int k, int next8) {
    const int t = threadIdx.x % 4;
    if constexpr (kFloatOperands) {
      const int low = k_offset[k + t], high = k_offset[k + t + 4];
      if (kPadded) {
        a[0] = low < 0 ? 0u : __float_as_uint(src[low]);
        a[1] = low < 0 ? 0u : __float_as_uint(src[low + next8]);
        a[2] = high < 0 ? 0u : __float_as_uint(src[high]);
        a[3] = high < 0 ? 0u : __float_as_uint(src[high + next8]);
      } else {
        a[0] = __float_as_uint(src[low]);
        a[1] = __float_as_uint(src[low + next8]);
        a[2] = __float_as_uint(src[high]);
        a[3] = __float_as_uint(src[high + next8]);
      }
    } else {
      // Columns 2t, 2t + 1 and 2t + 8, 2t + 9: two 8-byte table loads (k is a multiple of 16,
      // the table 8-byte aligned).
      const int2 low = *reinterpret_cast<const int2*>(k_offset + k + 2 * t);
      const int2 high = *reinterpret_cast<const int2*>(k_offset + k + 2 * t + 8);
      const auto value = [&](int offset, int row) {
        return kPadded && offset < 0 ? 0.f : src[offset + row];
      };
      a[0] = E::pack(value(low.x, 0), value(low.y, 0));
      a[1] = E::pack(value(low.x, next8), value(low.y, next8));
      a[2] = E::pack(value(high.x, 0), value(high.y, 0));
      a[3] = E::pack(value(high.x, next8), value(high.y, next8));
    }
  }

  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t b) {
    if constexpr (kFloatOperands) {
      wgmma_tf32_rs_n64(d, a, b);
    } else if constexpr (std::is_same_v<E, Float16>) {
      wgmma_f16_rs_n64(d, a, b);
    } else {
      wgmma_bf16_rs_n64(d, a, b);
    }
  }

  // Reduction steps [step_begin, step_end) of kStepK k each; every wgmma issued here is
  // complete on return (the caller may then overwrite the planes; the A registers are this
  // call's).
  template <bool kPadded, class Operands>
  __device__ __forceinline__ void compute_steps(const float* halo,
                                                const typename Operands::Raw* weights,
                                                const int* k_offset, const ConvPoolShape& s,
                                                const TilePlan& p, int col_shift, int step_begin,
                                                int step_end) {
    static_assert(std::is_same_v<Operands, E>, "the mainloop's element type");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int warp = threadIdx.x / 32, group = (threadIdx.x % 32) / 4;
    const int tile_row = warp / 2, tile_col = (warp % 2) * 16 + group;
    const float* src = halo + tile_row * s.stride_h * p.halo_cols + tile_col * s.stride_w +
                       col_shift;
    const int next8 = 8 * s.stride_w;
    const uint64_t b0 = matrix_descriptor(shared_address(weights), kGroupBytes, 128);
    float (&d)[32] = accumulators();
    // Groups of kSteps steps alternate between two register sets: a group's fragments are
    // gathered while the previous group multiplies, and a set is reused only after
    // wgmma_wait<1> has seen the group before (its last reader) complete.
    uint32_t a[2][kSteps][4];
    int step = step_begin;
    for (; step + 2 * kSteps <= step_end; step += 2 * kSteps) {
#pragma unroll
      for (int set = 0; set < 2; ++set) {
#pragma unroll
        for (int i = 0; i < kSteps; ++i)
          gather<kPadded>(a[set][i], src, k_offset, kStepK * (step + set * kSteps + i), next8);
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < kSteps; ++i)
          mma(d, a[set][i],
              b0 + uint64_t(2 * kGroupBytes / 16) * uint64_t(step + set * kSteps + i));
        wgmma_commit();
        wgmma_wait<1>();
      }
    }
    for (; step < step_end; ++step) {  // the rest, one step a group
      gather<kPadded>(a[0][0], src, k_offset, kStepK * step, next8);
      wgmma_fence();
      mma(d, a[0][0], b0 + uint64_t(2 * kGroupBytes / 16) * uint64_t(step));
      wgmma_commit();
      wgmma_wait<0>();
    }
    wgmma_wait<0>();
    fence_registers(d);
#else
    __trap();  // sm_90a only: the host offers the variants only there
#endif
  }

  // Accumulator (pixel, channel) -> tile[channel][pixel], adding the bias.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<1, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

}  // namespace conv_pool_mma
