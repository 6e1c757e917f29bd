// The variant registry: one row per kernel variant (the `config` ids of conv_relu_maxpool.h),
// with what the launcher, the choice, the binding and the tests ask of it: its name, algorithm
// family, math, element types and architecture, why it cannot run a shape, its workspace,
// whether it reads weights packed ahead of time, and its launch. The C functions of
// conv_relu_maxpool.h that answer per variant read this table and nothing else.
#include <cuda_runtime.h>

#include <cstdint>

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
  ConvPoolVariantInfo info;    // name, family, math, source, elements, arch
  Unsupported unsupported;     // beyond the element type; nullptr: every shape
  Workspace workspace;         // nullptr: none
  TakesPacked takes_packed;    // nullptr: never
  StridedOut strided_out;      // writes a channels-last output itself; nullptr: NCHW only
  Launch launch;
};

// Per family: the checks and launches of conv_relu_maxpool_*.cu and kernels/hopper/, in the
// registry's signatures.
const char* no_limit(const ConvPoolShape&, int, const ConvPoolDevice&) { return nullptr; }
const char* tiled_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return tiled_conv_pool_unsupported(s, v, d);
}
const char* half_limits(const ConvPoolShape& s, int v, const ConvPoolDevice& d) {
  return half_conv_pool_unsupported(s, v, d);
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
  return half_conv_pool_workspace_bytes(s, v);
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

cudaError_t direct_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int,
                          const ConvPoolDevice&, cudaStream_t stream, const int64_t*) {
  return direct_conv_pool_launch(ops, s, stream);
}
cudaError_t tiled_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                         const ConvPoolDevice& d, cudaStream_t stream, const int64_t*) {
  return tiled_conv_pool_launch(ops, s, v, d, stream);
}
cudaError_t half_launch(const ConvPoolOperands& ops, const ConvPoolShape& s, int v,
                        const ConvPoolDevice&, cudaStream_t stream, const int64_t*) {
  return half_conv_pool_launch(ops, s, v, stream);
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
                        const ConvPoolDevice& d, cudaStream_t stream, const int64_t*) {
  return stem_conv_pool_launch(ops, s, d, stream);
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

// The registry. Row i is variant id i (checked below). arch: the lowest compute capability the
// kernel is built for (90: sm_90a's wgmma); the variant's own check refuses older devices.
constexpr Variant kVariants[] = {
    {kVariantDirect, {"direct", "direct", "fp32", kSm80, kFloat32, 0},
     no_limit, nullptr, nullptr, nullptr, direct_launch},
    {kVariantTiledFp32, {"tiled_fp32", "tiled", "fp32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledTf32, {"tiled_tf32", "tiled", "tf32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiled3xTf32, {"tiled_3xtf32", "tiled", "3xtf32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledTf32Wide, {"tiled_tf32_16w", "tiled", "tf32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledTf32Flat, {"tiled_tf32_flat", "flat", "tf32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiledTf32Wgmma, {"tiled_tf32_wgmma", "wgmma", "tf32", kWgmma, kFloat32, 90},
     wgmma_limits, wgmma_workspace, wgmma_packed, any_strides, wgmma_launch},
    {kVariantSmallFp32, {"small_fp32", "small", "fp32", kSmall, kFloat32, 80},
     small_limits, nullptr, nullptr, nullptr, small_launch},
    {kVariantDirect16, {"direct_16bit", "direct", "fp32", kHalf, kSixteenBit, 0},
     half_limits, nullptr, nullptr, nullptr, half_launch},
    {kVariantTiled16Mma, {"tiled_16bit_mma", "tiled", "16bit", kHalf, kSixteenBit, 80},
     half_limits, half_workspace, nullptr, nullptr, half_launch},
    {kVariantTiled16Wgmma, {"tiled_16bit_wgmma", "wgmma", "16bit", kWgmma, kSixteenBit, 90},
     wgmma_limits, wgmma_workspace, wgmma_packed, any_strides, wgmma_launch},
    {kVariantSmall16, {"small_16bit", "small", "fp32", kSmall, kSixteenBit, 80},
     small_limits, nullptr, nullptr, nullptr, small_launch},
    {kVariantTiled16Flat, {"tiled_16bit_flat", "flat", "tf32", kSm80, kSixteenBit, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantSmallTf32, {"small_tf32", "small", "tf32", kSmall, kFloat32, 80},
     small_limits, nullptr, nullptr, nullptr, small_launch},
    {kVariantTiled3xTf32Flat, {"tiled_3xtf32_flat", "flat", "3xtf32", kSm80, kFloat32, 80},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiled3xTf32Wgmma, {"tiled_3xtf32_wgmma", "wgmma", "3xtf32", kWgmma, kFloat32, 90},
     wgmma_limits, wgmma_workspace, nullptr, any_strides, wgmma_launch},
    {kVariantStemTf32, {"stem_tf32", "stem", "tf32", kStem, kFloat32, 80},
     stem_limits, nullptr, nullptr, nullptr, stem_launch},
    {kVariantStem16, {"stem_16bit", "stem", "16bit", kStem, kSixteenBit, 80},
     stem_limits, nullptr, nullptr, nullptr, stem_launch},
    {kVariantTiledTf32FlatWgmma,
     {"tiled_tf32_flat_wgmma", "flat_wgmma", "tf32", kSm80, kFloat32, 90},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantTiled16FlatWgmma,
     {"tiled_16bit_flat_wgmma", "flat_wgmma", "16bit", kSm80, kSixteenBit, 90},
     tiled_limits, nullptr, nullptr, nullptr, tiled_launch},
    {kVariantGeneralWgmma, {"general_wgmma", "general", "tf32/16bit", kGeneral, kAnyElement, 90},
     general_limits, general_workspace, nullptr, any_strides, general_launch},
    {kVariantGeneral3xTf32Wgmma,
     {"general_3xtf32_wgmma", "general", "3xtf32", kGeneral, kFloat32, 90},
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

extern "C" const char* conv_relu_maxpool_variant_name(int variant) {
  const Variant* v = find(variant);
  return v ? v->info.name : nullptr;
}

extern "C" const char* conv_relu_maxpool_unsupported(const ConvPoolShape* s, int variant,
                                                      const ConvPoolDevice* device) {
  const Variant* v = find(variant);
  if (v == nullptr) return "unknown variant";
  if (!runs_element(*v, s->element))
    return v->info.elements == kFloat32 ? "needs float32 input"
                                        : "needs float16 or bfloat16 input";
  return v->unsupported(*s, variant, *device);
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
