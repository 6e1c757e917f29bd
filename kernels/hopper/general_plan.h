// The general Hopper kernel's plan: everything about one launch that the host works out once
// (general_search.cu, general_wgmma.cu) and the kernel receives by value. Plain C++ so that
// both nvcc and the host compiler read it, and the tests can ask for it (general_wgmma_plan).
//
// The geometry, in the kernel's terms:
//   tile       one image, a block of `n` output channels and a rectangle of pooled outputs
//              (pooled_rows x pooled_cols) whose pooling windows all lie inside a rectangle of
//              tile_rows x tile_cols conv pixels: square_rows x square_cols squares of 8 x 8
//              pixels, one M = 64 wgmma operand each. Windows that overlap (pool stride below
//              the window) are computed by both tiles they fall in.
//              Small images: `images` consecutive images side by side, each in
//              tile_cols / images conv columns (its whole pooled output), so that a step's
//              weights serve all of them (a 7 x 7 image would fill one square of four).
//   step       one (run of step_chunks input-channel chunks, group of kernel rows): those
//              channels' input halo for those kernel rows and their weights, staged together;
//              a tile reduces over chunk_steps x groups steps. Short kernels take several
//              chunks a step (a 1 x 1 step of one chunk would be too little work to hide the
//              next steps' loads behind).
//   halo       the input rows and columns a step's taps read, in channel slices of 16 bytes
//              (4 fp32 or 8 16-bit channels; a chunk is two slices, one wgmma K), laid out
//              [slice][halo row][column phase][column] so that the 8 pixels of one conv row
//              under any tap are 8 consecutive 16-byte slots: with a column stride s, input
//              column j lives in phase j % s at position j / s, and only the phases some
//              kernel column reads are staged (phase_mask). With images side by side, image i's
//              halo columns start at column i x image_span (a multiple of s: the same phase
//              for the same column of every image).
#pragma once

#include <cstdint>

#include "../conv_pool_shape.h"

namespace general_wgmma {

constexpr int kThreads = 256;  // two consumer warpgroups
constexpr int kStages = 3;     // steps in flight: the wgmmas of one, the loads of the next two
// The warp-specialized form (kTmaInput, general_ws_kernel.cuh): the two consumer warpgroups,
// then a producer warpgroup whose one thread issues every copy; as many stages as fit, up to
// kMaxStages.
constexpr int kWsThreads = 384;
constexpr int kMaxStages = 8;
constexpr int kSliceBytes = 16;
// Kernel columns, taps per stage and staged columns the device-side tables and loops are sized
// for (general_wgmma_unsupported refuses more).
constexpr int kMaxKernelCols = 64;
constexpr int kMaxStageTaps = 256;
constexpr int kMaxHaloCols = 256;
constexpr int kMaxStrideW = 32;  // phase_mask is 32 bits
// The tensor copy engine's limits on a box (kTmaInput): at most 256 elements a dimension, and
// a traversal stride (every k-th column or row) of at most 8.
constexpr int kMaxTmaBox = 256;
constexpr int kMaxTmaStride = 8;
// Merged box rows (Plan::merged_cols) count 8-byte words whatever the element type (the copy
// engine moves raw words; zeros out of bounds): a column is two words, so a box row holds 128
// columns where 16-bit elements would allow 32 and float32 ones 64.
constexpr int kMergedWordBytes = 8;
constexpr int kMergedColWords = kSliceBytes / kMergedWordBytes;

// The kernel instances' tiles: the one table of them (the host's choice, the launch and the
// tests all index it).
enum TileId : int { kWide128 = 0, kSquare128, kWide64, kSquare64, kTall64, kTileCount };

struct TileSpec {
  int square_rows, square_cols;  // of 8 x 8 conv pixels; two warpgroups share them
  int n;                         // output channels per block (N of every wgmma)
  int min_blocks;                // blocks per SM the kernel's launch bounds allow for
  const char* name;
};

// 128 accumulators per thread in each but the N = 64 two-blocks-per-SM tiles (64: their
// 128-register cap leaves room for the rest).
constexpr TileSpec kTileSpecs[kTileCount] = {
    {1, 4, 128, 1, "wide_n128"},    // 8 x 32 pixels: wide images
    {2, 2, 128, 1, "square_n128"},  // 16 x 16: small images (14 x 14 and the like)
    {1, 4, 64, 2, "wide_n64"},      // 8 x 32, two blocks per SM: one's epilogue under the
    {2, 2, 64, 2, "square_n64"},    // other's mainloop; layers of at most 64 channels
    {2, 4, 64, 1, "tall_n64"},      // 16 x 32: overlapping 3 x 3 / 2 pools recompute least
};

// How a step's halo comes in from global memory.
enum InputPath : int {
  kPlanarInput = 0,  // float32, any strides (NCHW): one 4-byte cp.async per element, written
                     // into its pixel's slice (the transpose happens on the way in)
  kPixelInput = 1,   // channels contiguous (channels-last, or the NHWC copy the launch makes of
                     // a 16-bit NCHW input): one 16-byte cp.async per pixel slice
  kTmaInput = 2,     // the warp-specialized kernel: the tensor copy engine brings each (image,
                     // column phase) of a step's halo as one box of a 5-D view of x, [slice]
                     // [row][column][16 bytes], from x itself (channels-last) or from the launch's
                     // slice-planar copy (other inputs: [image][slice][row][column][16 bytes])
};

struct Plan {
  int tile;          // TileId
  int input;         // InputPath
  bool staged_copy;  // kPixelInput from the launch's NHWC copy of x (16-bit NCHW inputs)
  // 3xTF32 (general_3xtf32_wgmma, float32 with allow_tf32 = False): x and the weights staged
  // as big and small TF32 parts (split_tf32_operand), every chunk of 8 input channels as
  // three, [big x, small x, big x] against [big w, big w, small w] (chunks counts those), so
  // that each K step's products are 3xTF32's; each step's sum starts afresh in the wgmmas'
  // accumulators and is added into fp32 registers (a run of wgmma additions carries an error
  // that scales with the sum: docs/PERF.md, fp32-accurate paths). x is read from the staged
  // copy (split_registers: its other form). N = 64 tiles of two squares a warpgroup
  // (accumulators and sums: 128 registers), one block per SM.
  bool split_operands;
  // Tiles: pooled outputs per tile, tiles per image dimension, channel blocks; in all
  // batch x tiles_h x tiles_w x channel_blocks (< 2^31), channel block fastest.
  int pooled_rows, pooled_cols;
  int tiles_h, tiles_w, channel_blocks;
  int64_t tiles;
  // (tail_n, the last channel block's wgmma width: the last field.)
  // Images side by side in a tile (1, 2 or 4, dividing the square columns; > 1 only where an
  // image's whole pooled output fits its share, so tiles_h = tiles_w = 1 and the pooled
  // rectangle is the image's): tiles = ceil(batch / images) x channel_blocks.
  int images;
  // Split reductions: `split` blocks a tile (1: none), each split_steps of its steps (the last
  // fewer); grid = tiles x split, the split index fastest. cluster_split (kTmaInput, not
  // persistent, one epilogue pass; split a power of two up to kConvPoolMaxCluster): a tile's
  // blocks are launched as one cluster, each stages its partial conv tile, and each sums the
  // tiles' rows of 1 / split of the channels through the others' shared memory and pools them
  // (no workspace); else through the workspace's partial sums and a counter a tile.
  int split, split_steps;
  bool cluster_split;
  // The conv tile's pixels that the pooling can read: rows [0, read_rows), columns [0,
  // read_cols) (through the last image's share); the cluster split sums only those.
  int read_rows, read_cols;
  // Reduction: chunks of input channels, chunks per step (the last step may have fewer),
  // chunk_steps = ceil(chunks / step_chunks), kernel rows per step (group_rows; the last group
  // may have fewer), groups, steps = chunk_steps x groups (chunk step outer).
  int chunks, step_chunks, chunk_steps, group_rows, groups, steps;
  // gathered_rows (group_rows == 1 only): one halo row per conv row of the tile, input rows
  // stride_h apart (strided layers, where a dense span of rows would stage rows no tap reads);
  // else the dense span of input rows the group's taps read.
  bool gathered_rows;
  int halo_rows;      // staged rows of the largest group
  int halo_cols;      // staged input columns: images x image_span
  int image_cols;     // of them read by one image's taps: (c - 1) * stride_w + (kernel_w - 1)
                      // * dilation_w + 1, c its conv columns (tile_cols / images, or
                      // read_cols with one image a tile: general_search.cu's clip_halo)
  int image_span;     // columns per image: image_cols (images = 1), else rounded up to stride_w
  uint32_t phase_mask;  // bit r: column phase r (residue mod stride_w) is staged
  int phase_cols;     // slots per staged phase: ceil(halo_cols / stride_w)
  int row_pitch;      // slots per halo row (phases x phase_cols, + 1 against bank conflicts)
  int slice_plane;    // slots per slice: halo_rows x row_pitch
  int halo_bytes;     // 2 x step_chunks slices
  int weight_stage_bytes;  // [tap][chunk][slice][n][16 bytes]: group_rows x kernel_w taps
  int stage_bytes;    // halo + weights, 128-byte aligned
  int stages;         // pipeline depth: kStages, or (kTmaInput) as many as fit, <= kMaxStages
  // kTmaInput's halo: per stage, images x phases boxes of [slice][halo row][column][16 bytes]
  // (row_pitch = phase_cols slots, slice_plane = halo_rows x phase_cols), each plane_bytes
  // (128-byte aligned), image-major; a box spans box_rows input rows (halo_rows, or with
  // gathered rows halo_rows x stride_h read every stride_h-th).
  // merged_cols: from the slice-planar copy, whose rows hold each column phase's columns as one
  // run (stride_w phases: conv_pool_layout.h), a box's rows are whole runs of phase_cols x 16
  // bytes, so the view merges (column, 8-byte half of the slice) into its dimension 0
  // (kMergedWordBytes), the phase its dimension 1, and a box row is one run of up to 256 words, 128
  // columns in every dtype (else a box row is one 16-byte slice, its columns read every
  // stride_w-th).
  // x_swizzle (read in place, channels-last, where the channels and a step's run of them are
  // whole W-byte groups, W = 32, 64 or 128): a box row is W bytes of channels a pixel instead of
  // one 16-byte slice (whole 32-byte sectors of x), landing [group][row][column][W bytes] in the
  // copy engine's W-byte swizzle, which the A descriptors name (wgmma and the engine swizzle on
  // the same shared address bits); planes and stages then start on the swizzle's 8 x W-byte
  // pattern. 0: [slice][row][column][16 bytes], no swizzle.
  int phases;
  int plane_bytes;
  int box_rows;
  bool merged_cols;
  int x_swizzle;
  // Epilogue: the conv tile in shared memory, [channel][pixel] fp32 with tile_pitch floats per
  // channel (paired_pool: its 2 x 2 windows' maxima, [channel][window]), n / epilogue_passes
  // channels at a time, at epilogue_offset: 0 (the pipeline's bytes, reused), or (persistent)
  // past the stages.
  int epilogue_passes;
  int tile_pitch;
  int epilogue_offset;
  // pool_2x2_inside layers: each 2 x 2 window's maximum is taken in registers (a thread holds
  // its window's two rows, its neighbour lane the other column) and staged alone, one float a
  // window; the pooling then reads one float a window (a quarter of the epilogue's
  // shared-memory traffic and bytes: persistent plans fit it beside the stages). The
  // warp-specialized kernel only (kTmaInput), with one epilogue pass, and not in the cluster
  // split, which sums partial tiles before pooling.
  bool paired_pool;
  // The warp-specialized kernel's one-block tiles with one epilogue pass, not paired, not the
  // cluster split: a channels-last output's window loops take a 16-byte group of channels at
  // once (a launch setting; off with $CONV_POOL_GENERAL_WIDE_POOL=0).
  bool wide_pool;
  // Paired plans without a split: each lane stores its 2 x 2 windows' outputs from its
  // registers (store_pooled_pairs), nothing staged (persistent plans of several rounds reserve
  // no epilogue bytes), no barrier between the mainloop and the next tile (staged instead with
  // $CONV_POOL_GENERAL_DIRECT_PAIRS=0).
  bool direct_pairs;
  // kTmaInput, persistent (paired plans of several rounds, kPersistentMinRounds; any plan with
  // $CONV_POOL_GENERAL_PERSISTENT=1): each block runs tiles (tile x split shares) blockIdx.x,
  // + grid, ... in turn, its producer loading the next one's steps under this one's epilogue;
  // grid = the blocks resident at once. Else grid = tiles x split, one each.
  bool persistent;
  int64_t grid;
  // Dynamic shared memory of a block: [stages][halo | weights] (the epilogue tile reuses it),
  // then the tile's bias (n floats), the K-step table (ints: group_rows x kernel_w x
  // step_chunks), the halo columns' slots (kMaxHaloCols ints), one mbarrier per stage and a
  // word for the split reduction's verdict; kTmaInput: no column slots, and kMaxStages full
  // then kMaxStages empty mbarriers.
  int bias_offset, kstep_table_offset, col_slot_offset, barrier_offset;
  int smem_bytes;
  int blocks_per_sm;  // resident blocks the shared memory and registers allow
  // Workspace: the packed weights, [channel block][chunk run][tap][chunk][slice][n][16 bytes]
  // (one step's weights contiguous: one bulk copy; a short last run padded with zeros; a narrow
  // last block tail_n rows a slice), then
  // (staged_copy) x as NHWC with staged_channels (in_channels rounded up to the chunk), or for
  // kTmaInput slice-planar with in_channels rounded up to the slice, then
  // (split > 1 but not cluster_split) the partial sums, tiles x split x 256 threads x the
  // accumulators, and a counter per tile (zeroed by the launch's preparation).
  // weights_in_place (kTmaInput; weights whose 16-byte channel slices are whole and aligned: 1 x 1
  // ones, channels-last ones of any kernel; on layers of one round of blocks and at least
  // kInPlaceWeightsMinElements weights): the producer brings a step's weights from the weight
  // tensor itself, one box of a 5-D view of it (weight_map: [channel in a slice][output
  // channel][slice][tap]) that lands in the staged layout, zeros past the channels and taps;
  // nothing is packed and packed_bytes is 0.
  bool weights_in_place;
  int staged_channels;
  int64_t packed_bytes;
  int64_t staged_input_bytes;
  int64_t partial_bytes;
  // The output's element strides (n, c, h, w), set by the launch: NCHW contiguous or
  // channels-last.
  int64_t out_stride[4];
  // Device pointers, set by the launch (into the workspace, or the caller's packed copy).
  const void* packed;
  const void* staged_input;
  const void* partials;
  const void* counters;
  // A measurement hook (general_trace.cuh): the first trace_blocks blocks' timestamps, or null.
  unsigned long long* trace;
  int trace_blocks;
  // tail_n (kTmaInput): the N of the last channel block's wgmmas where its channels
  // (out_channels - (channel_blocks - 1) x n) fit the tile's narrow_width, else 0 (the tile's
  // n). Its wgmmas write the first tail_n / 2 accumulators of each square; its packed weights
  // hold tail_n rows a slice (packed_rows: a step brings half the bytes), weights read in place
  // the tile's n, whose first tail_n rows the wgmmas read. Last with split_registers, so
  // that the fields before them keep their offsets in the kernels' parameters (and the kernels
  // that never read them their machine code).
  int tail_n;
  // The 3xTF32 form with x's operand from registers (split_operands as well; the default,
  // $CONV_POOL_GENERAL_SPLIT_REGISTERS=0 turns it off): x staged as for TF32 (chunks count
  // x's chunks; read in place, element by element or from the NHWC copy, as choose_input
  // says) and split into big and small parts in the consumers' registers at each K step; the
  // weights packed as two parts a chunk, [big w, small w] (weight_parts), against which each
  // K step issues three wgmmas with A from registers: big x big w, small x big w, big x small
  // w, the same products in the same order as the staged form's three chunks.
  bool split_registers;
  // The epilogue hands its threads only the tile's pooled outputs inside the output
  // (pooled_rect), and the warp-specialized kernel reads a block's first bias under its first
  // copies (off: $CONV_POOL_GENERAL_POOL_RECT=0). A launch setting.
  bool pool_rect = true;
  // Window-major 1 x 1 layers (general_windows.cu): the launch runs the windowed layer, whose
  // pooled position (r, q) is the layer's window w = r x out_width + q (none past `windows`),
  // stored at (n, ph, pw) = (w / (window_rows x window_cols), ...) of the layer's output
  // (out_stride: the layer's); 0: the output is the launch's own layer's. A launch setting.
  int windows = 0;
  int window_rows = 0, window_cols = 0;
  // A channels-last output's pooling gives a thread one position and its channel groups (as
  // the NCHW pooling gives channels), not (group, position) pairs in turn: the position's
  // window and address once for all its groups. A launch setting, on unless
  // $CONV_POOL_GENERAL_POOL_POSITIONS=0.
  bool pool_positions = false;
  // A channels-last output's conv tile staged [pixel][channel] instead (tile_pitch floats a
  // pixel: pixel_pitch), so that a window pixel's 16-byte channel group is one or two
  // vector loads, not one load a channel. The warp-specialized kernel, one epilogue pass,
  // unpaired, not the cluster split, where the epilogue's bytes hold it. A launch setting, on
  // unless $CONV_POOL_GENERAL_PIXEL_MAJOR=0.
  bool pixel_major = false;
  // Where the preparation launch would do nothing but x's slice-planar copy (weights read in
  // place, no split counters), a 1 x 1 layer at stride 1 whose blocks all fit one round and
  // each copy at most kSelfCopyMaxBytes of x: each block writes the part of the copy its own
  // boxes read, with all its threads, before its producer's first box, and no launch runs
  // before the kernel (general_wgmma.cu's self_copy_applies; off with
  // $CONV_POOL_GENERAL_SELF_COPY=0).
  bool self_copy = false;
};

// Weight parts a chunk of x in the packed layout: two (big, small) in the registers form of
// 3xTF32 (Plan::split_registers), else one (the staged form counts its three in chunks).
CONV_POOL_HD inline int weight_parts(const Plan& p) { return p.split_registers ? 2 : 1; }

// The narrow wgmma width a tile of n channels issues for its last channel block where that
// holds at most as many channels (Plan::tail_n): half of n. (A quarter too, n / 4, made the
// warp-specialized kernel's compile 2.05x as long as without either, the half alone 1.65x.)
CONV_POOL_HD constexpr int narrow_width(int n) { return n / 2; }

// Plan::pixel_major's floats a pixel of a tile of n channels (one epilogue pass): n + 4, which
// is 4 mod 8, so that a quarter-warp's 16-byte loads of 8 consecutive pixels hit distinct banks.
CONV_POOL_HD constexpr int pixel_pitch(int n) { return n + 4; }

// Plan::tail_n for a last channel block of `tail` channels on a tile of n: narrow_width where
// they fit it, else 0.
CONV_POOL_HD constexpr int tail_width(int tail, int n) {
  return tail <= narrow_width(n) ? narrow_width(n) : 0;
}

// The rows a slice of channel block `block`'s packed weights holds: tail_n for a narrow last
// block whose weights are packed (read in place, they keep the tile's n), else n.
CONV_POOL_HD inline int packed_rows(const Plan& p, int block, int n) {
  return p.tail_n > 0 && !p.weights_in_place && block == p.channel_blocks - 1 ? p.tail_n : n;
}

// The wgmma width of the blocks of tile `tile` (of p.tiles): tail_n for the last channel
// block where the plan narrows it, else the tile's n.
CONV_POOL_HD inline int block_width(const Plan& p, int64_t tile, int n) {
  return p.tail_n > 0 && int(tile) % p.channel_blocks == p.channel_blocks - 1 ? p.tail_n : n;
}

// The K-step counts (taps x chunks) of a step that the kernel issues as an unrolled sequence
// (mma_step); the plan prefers them.
#define GENERAL_WGMMA_STATIC_KSTEPS(X)                                                    \
  X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) \
  X(18) X(20) X(21) X(24) X(25) X(27) X(28) X(32)

CONV_POOL_HD constexpr bool static_ksteps(int ksteps) {
#define GENERAL_WGMMA_IS(K) ksteps == K ||
  return GENERAL_WGMMA_STATIC_KSTEPS(GENERAL_WGMMA_IS) false;
#undef GENERAL_WGMMA_IS
}

// 16-byte slots of one staged pixel of a channel run: W / 16 with a swizzled stage
// (Plan::x_swizzle), else 1 (a slice plane holds one slot a pixel).
CONV_POOL_HD constexpr int pixel_slots(const Plan& p) {
  return p.x_swizzle > 0 ? p.x_swizzle / kSliceBytes : 1;
}

// Element layout a step needs of the element type: channels per slice and per chunk.
CONV_POOL_HD constexpr int slice_channels(ConvPoolElement element) {
  return element == kElementFloat32 ? 4 : 8;
}
CONV_POOL_HD constexpr int chunk_channels(ConvPoolElement element) {
  return 2 * slice_channels(element);
}

// A column of the slice-planar copy with column phases (Plan::merged_cols): its phase
// (column mod phases) and its place in that phase's run (floor(column / phases)), for any
// column, negative ones (padding) included.
struct PhaseRun {
  int phase, run;
};
CONV_POOL_HD constexpr PhaseRun phase_run(int col, int phases) {
  const int phase = ((col % phases) + phases) % phases;
  return {phase, (col - phase) / phases};
}
// The same for column first + offset (0 <= offset < phases) from first's, without a division:
// the producer's per-box form, its divisions done once a tile.
CONV_POOL_HD constexpr PhaseRun offset_phase_run(PhaseRun first, int offset, int phases) {
  const int phase = first.phase + offset;
  return phase < phases ? PhaseRun{phase, first.run} : PhaseRun{phase - phases, first.run + 1};
}
constexpr bool offset_phase_runs_agree() {
  for (int phases = 1; phases <= 8; ++phases)
    for (int col = -70; col <= 70; ++col)
      for (int offset = 0; offset < phases; ++offset) {
        const PhaseRun a = offset_phase_run(phase_run(col, phases), offset, phases);
        const PhaseRun b = phase_run(col + offset, phases);
        if (a.phase != b.phase || a.run != b.run || a.run * phases + a.phase != col + offset)
          return false;
      }
  return true;
}
static_assert(offset_phase_runs_agree(), "offset_phase_run must equal phase_run");

}  // namespace general_wgmma
