// Host side of the general Hopper kernel in its two forms, the warp-specialized one fed by the
// tensor copy engine (general_ws_kernel.cuh, kTmaInput: the default where the engine's limits
// allow) and the one whose warps copy with cp.async (general_kernel.cuh: 3xTF32, strides above
// 8, float32 NCHW layers of little work): on the plan the search finds (general_search.cu:
// form, tile, staging, shared memory, split), how x and the weights are read, the workspace,
// the shape limits, and the launch with its preparation: the weights packed, a copy of x
// where the kernel cannot read it in place (conv_pool_layout.h), the tensor maps.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../conv_pool_device.cuh"
#include "../conv_pool_heuristics.h"
#include "../conv_pool_layout.h"
#include "../conv_pool_layout.cuh"
#include "../conv_pool_operands.h"
#include "../conv_relu_maxpool_wgmma.h"
#include "general_hooks.h"
#include "general_prepare.cuh"
#include "general_search.h"
#include "general_subsample.h"
#include "general_trace.cuh"
#include "general_transpose.h"
#include "general_wgmma.h"
#include "general_windows.cuh"

namespace general_wgmma {
namespace {

using namespace conv_pool_heuristics;
using namespace hooks;

// Whether x's channels are contiguous and every stride and its address whole 16-byte slices
// (channels-last); ops == nullptr stands for NCHW.
bool pixel_slices(const ConvPoolShape& s, const ConvPoolOperands* ops) {
  const int per_slice = slice_channels(s.element);
  return ops != nullptr && ops->x_stride[1] == 1 && s.in_channels % per_slice == 0 &&
         ops->x_stride[0] % per_slice == 0 && ops->x_stride[2] % per_slice == 0 &&
         ops->x_stride[3] % per_slice == 0 && aligned16(input_data(s, *ops));
}

// Whether the copy engine reads x in place (channels-last slices, every stride positive: not an
// expanded x) rather than from the launch's slice-planar copy ($CONV_POOL_GENERAL_TMA_COPY=1
// copies always: a tuning and test hook); ops == nullptr stands for NCHW.
bool x_in_place(const ConvPoolShape& s, const ConvPoolOperands* ops) {
  return pixel_slices(s, ops) && ops->x_stride[0] > 0 && ops->x_stride[2] > 0 &&
         ops->x_stride[3] > 0 && !tma_copy_forced();
}

// Whether the warp-specialized kernel may take `s` read from `ops`: not the 3xTF32 form, not
// with the hook that keeps the cp.async loaders, and not a large float32 x without contiguous
// channels (NCHW) whose elements feed few multiply-adds (kTmaCopyMinWork): those the cp.async
// loaders read in place, element by element, where the copy engine needs a copy of x first.
bool tma_for(const ConvPoolShape& s, const ConvPoolOperands* ops, bool split) {
  if (split || !tma_allowed()) return false;
  const int64_t x_elements = int64_t(s.batch) * s.in_channels * s.in_height * s.in_width;
  return s.element != kElementFloat32 || pixel_slices(s, ops) ||
         int64_t(s.out_channels) * s.taps() >= kTmaCopyMinWork ||
         x_elements <= kTmaCopyMaxSmallInput || tma_copy_forced();
}

// The weight's elements from one tap to the next (along the kernel's columns, or its rows
// where it has one column).
int64_t weight_tap_stride(const ConvPoolShape& s, const int64_t* stride) {
  return s.kernel_w > 1 ? stride[3] : stride[2];
}

// Whether the producer can bring each step's weights straight from the weight tensor
// (Plan::weights_in_place): blocks of at most kInPlaceWeightsMaxRounds rounds on the device, at
// least kInPlaceWeightsMinElements weights (or any number where the packing would be the
// preparation launch's only work: x read in place or copied by the blocks themselves, no split
// counters to zero), channels contiguous in whole 16-byte slices, every stride positive and a
// multiple of 16 bytes, the address 16-byte aligned, and the kernel's taps one run of equal
// strides (1 x 1, or channels-last weights); ops == nullptr stands for a contiguous (NCHW)
// weight. The box (a step's channel slices of n output channels over a group's taps) must fit
// the copy engine's 256 elements a dimension.
bool weights_in_place(const ConvPoolShape& s, const ConvPoolOperands* ops, const Plan& p,
                      const ConvPoolDevice& device) {
  if (p.input != kTmaInput || p.split_operands || weights_packed_forced()) return false;
  const bool launch_free = hooks::launch_free_allowed() && (!p.staged_copy || p.self_copy) &&
                           (p.split == 1 || p.cluster_split);
  if (p.tiles * p.split >
          int64_t(kInPlaceWeightsMaxRounds) * device.sm_count * p.blocks_per_sm ||
      (!launch_free &&
       int64_t(s.out_channels) * s.in_channels * s.taps() < kInPlaceWeightsMinElements))
    return false;
  const int per_slice = slice_channels(s.element);
  const int box_taps = p.group_rows * s.kernel_w;
  if (s.in_channels % per_slice != 0 || 2 * p.step_chunks > kMaxTmaBox || box_taps > kMaxTmaBox)
    return false;
  int64_t stride[4] = {int64_t(s.in_channels) * s.taps(), 1, int64_t(s.kernel_w), 1};
  if (ops != nullptr) {
    for (int d = 0; d < 4; ++d) stride[d] = ops->weight_stride[d];
    if (!aligned16(weight_data(s, *ops))) return false;
  }
  if (stride[1] != 1 || stride[0] <= 0 || stride[0] % per_slice != 0) return false;
  if (s.taps() == 1) return true;
  // Tap (r, q) r x kernel_w + q tap strides on: rows kernel_w tap strides apart.
  const int64_t tap = weight_tap_stride(s, stride);
  return tap > 0 && tap % per_slice == 0 &&
         (s.kernel_h == 1 || stride[2] == int64_t(s.kernel_w) * tap);
}

// Column phases of the slice-planar copy (conv_pool_layout.h): the column stride where the
// producer's boxes read merged rows (a phase's columns one run), else 1; and the slots of one
// of its rows.
int copy_phases(const ConvPoolShape& s, const Plan& p) { return p.merged_cols ? s.stride_w : 1; }
// The phases of the copy some box reads (bit r: columns r mod stride_w): a tile's boxes start at
// column conv_col0 x stride_w - pad_w, so its offset r (Plan::phase_mask) is the phase of
// column r - pad_w.
uint32_t copy_phase_mask(const ConvPoolShape& s, const Plan& p) {
  const int phases = copy_phases(s, p);
  if (phases == 1) return 1u;
  uint32_t mask = 0;
  for (int r = 0; r < phases; ++r)
    if ((p.phase_mask >> r) & 1u) mask |= 1u << phase_run(r - s.pad_w, phases).phase;
  return mask;
}
int64_t staged_row_slots(const ConvPoolShape& s, const Plan& p) {
  return int64_t(conv_pool_phase_width(s.in_width, copy_phases(s, p))) * copy_phases(s, p);
}

// Plan::self_copy (a candidate: it holds only where the weights are read in place too): the
// launch's slice-planar copy of x written by the blocks themselves, each its own boxes' part,
// where the preparation launch would have nothing else to do (no split counters) and each
// part is small (kSelfCopyMaxBytes): 1 x 1 layers at stride 1 (one column and row phase;
// strided ones once subsampled), one round of blocks, one tile a block.
bool self_copy_applies(const ConvPoolShape& s, const ConvPoolDevice& device, const Plan& p) {
  const int mode = hooks::self_copy_mode();
  if (mode == 0 || p.input != kTmaInput || !p.staged_copy || p.split_operands || p.persistent)
    return false;
  if (s.taps() != 1 || s.stride_h != 1 || s.stride_w != 1) return false;
  if ((p.split > 1 && !p.cluster_split) ||
      p.tiles * p.split > int64_t(device.sm_count) * p.blocks_per_sm)
    return false;
  const int64_t share = p.split > 1 ? p.split_steps : p.steps;
  const int64_t slices = std::min<int64_t>(2 * share * p.step_chunks,
                                           p.staged_channels / slice_channels(s.element));
  const int64_t bytes = int64_t(p.images) * slices * kSliceBytes *
                        std::min(p.box_rows, s.in_height) * std::min(p.phase_cols, s.in_width);
  return mode == 2 || bytes <= kSelfCopyMaxBytes;
}

// How the kernel reads x. kTmaInput: in place (x_in_place) or from the launch's slice-planar
// copy, its box rows merged where they fit (merged_rows). The cp.async loaders: by 16-byte
// pixel slices where the channels are contiguous and 16-byte aligned (channels-last), read in
// place. Other 16-bit inputs are copied to NHWC first; other float32 inputs too where each
// input element feeds enough work (kNhwcCopyMinWork), else they are read element by element
// (4-byte copies, the transpose on the way in).
void choose_input(const ConvPoolShape& s, const ConvPoolOperands* ops,
                  const ConvPoolDevice& device, Plan& p) {
  const int per_slice = slice_channels(s.element);
  const bool slices = pixel_slices(s, ops);
  if (p.input == kTmaInput) {
    p.staged_copy = !x_in_place(s, ops);
    if (p.staged_copy) p.x_swizzle = 0;  // (the plan's search reads x_in_place the same way)
    p.merged_cols = merged_rows(p, p.staged_copy);
    p.staged_channels = round_up(s.in_channels, per_slice);
    p.staged_input_bytes = p.staged_copy ? int64_t(s.batch) * s.in_height *
                                               staged_row_slots(s, p) * p.staged_channels *
                                               element_bytes(s)
                                         : 0;
    p.self_copy = self_copy_applies(s, device, p);
    p.weights_in_place = weights_in_place(s, ops, p, device);
    p.self_copy = p.self_copy && p.weights_in_place;  // else the launch runs, and copies x
    if (p.weights_in_place) p.packed_bytes = 0;
    const int n = kTileSpecs[p.tile].n;
    p.tail_n = narrow_tail_allowed() ? tail_width(s.out_channels - (p.channel_blocks - 1) * n, n)
                                     : 0;
    if (p.tail_n > 0 && !p.weights_in_place)  // (packed_rows: the last block's slices narrower)
      p.packed_bytes -= p.packed_bytes / p.channel_blocks / n * (n - p.tail_n);
    return;
  }
  p.tail_n = 0;
  // The staged 3xTF32 form reads its split NHWC copy; its registers form reads x as TF32 does.
  const bool split_copy = p.split_operands && !p.split_registers;
  p.staged_copy = !slices || split_copy;
  if (s.element == kElementFloat32 && !slices && !split_copy) {
    const int forced = forced_nhwc();
    p.staged_copy = forced >= 0 ? forced == 1
                                : int64_t(s.out_channels) * s.taps() >= kNhwcCopyMinWork;
  }
  p.input = slices || p.staged_copy ? kPixelInput : kPlanarInput;
  p.staged_input_bytes = p.staged_copy ? int64_t(s.batch) * s.in_height * s.in_width *
                                             p.staged_channels * element_bytes(s)
                                       : 0;
}

int64_t region_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The driver's tensor-map encoder, through the runtime (no driver library linked), or nullptr.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// kTmaInput: the 5-D view of x the producer's boxes come from, innermost first: (channel in a
// slice, column, row, slice, image), on the slice-planar copy or on x itself (channels-last: a
// slice 16 bytes on from the previous). A box: a step's 2 x step_chunks slices of phase_cols
// columns read every stride_w-th and halo_rows rows (read every stride_h-th for gathered
// rows), landing [slice][row][column][16 bytes]. A swizzled stage (p.x_swizzle = W): W-byte
// groups of channels for slices, landing [group][row][column][W bytes] swizzled. Merged
// columns (p.merged_cols): (column of a phase x 8-byte word of its slice, column phase, row,
// slice, image) on the copy, whose rows hold stride_w phases of ceil(width / stride_w)
// columns each, a box row one run of phase_cols slices of one phase. Raw words: no
// conversion; out of bounds: zeros.
cudaError_t encode_x_map(const ConvPoolShape& s, const ConvPoolOperands& ops, const Plan& p,
                         CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int bytes = element_bytes(s);
  const cuuint64_t width = cuuint64_t(s.in_width), height = cuuint64_t(s.in_height);
  cuuint64_t dims[5], strides[4];
  const void* address;
  dims[1] = width;
  if (p.staged_copy) {
    const cuuint64_t slices = cuuint64_t(p.staged_channels / slice_channels(s.element));
    const cuuint64_t row = cuuint64_t(staged_row_slots(s, p));  // slots of a row
    const cuuint64_t phase_slots = row / cuuint64_t(copy_phases(s, p));
    address = p.staged_input;
    dims[0] = p.merged_cols ? cuuint64_t(kMergedColWords) * phase_slots
                            : cuuint64_t(slice_channels(s.element));
    if (p.merged_cols) dims[1] = cuuint64_t(copy_phases(s, p));
    dims[3] = slices;
    strides[0] = p.merged_cols ? kSliceBytes * phase_slots : kSliceBytes;
    strides[1] = kSliceBytes * row;
    strides[2] = kSliceBytes * row * height;
    strides[3] = kSliceBytes * row * height * slices;
  } else {  // (choose_input: in_channels a multiple of the slice's, or of x_swizzle bytes)
    const int group = pixel_slots(p) * kSliceBytes;  // bytes of a box row
    address = input_data(s, ops);
    dims[0] = cuuint64_t(group / bytes);
    dims[3] = cuuint64_t(s.in_channels * bytes / group);
    strides[0] = cuuint64_t(ops.x_stride[3] * bytes);
    strides[1] = cuuint64_t(ops.x_stride[2] * bytes);
    strides[2] = cuuint64_t(group);
    strides[3] = cuuint64_t(ops.x_stride[0] * bytes);
  }
  dims[2] = height;
  dims[4] = cuuint64_t(s.batch);
  const cuuint32_t box[5] = {
      cuuint32_t(p.merged_cols ? kMergedColWords * p.phase_cols
                               : pixel_slots(p) * slice_channels(s.element)),
      cuuint32_t(p.merged_cols ? 1 : p.phase_cols * s.stride_w), cuuint32_t(p.box_rows),
      cuuint32_t(2 * p.step_chunks / pixel_slots(p)), 1};
  const cuuint32_t element_strides[5] = {1, cuuint32_t(p.merged_cols ? 1 : s.stride_w),
                                         cuuint32_t(p.gathered_rows ? s.stride_h : 1), 1, 1};
  const CUresult result =
      encode(map,
             p.merged_cols ? CU_TENSOR_MAP_DATA_TYPE_UINT64
             : bytes == 4  ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                           : CU_TENSOR_MAP_DATA_TYPE_UINT16,
             5, const_cast<void*>(address), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE,
             p.x_swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
             : p.x_swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
             : p.x_swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                 : CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Plan::weights_in_place: the 5-D view of the weight the producer's weight boxes come from,
// innermost first: (channel in a slice, output channel, slice, tap, -). A box, a step's weights:
// its 2 x step_chunks slices of n output channels over group_rows x kernel_w taps, landing as
// [tap][slice][n][16 bytes] (the packed layout's step); out of bounds (channels past the
// weight's, a short last run's chunks, a short last group's taps): zeros.
cudaError_t encode_weight_map(const ConvPoolShape& s, const ConvPoolOperands& ops, const Plan& p,
                              CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int bytes = element_bytes(s);
  const int per_slice = slice_channels(s.element);
  const int64_t tap_stride = s.taps() == 1 ? per_slice : weight_tap_stride(s, ops.weight_stride);
  const cuuint64_t dims[5] = {cuuint64_t(per_slice), cuuint64_t(s.out_channels),
                              cuuint64_t(s.in_channels / per_slice), cuuint64_t(s.taps()), 1};
  const cuuint64_t strides[4] = {cuuint64_t(ops.weight_stride[0] * bytes), kSliceBytes,
                                 cuuint64_t(tap_stride * bytes), kSliceBytes};
  const cuuint32_t box[5] = {cuuint32_t(per_slice), cuuint32_t(kTileSpecs[p.tile].n),
                             cuuint32_t(2 * p.step_chunks),
                             cuuint32_t(p.group_rows * s.kernel_w), 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult result =
      encode(map, bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16,
             5, const_cast<void*>(weight_data(s, ops)), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The preparation launch (prepare_kernel): the split counters zeroed (a memset instead where
// `separate`), the weights packed, and with copy_x the slice-planar copy of x (`windows`: of
// the windowed layer's x' from the layer's x, or nullptr).
template <class Raw, int kSliceChannels>
cudaError_t prepare(const Raw* weight, const ConvPoolOperands& ops, const ConvPoolShape& s,
                    const Plan& p, bool copy_x, const WindowedLayer* windows, bool separate,
                    cudaStream_t stream) {
  // (PackJob: the reads' order and width; $CONV_POOL_GENERAL_COALESCED_PACK=0 turns both off.)
  const int64_t* ws = ops.weight_stride;
  const bool coalesced = hooks::coalesced_pack_enabled();
  // A channel's taps one contiguous run: OIHW, or OIHW seen transposed (general_transpose.h).
  const bool taps_first =
      coalesced && s.taps() > 1 &&
      ((ws[3] == 1 && ws[2] == s.kernel_w) || (ws[2] == 1 && ws[3] == s.kernel_h));
  const bool vector_loads =
      coalesced && ws[1] == 1 && s.in_channels % kSliceChannels == 0 &&
      aligned16(weight) &&
      (s.out_channels == 1 || ws[0] % kSliceChannels == 0) &&
      (s.kernel_h == 1 || ws[2] % kSliceChannels == 0) &&
      (s.kernel_w == 1 || ws[3] % kSliceChannels == 0);
  const PackJob<Raw> pack{weight,
                          ws[0],
                          ws[1],
                          ws[2],
                          ws[3],
                          kTileSpecs[p.tile].n,
                          static_cast<Raw*>(const_cast<void*>(p.packed)),
                          p.packed_bytes / kSliceBytes,
                          taps_first,
                          vector_loads};
  const int64_t units = pack.units;
  // At least one block: the packing blocks also zero the counters.
  const int64_t pack_blocks = std::clamp<int64_t>(ceil_div(units, 256), 1, 4 * 1024);
  uint32_t* counters = static_cast<uint32_t*>(const_cast<void*>(p.counters));
  int counter_words = p.split > 1 && !p.cluster_split ? int(p.tiles) : 0;
  if (separate && counter_words > 0) {
    if (cudaError_t error = cudaMemsetAsync(counters, 0, size_t(4) * counter_words, stream);
        error != cudaSuccess)
      return error;
    counter_words = 0;
  }
  ToSlices<Raw> copy{};
  WindowSource source{};  // (cols 0: the plain copy)
  int64_t copy_blocks = 0;
  if (copy_x) {
    if (windows != nullptr) source = windows->source;
    copy = to_slices_job<Raw>(input_data(s, ops),
                              windows != nullptr ? windows->x_stride : ops.x_stride, s.batch,
                              s.in_channels,
                              s.in_height, s.in_width, copy_phases(s, p), copy_phase_mask(s, p),
                              conv_pool_copy_rows(s), p.staged_channels / kSliceChannels,
                              const_cast<void*>(p.staged_input));
    static_assert(ToSlices<Raw>::kBlockThreads == 256, "the copy's blocks are the launch's");
    copy_blocks = ceil_div(copy.items(), 256);
  }
  if (units == 0 && counter_words == 0 && copy_blocks == 0) return cudaSuccess;  // nothing to do
  const unsigned blocks = unsigned(pack_blocks + copy_blocks);
  if (source.cols > 0)
    prepare_kernel<Raw, kSliceChannels, true><<<blocks, 256, 0, stream>>>(
        pack, s, p, pack_blocks, copy, source, counters, counter_words);
  else
    prepare_kernel<Raw, kSliceChannels, false><<<blocks, 256, 0, stream>>>(
        pack, s, p, pack_blocks, copy, source, counters, counter_words);
  return cudaGetLastError();
}

}  // namespace
}  // namespace general_wgmma

using general_wgmma::Plan;

const char* general_wgmma_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device,
                                      bool split) {
  if (const char* why = wgmma_unavailable(device)) return why;
  if (split && s.element != kElementFloat32) return "3xTF32 takes float32 operands";
  if (general_wgmma::windows_chosen(s, device, nullptr, split))  // (general_windows.cu)
    return general_wgmma_unsupported(general_wgmma::windowed_shape(s), device, split);
  if (general_wgmma::subsample_applies(s, split))  // the layer over x' (general_subsample.h)
    return general_wgmma_unsupported(general_wgmma::subsampled_shape(s), device, split);
  if (s.kernel_w > general_wgmma::kMaxKernelCols) return "the kernel is wider than 64 columns";
  if (s.stride_w > general_wgmma::kMaxStrideW) return "the column stride is above 32";
  // (Whether a plan exists does not depend on the cost: one pass, without the copy term.)
  return general_wgmma::cheapest_plan(s, device, split,
                                      general_wgmma::tma_for(s, nullptr, split), false, false)
      .why_not;
}

Plan general_wgmma_plan(const ConvPoolShape& s, const ConvPoolDevice& device,
                        const ConvPoolOperands* ops, bool split) {
  if (general_wgmma::transpose_chosen(s, device, ops, split)) {  // (general_transpose.h)
    const ConvPoolOperands view = general_wgmma::transposed_operands(*ops);
    return general_wgmma::layer_plan(general_wgmma::transposed_shape(s), device, &view, split);
  }
  return general_wgmma::layer_plan(s, device, ops, split);
}

int64_t general_wgmma_workspace_bytes(const ConvPoolShape& s, const ConvPoolDevice& device,
                                      const ConvPoolOperands* ops, bool split) {
  if (general_wgmma::transpose_chosen(s, device, ops, split)) {
    const ConvPoolOperands view = general_wgmma::transposed_operands(*ops);
    return general_wgmma::layer_workspace_bytes(general_wgmma::transposed_shape(s), device,
                                                &view, split);
  }
  return general_wgmma::layer_workspace_bytes(s, device, ops, split);
}

cudaError_t general_wgmma_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                 const ConvPoolDevice& device, cudaStream_t stream,
                                 const int64_t* out_stride, bool split) {
  if (general_wgmma::transpose_chosen(s, device, &ops, split)) {
    int64_t transposed[4];
    general_wgmma::output_strides(s, out_stride, transposed);
    std::swap(transposed[2], transposed[3]);
    return general_wgmma::layer_launch(general_wgmma::transposed_operands(ops),
                                       general_wgmma::transposed_shape(s), device, stream,
                                       transposed, split);
  }
  return general_wgmma::layer_launch(ops, s, device, stream, out_stride, split);
}

namespace general_wgmma {

namespace {

// The cheapest plan of `s` as layer_plan runs it (after its subsampling) by the cost with the
// copy term where that is allowed (the fuller estimate; best_plan drops the term on plans of
// few steps): its cost, or < 0 where no plan runs it or (copy_engine) where the copy engine
// would not read x (a stride or a box past its limits).
double plain_cost(const ConvPoolShape& s, const ConvPoolDevice& device,
                  const ConvPoolOperands* ops, bool split, bool copy_engine) {
  ConvPoolOperands view;
  const bool subsampled = subsample_applies(s, split);
  const ConvPoolShape f = subsampled ? subsampled_shape(s) : s;
  const ConvPoolOperands* o = subsampled ? subsampled_operands(ops, s, view) : ops;
  const Candidate c = cheapest_plan(f, device, split, tma_for(f, o, split), x_in_place(f, o),
                                    copy_cost_allowed());
  if (c.why_not != nullptr || (copy_engine && c.plan.input != kTmaInput)) return -1.0;
  return c.cost;
}

}  // namespace

bool transpose_chosen(const ConvPoolShape& s, const ConvPoolDevice& device,
                      const ConvPoolOperands* ops, bool split) {
  const int mode = transpose_mode();
  if (mode == 0 || split || ops == nullptr) return false;
  // x read in place, or by the copy engine from the preparation launch's slice-planar copy
  // (by bands of the view's columns: ToSlices::columns_first); not by the cp.async loaders,
  // whose reads of an NCHW view would lie a row apart.
  const bool copied = !x_in_place(s, ops);
  if (copied && (!tma_for(s, ops, split) || separate_preparation())) return false;
  // (The cost compares the kernels' plans alone; the copy of a transposed view, by bands of
  // columns, is not in it: docs/PERF.md has its time against the plain copy's.)
  const ConvPoolShape t = transposed_shape(s);
  const ConvPoolOperands view = transposed_operands(*ops);
  if (fold_applies(s, split) || fold_applies(t, split) || windows_chosen(s, device, ops, split) ||
      windows_chosen(t, device, &view, split) ||
      general_wgmma_unsupported(t, device, split) != nullptr)
    return false;
  const double other = plain_cost(t, device, &view, split, copied);
  if (other < 0.0) return false;
  if (mode == 2) return true;
  const double own = plain_cost(s, device, ops, split, false);
  return own >= 0.0 && other < kTransposeGain * own;
}

Plan layer_plan(const ConvPoolShape& s, const ConvPoolDevice& device,
                const ConvPoolOperands* ops, bool split) {
  if (fold_applies(s, split)) {  // the folded layer's plan (general_fold.cu)
    const ConvPoolShape f = folded_shape(s);
    const ConvPoolOperands folded = folded_operands(f, nullptr, nullptr);
    return layer_plan(f, device, &folded, split);
  }
  if (windows_chosen(s, device, ops, split)) {  // the windowed layer's plan
    const ConvPoolOperands windowed = windowed_operands(s, device, ops, split, nullptr);
    return layer_plan(windowed_shape(s), device, &windowed, split);
  }
  if (subsample_applies(s, split)) {  // the layer over x' (general_subsample.h)
    ConvPoolOperands view;
    return layer_plan(subsampled_shape(s), device, subsampled_operands(ops, s, view), split);
  }
  return shape_plan(s, device, ops, split);
}

}  // namespace general_wgmma

Plan general_wgmma::shape_plan(const ConvPoolShape& s, const ConvPoolDevice& device,
                               const ConvPoolOperands* ops, bool split) {
  Plan p = best_plan(s, device, split, tma_for(s, ops, split), x_in_place(s, ops)).plan;
  choose_input(s, ops, device, p);
  return p;
}

int64_t general_wgmma::layer_workspace_bytes(const ConvPoolShape& s,
                                              const ConvPoolDevice& device,
                                              const ConvPoolOperands* ops, bool split) {
  if (fold_applies(s, split)) {  // the folded layer's, then x' and w'
    const ConvPoolShape f = folded_shape(s);
    const ConvPoolOperands folded = folded_operands(f, nullptr, nullptr);
    return region_bytes(layer_workspace_bytes(f, device, &folded, split)) + fold_bytes(f);
  }
  if (windows_chosen(s, device, ops, split)) {  // the windowed layer's, x'
    const ConvPoolOperands windowed = windowed_operands(s, device, ops, split, nullptr);
    const int64_t inner = layer_workspace_bytes(windowed_shape(s), device, &windowed, split);
    return region_bytes(inner) + windows_bytes(s, device, ops, split);
  }
  if (subsample_applies(s, split)) {  // the layer over x': its copy is smaller
    ConvPoolOperands view;
    return layer_workspace_bytes(subsampled_shape(s), device, subsampled_operands(ops, s, view),
                                 split);
  }
  const Plan p = layer_plan(s, device, ops, split);
  return region_bytes(p.packed_bytes) + region_bytes(p.staged_input_bytes) + p.partial_bytes;
}

cudaError_t general_wgmma::layer_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                        const ConvPoolDevice& device, cudaStream_t stream,
                                        const int64_t* out_stride, bool split) {
  if (fold_applies(s, split)) {  // x' and w' after the folded layer's workspace, then its launch
    const ConvPoolShape f = folded_shape(s);
    const ConvPoolOperands layout = folded_operands(f, nullptr, nullptr);
    const int64_t inner = region_bytes(layer_workspace_bytes(f, device, &layout, split));
    unsigned char* region = reinterpret_cast<unsigned char*>(ops.workspace) + inner;
    ConvPoolOperands folded;
    if (cudaError_t error = fold_inputs(ops, s, f, region, stream, &folded); error != cudaSuccess)
      return error;
    return layer_launch(folded, f, device, stream, out_stride, split);
  }
  if (windows_chosen(s, device, &ops, split))  // x' a window-major copy of x (general_windows.cu)
    return launch_windowed(ops, s, device, stream, out_stride, split);
  if (subsample_applies(s, split))  // x' is a view of x (general_subsample.h)
    return layer_launch(subsampled_operands(ops, s), subsampled_shape(s), device, stream,
                        out_stride, split);
  return launch_shape(ops, s, device, stream, out_stride, split, nullptr);
}

cudaError_t general_wgmma::launch_shape(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                        const ConvPoolDevice& device, cudaStream_t stream,
                                        const int64_t* out_stride, bool split,
                                        const WindowedLayer* windowed) {
  using namespace general_wgmma;
  Plan p = layer_plan(s, device, &ops, split);
  output_strides(s, out_stride, p.out_stride);
  p.pool_rect = pool_rect_enabled();
  p.pool_positions = pool_positions_enabled();
  if (windowed != nullptr) {  // (out_stride: the layer's)
    const ConvPoolShape& layer = windowed->source.layer;
    p.windows = int(int64_t(layer.batch) * layer.out_height * layer.out_width);
    p.window_rows = layer.out_height;
    p.window_cols = layer.out_width;
  }
  unsigned char* workspace = reinterpret_cast<unsigned char*>(ops.workspace);
  p.packed = workspace;
  p.staged_input = workspace + region_bytes(p.packed_bytes);
  unsigned char* partials = workspace + region_bytes(p.packed_bytes) +
                            region_bytes(p.staged_input_bytes);
  p.partials = partials;
  p.counters = partials + (p.partial_bytes - 4 * p.tiles);
  // The slice-planar copy of x rides in the preparation launch (with
  // $CONV_POOL_GENERAL_SEPARATE_PREP=1: conv_pool_to_slices' own launch), or the blocks write
  // it (Plan::self_copy), but not a windowed x' from x: the preparation's copy
  // (windows_fused asked for this plan).
  const WindowedLayer* copy_windows =
      windowed != nullptr && windowed->copy_x ? windowed : nullptr;
  if (copy_windows != nullptr) p.self_copy = false;
  const bool separate = separate_preparation();
  const bool copy_in_preparation =
      p.input == kTmaInput && p.staged_copy && !separate && !p.self_copy;
  if (copy_windows != nullptr && !copy_in_preparation) return cudaErrorInvalidValue;
  if (p.input == kTmaInput && p.staged_copy && copy_poisoned()) {
    if (cudaError_t error = cudaMemsetAsync(const_cast<void*>(p.staged_input), 0xff,
                                            size_t(p.staged_input_bytes), stream);
        error != cudaSuccess)
      return error;
  }
  cudaError_t prepared =
      s.element == kElementFloat32
          ? prepare<float, 4>(ops.weight, ops, s, p, copy_in_preparation, copy_windows,
                              separate, stream)
          : prepare<uint16_t, 8>(ops.weight16, ops, s, p, copy_in_preparation, copy_windows,
                                 separate, stream);
  if (prepared != cudaSuccess) return prepared;
  if (p.split_operands && !p.split_registers) {
    float* staged = static_cast<float*>(const_cast<void*>(p.staged_input));
    const int64_t pixels = int64_t(s.batch) * s.in_height * s.in_width;
    const dim3 blocks(unsigned(ceil_div(pixels, 32)),
                      unsigned(ceil_div(p.staged_channels / 3, 32)));
    split_to_channels_last_kernel<<<blocks, dim3(32, 8), 0, stream>>>(
        ops.x, ops.x_stride[0], ops.x_stride[1], ops.x_stride[2], ops.x_stride[3], s,
        p.staged_channels, staged);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
    return general_wgmma_launch_float32_3xtf32(ops, s, p, stream);
  }
  if (p.input == kTmaInput) {
    if (p.staged_copy && !copy_in_preparation && !p.self_copy) {
      if (cudaError_t error = conv_pool_to_slices(
              input_data(s, ops), ops.x_stride, element_bytes(s), s.batch, s.in_channels,
              s.in_height, s.in_width, copy_phases(s, p), copy_phase_mask(s, p),
              conv_pool_copy_rows(s), p.staged_channels / slice_channels(s.element),
              const_cast<void*>(p.staged_input), stream);
          error != cudaSuccess)
        return error;
    }
    CUtensorMap x_map, weight_map{};
    if (cudaError_t error = encode_x_map(s, ops, p, &x_map); error != cudaSuccess) return error;
    if (p.weights_in_place) {
      if (cudaError_t error = encode_weight_map(s, ops, p, &weight_map); error != cudaSuccess)
        return error;
    }
    // A channels-last output pooled from the whole conv tile in one pass.
    const bool one_pass_pool = p.out_stride[1] == 1 && p.epilogue_passes == 1 &&
                               !p.paired_pool && !p.cluster_split;
    p.wide_pool = hooks::wide_pool_allowed() && one_pass_pool;
    if (pixel_major_enabled() && one_pass_pool) {
      const TileSpec& tile = kTileSpecs[p.tile];
      const int pixels = 64 * tile.square_rows * tile.square_cols, pitch = pixel_pitch(tile.n);
      if (int64_t(pixels) * pitch * 4 <= p.bias_offset - p.epilogue_offset) {
        p.pixel_major = true;
        p.tile_pitch = pitch;
      }
    }
    if (trace_path() != nullptr) {
      if (cudaError_t error = trace_begin(p, stream); error != cudaSuccess) return error;
    }
    const cudaError_t launched =
        s.element == kElementFloat32   ? launch_ws<Float32>(ops, s, p, x_map, weight_map, stream)
        : s.element == kElementFloat16 ? launch_ws<Float16>(ops, s, p, x_map, weight_map, stream)
                                       : launch_ws<BFloat16>(ops, s, p, x_map, weight_map, stream);
    return launched == cudaSuccess && p.trace != nullptr ? trace_end(p, stream) : launched;
  }
  if (p.staged_copy) {
    if (cudaError_t error = conv_pool_to_channels_last(
            input_data(s, ops), ops.x_stride, element_bytes(s), s.batch, s.in_channels,
            s.in_height, s.in_width,
            p.staged_channels, const_cast<void*>(p.staged_input), stream);
        error != cudaSuccess)
      return error;
  }
  if (p.split_operands) return general_wgmma_launch_float32_3xtf32(ops, s, p, stream);
  switch (s.element) {
    case kElementFloat32:
      return general_wgmma_launch_float32(ops, s, p, stream);
    case kElementFloat16:
      return general_wgmma_launch_float16(ops, s, p, stream);
    default:
      return general_wgmma_launch_bfloat16(ops, s, p, stream);
  }
}
