// The slice-planar copy of x (conv_pool_to_slices, conv_pool_layout.h) as one job a launch can
// run alone (conv_pool_layout.cu) or beside other work in the same grid (the general kernel's
// preparation launch, general_wgmma.cu), for an input of any strides.
// Slice-planar: dst[((n * slices + j) * plane + slot) * E + e] = src(n, j E + e, pixel of the
// slot), zeros past the channels, E = 16 / sizeof(Raw) channels a 16-byte slice. With column
// phases P > 1 (a layer of column stride P), each row's columns are grouped by phase: column w
// at (w % P) x ceil(width / P) + w / P of a row of P x ceil(width / P) slots, zeros in the slots
// no column fills, so that the columns a strided box reads are one contiguous run; the slots of
// phases outside phase_mask (column residues no tap reads) are not written, nor the rows
// outside row_mask (row residues mod row_phases no tap reads).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "conv_pool_layout.h"  // conv_pool_phase_width
#include "conv_pool_shape.h"   // CONV_POOL_HD

template <class Raw>
struct ToSlices {
  static constexpr int kSlice = 16 / int(sizeof(Raw));
  // A thread copies one slot's pixel, kGroupSlices slices of it: its loads are kGroupSlices x
  // kSlice channels of one pixel (one contiguous run where the channels are: channels-last),
  // and a warp's loads of one channel are consecutive pixels (along a row of an NCHW plane);
  // each of its stores is a warp's 512 contiguous bytes (or one run a phase). Where x's column
  // stride is the larger (columns_first: a transposed NCHW view, general_transpose.h) the
  // slots go by bands of kBand columns, row by row within a band (to_slices_band_slot), so
  // that a warp's loads of one channel are 32 / kBand consecutive elements (one 32-byte
  // sector) of each of kBand columns, and its stores kBand consecutive slots of each of
  // 32 / kBand rows: whole sectors both ways.
  static constexpr int kGroupSlices = 4;
  static constexpr int kBlockThreads = 256;
  static constexpr int kBand = int(sizeof(Raw));  // columns a band: 32 bytes / (32 / kBand)
  const Raw* src;
  int64_t stride[4];  // src's (image, channel, row, column) strides, elements
  int channels, slices, groups;  // groups: ceil(slices / kGroupSlices)
  int height, width, phases, phase_width, pitch;  // a dst row: pitch = phases x phase_width
  bool columns_first;                             // slots by bands of kBand columns
  uint32_t phase_mask;                    // the phases copied (all where phases = 1)
  int row_phases;                         // rows h copied: bit h mod row_phases of row_mask
  uint32_t row_mask;
  int64_t plane;      // dst slots of one image's slice: height x pitch
  int64_t positions;  // (image, slice group, slot), slot fastest: batch x groups x plane
  Raw* dst;

  // Threads the job takes: whole blocks over the positions.
  CONV_POOL_HD int64_t items() const {
    return (positions + kBlockThreads - 1) / kBlockThreads * kBlockThreads;
  }
};

template <class Raw>
CONV_POOL_HD ToSlices<Raw> to_slices_job(const void* src, const int64_t* stride, int64_t batch,
                                         int channels, int height, int width, int phases,
                                         uint32_t phase_mask, CopyRows rows, int slices,
                                         void* dst) {
  ToSlices<Raw> job;
  job.src = static_cast<const Raw*>(src);
  for (int d = 0; d < 4; ++d) job.stride[d] = stride[d];
  job.channels = channels;
  job.slices = slices;
  job.groups = (slices + ToSlices<Raw>::kGroupSlices - 1) / ToSlices<Raw>::kGroupSlices;
  job.height = height;
  job.width = width;
  job.columns_first = stride[2] > 0 && stride[3] > stride[2];
  job.phases = phases;
  job.phase_width = conv_pool_phase_width(width, phases);
  job.pitch = phases * job.phase_width;
  job.phase_mask = phases > 1 ? phase_mask : 1u;
  job.row_phases = rows.phases > 1 ? rows.phases : 1;
  job.row_mask = rows.phases > 1 ? rows.mask : 1u;
  job.plane = int64_t(height) * job.pitch;
  job.positions = batch * job.groups * job.plane;
  job.dst = static_cast<Raw*>(dst);
  return job;
}

#if defined(__CUDACC__)
// A tiled transpose's load (conv_pool_to_channels_last and the general kernel's 3xTF32 copy):
// tile[c][p] = src(pixel pixel0 + p, channel channel0 + c) of an input of any strides, pixels
// counted over (image, row, column), zeros past the pixels and the channels; a warp reads 32
// consecutive pixels of one channel (blockDim 32 x kThreadRows: along a row of an NCHW plane),
// each thread its 32 / kThreadRows loads at once.
template <int kThreadRows, class Raw>
__device__ __forceinline__ void load_channel_tile(const Raw* src, int64_t s0, int64_t s1,
                                                  int64_t s2, int64_t s3, int64_t pixels,
                                                  int channels, int height, int width,
                                                  int64_t pixel0, int channel0,
                                                  Raw (&tile)[32][33]) {
  const int64_t pixel = pixel0 + threadIdx.x;
  int64_t offset = 0;
  if (pixel < pixels) {
    const int w = int(pixel % width);
    const int64_t rest = pixel / width;
    const int h = int(rest % height);
    offset = (rest / height) * s0 + h * s2 + w * s3;
  }
#pragma unroll
  for (int c = threadIdx.y; c < 32; c += kThreadRows) {
    const int channel = channel0 + c;
    tile[c][threadIdx.x] =
        pixel < pixels && channel < channels ? src[offset + channel * s1] : Raw(0);
  }
}

// The row h and column col of the slot at position `within` of a plane of height x pitch
// slots that goes by bands of `band` columns (the last one narrower where band does not divide
// pitch), row by row within a band: a bijection of [0, height x pitch) onto the plane.
template <class I>
CONV_POOL_HD inline void to_slices_band_slot(I within, int height, int pitch, int band, int& h,
                                             int& col) {
  const I first = within / (I(height) * I(band)) * I(band);  // the band's first column
  const I width = I(pitch) - first < I(band) ? I(pitch) - first : I(band);
  const I k = within - first * I(height);
  h = int(k / width);
  col = int(first + (k - I(h) * width));
}

// Position `index`'s image, slice group, slot in their plane and that slot's row (within the
// plane, slots row by row, or with columns_first by bands of columns); I = 32-bit indices
// where every position fits them.
template <class I, class Raw>
__device__ __forceinline__ void to_slices_place(const ToSlices<Raw>& job, int64_t index,
                                                int64_t& image, int& group, int64_t& slot,
                                                int& h) {
  const I row = I(index) / I(job.plane), within = I(index) - row * I(job.plane);
  if (job.columns_first) {
    int col;
    to_slices_band_slot<I>(within, job.height, job.pitch, ToSlices<Raw>::kBand, h, col);
    slot = int64_t(h) * job.pitch + int64_t(col);
  } else {
    slot = int64_t(within);
    h = int(within / I(job.pitch));
  }
  image = int64_t(row / I(job.groups));
  group = int(row - I(image) * I(job.groups));
}

// Item `index` of the job: its slot's kGroupSlices x kSlice channel loads, then one 16-byte
// store a slice. Slots past the row's columns (phases > 1) get zeros. source(image, h, w): the
// element offset of the pixel's channel 0 in src, or -1 for zeros (the plain copy: its image,
// row and column strides; a window-major copy its own map, general_windows.cuh).
template <class Raw, class Source>
__device__ __forceinline__ void to_slices_item(const ToSlices<Raw>& job, int64_t index,
                                               const Source& source) {
  using Job = ToSlices<Raw>;
  constexpr int kSlice = Job::kSlice, kGroup = Job::kGroupSlices;
  if (index >= job.positions) return;
  int64_t image, slot;
  int group, h;
  if (job.positions <= INT_MAX)
    to_slices_place<uint32_t>(job, index, image, group, slot, h);
  else
    to_slices_place<int64_t>(job, index, image, group, slot, h);
  if (job.row_phases > 1 && !((job.row_mask >> (h % job.row_phases)) & 1u)) return;  // no tap
  const int col = int(slot - int64_t(h) * job.pitch);
  int w = col;
  if (job.phases > 1) {
    const int phase = col / job.phase_width;
    if (!((job.phase_mask >> phase) & 1u)) return;  // a phase no tap reads
    w = (col - phase * job.phase_width) * job.phases + phase;
  }
  const int64_t at = w < job.width ? source(image, h, w) : -1;
  const Raw* pixel = job.src + at;
  const int live = at >= 0 ? job.channels - group * kGroup * kSlice : 0;
  union Vector {
    Raw raw[kSlice];
    uint4 bits;
  };
  Vector by_slice[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int e = 0; e < kSlice; ++e) {
      const int c = g * kSlice + e;  // from the group's first channel
      by_slice[g].raw[e] =
          c < live ? pixel[int64_t(group * kGroup * kSlice + c) * job.stride[1]] : Raw(0);
    }
  uint4* out = reinterpret_cast<uint4*>(job.dst);
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const int slice = group * kGroup + g;
    if (slice < job.slices) out[(image * job.slices + slice) * job.plane + slot] = by_slice[g].bits;
  }
}

template <class Raw>
__device__ __forceinline__ void to_slices_item(const ToSlices<Raw>& job, int64_t index) {
  to_slices_item(job, index, [&](int64_t image, int h, int w) {
    return image * job.stride[0] + h * job.stride[2] + w * job.stride[3];
  });
}
#endif
