// The variant registry: one row per kernel variant (the `config` ids of conv_relu_maxpool.h),
// with what the launcher, the choice, the binding and the tests ask of it: its members' names,
// math and sources per element type, its algorithm family, element types and architecture, why
// it cannot run a shape, its workspace, whether it reads weights packed ahead of time, and its
// launch. The C functions of
// conv_relu_maxpool.h that answer per variant read this table and nothing else.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "conv_pool_env.h"
#include "conv_relu_maxpool.h"
#include "conv_relu_maxpool_half.h"
#include "conv_relu_maxpool_small.h"
#include "conv_relu_maxpool_stem.h"
#include "conv_relu_maxpool_tiled.h"
#include "conv_relu_maxpool_wgmma.h"
#include "hopper/general_wgmma.h"

namespace {

constexpr unsigned kFloat32 = 1u << kElementFloat32;
constexpr unsigned kSixteenBit = (1u << kElementFloat16) | (1u << kElementBFloat16);
constexpr unsigned kAnyElement = kFloat32 | kSixteenBit;

using Unsupported = const char* (*)(const ConvPoolShape&, int, const ConvPoolDevice&);
using Workspace = int64_t (*)(const ConvPoolShape&, int, const ConvPoolDevice&,
                              const ConvPoolOperands*);
using TakesPacked = bool (*)(const ConvPoolShape&);
using StridedOut = bool (*)(const ConvPoolShape&);
using Launch = cudaError_t (*)(const ConvPoolOperands&, const ConvPoolShape&, int,
                               const ConvPoolDevice&, cudaStream_t, const int64_t*);

struct Variant {
  ConvPoolVariant id;
  ConvPoolVariantInfo info;    // members' names, math, sources; family, elements, arch
  Unsupported unsupported;     // beyond the element type; nullptr: every shape
  Workspace workspace;         // nullptr: none
  TakesPacked takes_packed;    // nullptr: never
  StridedOut strided_out;      // writes a channels-last output itself; nullptr: NCHW only
  Launch launch;
};

// Per family: the checks and launches of conv_relu_maxpool_*.cu and kernels/hopper/, in the
// registry's signatures. A family with members in two files (direct, tiled_mma: the 16-bit ones
// in conv_relu_maxpool_half.cu) picks the file's function by the shape's element type.
bool sixteen_bit(const ConvPoolShape& s) { return s.element != kElementFloat32; }

const char* tiled_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return tiled_conv_pool_unsupported(s, v, d);
}
const char* direct_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return sixteen_bit(s) ? half_conv_pool_unsupported(s, v, d) : nullptr;
}
const char* mma_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return sixteen_bit(s) ? half_conv_pool_unsupported(s, v, d)
                        : tiled_conv_pool_unsupported(s, v, d);
}
const char* wgmma_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return wgmma_conv_pool_unsupported(s, d, v == kVariantTiled3xTf32Wgmma);
}
const char* small_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return small_conv_pool_unsupported(s, d, v == kVariantSmallTf32);
}
const char* stem_limits(const ConvPoolShape& s, int, const ConvPoolDevice& d) {
  return stem_conv_pool_unsupported(s, d);
}
const char* general_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return general_wgmma_unsupported(s, d, v == kVariantGeneral3xTf32Wgmma);
}

int64_t half_workspace(const ConvPoolShape& s, int v, const ConvPoolDevice&,
                       const ConvPoolOperands*) {
  return sixteen_bit(s) ? half_conv_pool_workspace_bytes(s, v) : 0;
}
int64_t wgmma_workspace(const ConvPoolShape& s, int v, const ConvPoolDevice&,
                        const ConvPoolOperands*) {
  return wgmma_conv_pool_workspace_bytes(s, v == kVariantTiled3xTf32Wgmma);
}
int64_t general_workspace(const ConvPoolShape& s, int v, const ConvPoolDevice& d,
                          const ConvPoolOperands* ops) {
  return general_wgmma_workspace_bytes(s, d, ops, v == kVariantGeneral3xTf32Wgmma);
}

bool wgmma_packed(const ConvPoolShape& s) { return wgmma_takes_packed_weight(s); }
bool any_strides(const ConvPoolShape&) { return true; }

cudaError_t direct_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                          const ConvPoolDevice&, cudaStream_t stream, const int64_t*) {
  return sixteen_bit(s) ? half_conv_pool_launch(ops, s, v, stream)
                        : direct_conv_pool_launch(ops, s, stream);
}
cudaError_t tiled_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                         const ConvPoolDevice& d, cudaStream_t stream, const int64_t*) {
  return tiled_conv_pool_launch(ops, s, v, d, stream);
}
cudaError_t mma_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                       const ConvPoolDevice& d, cudaStream_t stream, const int64_t*) {
  return sixteen_bit(s) ? half_conv_pool_launch(ops, s, v, stream)
                        : tiled_conv_pool_launch(ops, s, v, d, stream);
}
cudaError_t wgmma_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                         const ConvPoolDevice& d, cudaStream_t stream,
                         const int64_t* out_stride) {
  return wgmma_conv_pool_launch(ops, s, d, stream, out_stride, v == kVariantTiled3xTf32Wgmma);
}
cudaError_t small_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                         const ConvPoolDevice&, cudaStream_t stream, const int64_t*) {
  return small_conv_pool_launch(ops, s, v == kVariantSmallTf32, stream);
}
cudaError_t stem_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int,
                        const ConvPoolDevice& d, cudaStream_t stream,
                        const int64_t* out_stride) {
  return stem_conv_pool_launch(ops, s, d, stream, out_stride);
}
// The stem kernel writes a channels-last output itself where the output channels leave in
// stores of 4 or 8; else (one channel a store lost to the re-layout: 33 channels at batch 32,
// 182 µs against 146 in float16) and with $CONV_POOL_STEM_STRIDED_OUT=0 a re-layout launch
// follows its NCHW output (VGG's first layer at batch 32 in float16: 168 µs in all, against
// 83 with the kernel's stores of 8 channels).
bool stem_strided_out(const ConvPoolShape& s) {
  const char* set = conv_pool_env::hook_env("CONV_POOL_STEM_STRIDED_OUT");
  return s.out_channels % 4 == 0 && (set == nullptr || std::strcmp(set, "0") != 0);
}
cudaError_t general_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                           const ConvPoolDevice& d, cudaStream_t stream,
                           const int64_t* out_stride) {
  return general_wgmma_launch(ops, s, d, stream, out_stride, v == kVariantGeneral3xTf32Wgmma);
}

constexpr const char* kSm80 = "conv_relu_maxpool.cu";
constexpr const char* kHalf = "conv_relu_maxpool_half.cu";
constexpr const char* kWgmma = "conv_relu_maxpool_wgmma.cu";
constexpr const char* kSmall = "conv_relu_maxpool_small.cu";
constexpr const char* kStem = "conv_relu_maxpool_stem.cu";
constexpr const char* kGeneral = "hopper/general_wgmma.cu";

// Row builders: a float32-only variant, and a family with a 16-bit member (name, math, source).
constexpr ConvPoolVariantInfo float32_only(const char* name, const char* family, const char* math,
                                           const char* source, int arch) {
  return {name, family, math, source, kFloat32, arch, nullptr, nullptr, nullptr};
}
constexpr ConvPoolVariantInfo with_16bit(const char* name, const char* family, const char* math,
                                         const char* source, int arch, const char* name_16bit,
                                         const char* math_16bit, const char* source_16bit) {
  return {name, family, math, source, kAnyElement, arch, name_16bit, math_16bit, source_16bit};
}

// The registry. Row i is variant id i (checked below). arch: the lowest compute capability the
// kernel is built for (90: sm_90a's wgmma); the variant's own check refuses older devices.
constexpr Variant kVariants[] = {
    {kVariantDirect,
     with_16bit("direct", "direct", "fp32", kSm80, 0, "direct_16bit", "fp32", kHalf),
     direct_limits, half_workspace, nullptr, nullptr, direct_launch},
    {kVariantTiledFp32, float32_only("tiled_fp32", "tiled", "fp32", kSm80, 80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledMma, with_16bit("tiled_tf32", "tiled", "tf32", kSm80, 80, "tiled_16bit_mma",
                                  "16bit", kHalf),
     mma_limits, half_workspace, nullptr, nullptr, mma_launch},
    {kVariantTiled3xTf32, float32_only("tiled_3xtf32", "tiled", "3xtf32", kSm80, 80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledTf32Wide, float32_only("tiled_tf32_16w", "tiled", "tf32", kSm80, 80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantFlat, with_16bit("tiled_tf32_flat", "flat", "tf32", kSm80, 80, "tiled_16bit_flat",
                              "tf32", kSm80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantWgmma, with_16bit("tiled_tf32_wgmma", "wgmma", "tf32", kWgmma, 90,
                               "tiled_16bit_wgmma", "16bit", kWgmma),
     wgmma_limits, wgmma_workspace, wgmma_packed, any_strides, wgmma_launch},
    {kVariantSmall, with_16bit("small_fp32", "small", "fp32", kSmall, 80, "small_16bit", "fp32",
                               kSmall),
     small_limits, nullptr, nullptr, nullptr, small_launch},
    {kVariantSmallTf32, float32_only("small_tf32", "small", "tf32", kSmall, 80),
     small_limits, nullptr, nullptr, nullptr, small_launch},
    {kVariantTiled3xTf32Flat, float32_only("tiled_3xtf32_flat", "flat", "3xtf32", kSm80, 80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiled3xTf32Wgmma, float32_only("tiled_3xtf32_wgmma", "wgmma", "3xtf32", kWgmma, 90),
     wgmma_limits, wgmma_workspace, nullptr, any_strides, wgmma_launch},
    {kVariantStem, with_16bit("stem_tf32", "stem", "tf32", kStem, 80, "stem_16bit", "16bit",
                              kStem),
     stem_limits, nullptr, nullptr, stem_strided_out, stem_launch},
    {kVariantFlatWgmma, with_16bit("tiled_tf32_flat_wgmma", "flat_wgmma", "tf32", kSm80, 90,
                                   "tiled_16bit_flat_wgmma", "16bit", kSm80),
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantGeneralWgmma, with_16bit("general_wgmma", "general", "tf32", kGeneral, 90,
                                      "general_wgmma", "16bit", kGeneral),
     general_limits, general_workspace, nullptr, any_strides, general_launch},
    {kVariantGeneral3xTf32Wgmma,
     float32_only("general_3xtf32_wgmma", "general", "3xtf32", kGeneral, 90),
     general_limits, general_workspace, nullptr, any_strides, general_launch},
};

constexpr bool rows_are_ids() {
  for (int v = 0; v < int(sizeof(kVariants) / sizeof(kVariants[0])); ++v)
    if (kVariants[v].id != v) return false;
  return true;
}
static_assert(sizeof(kVariants) / sizeof(kVariants[0]) == kVariantCount,
              "one registry row per variant id");
static_assert(rows_are_ids(), "registry row i is variant i");
constexpr bool every_row_takes_float32() {
  for (const Variant& v : kVariants)
    if ((v.info.elements & kFloat32) == 0 || v.info.name == nullptr) return false;
  return true;
}
static_assert(every_row_takes_float32(), "every variant has a float32 member (its id's name)");

const Variant* find(int variant) {
  return variant >= 0 && variant < kVariantCount ? &kVariants[variant] : nullptr;
}

bool runs_element(const Variant& v, int element) {
  return element >= 0 && element < 3 && (v.info.elements >> element) & 1u;
}

}  // namespace

extern "C" bool conv_relu_maxpool_variant_info(int variant, ConvPoolVariantInfo* info) {
  const Variant* v = find(variant);
  if (v == nullptr) return false;
  *info = v->info;
  return true;
}

extern "C" const char* conv_relu_maxpool_variant_name(int variant, int element) {
  const Variant* v = find(variant);
  if (v == nullptr) return nullptr;
  const bool member_16bit = (element == kElementFloat16 || element == kElementBFloat16) &&
                            v->info.name_16bit != nullptr;
  return member_16bit ? v->info.name_16bit : v->info.name;
}

extern "C" const char* conv_relu_maxpool_unsupported(const ConvPoolShape* s, int variant,
                                                      const ConvPoolDevice* device) {
  const Variant* v = find(variant);
  if (v == nullptr) return "unknown variant";
  if (!runs_element(*v, s->element))
    return "needs float32 input";  // every variant has a float32 member
  return v->unsupported ? v->unsupported(*s, variant, *device) : nullptr;
}

extern "C" int64_t conv_relu_maxpool_workspace_bytes(const ConvPoolShape* s, int variant,
                                                     const ConvPoolDevice* device,
                                                     const ConvPoolOperands* ops) {
  const Variant* v = find(variant);
  if (v == nullptr || v->workspace == nullptr || !runs_element(*v, s->element)) return 0;
  return v->workspace(*s, variant, *device, ops);
}

extern "C" bool conv_relu_maxpool_takes_packed_weight(const ConvPoolShape* s, int variant) {
  const Variant* v = find(variant);
  return v != nullptr && v->takes_packed != nullptr && runs_element(*v, s->element) &&
         v->takes_packed(*s);
}

extern "C" bool conv_relu_maxpool_writes_strided_output(const ConvPoolShape* s, int variant) {
  const Variant* v = find(variant);
  return v != nullptr && v->strided_out != nullptr && runs_element(*v, s->element) &&
         v->strided_out(*s);
}

extern "C" cudaError_t conv_relu_maxpool_launch(const ConvPoolOperands* ops,
                                                const ConvPoolShape* s, int variant,
                                                const ConvPoolDevice* device,
                                                cudaStream_t stream, const int64_t* out_stride) {
  const Variant* v = find(variant);
  if (v == nullptr || !runs_element(*v, s->element)) return cudaErrorInvalidValue;
  if (out_stride != nullptr && (v->strided_out == nullptr || !v->strided_out(*s)))
    return cudaErrorInvalidValue;
  return v->launch(*ops, *s, variant, *device, stream, out_stride);
}
