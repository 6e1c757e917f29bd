// The cost constants and thresholds of the automatic choices, in one place: which variant a
// layer takes (conv_relu_maxpool_choose.cu), the general kernel's plan (tile, staging, split:
// hopper/general_search.cu), the 3 x 3 wgmma kernel's (channel blocks, weight packing, cluster
// splits: conv_relu_maxpool_wgmma.cu) and the sm_80 tiled kernels' channel blocks
// (conv_relu_maxpool.cu). Each says what it models and what measured it (docs/PERF.md has the
// runs). The limits of what each variant can run are the registry's.
#pragma once

#include <cstdint>

namespace conv_pool_heuristics {

// ---- the choice of variant ----------------------------------------------------------------

// The stem kernels (stem_tf32, stem_16bit) stage every input channel's halo for a block's tile,
// whole: for images of a few channels (RGB) they are 2-4x faster than the general kernel even
// at batch 1 (H200, 3 x 3 into 32 or 64 channels at 224 x 224: 9.6 against 19.9 us of
// kernel), but with 24 channels (a 1 x 1 reduction of 24 into 58, 28 x 28, float16) one took
// 56 us against 13 at batch 1 and 8. Hence at most this many input channels.
constexpr int kStemMaxInChannels = 4;

// Output-channel blocks of the sm_80 tiled kernels (tiled_tf32, tiled_tf32_16w, tiled_3xtf32
// and the flat ones): the widest block the output channels fill well, so blocks of 32 up to
// kNarrowBlockMaxChannels output channels, of 64 up to kMidBlockMaxChannels, of 128 above (the
// flat kernels stop at 64: blocks of 128 were 2-27% slower there). tiled_tf32_16w (16 warps)
// measured 8% faster than tiled_tf32 for 33..64 output channels on the 3 x 3 / 2 x 2 path
// (rgb_stem) and within noise elsewhere, so the choice takes it there.
constexpr int kNarrowBlockMaxChannels = 32;
constexpr int kMidBlockMaxChannels = 64;

// On the 3 x 3 / 2 x 2 path, a conv output of odd height or width (the pool drops its last row
// or column) at a batch of at least this many images takes the general kernel: H200, both
// forms in one process, 3 x 3 layers at batch 32 and 128, the general kernel's time over the
// 3 x 3 kernel's: 7^2 0.38-0.42x, 13^2 0.64-0.92x, 27^2 0.64-0.88x (float16, float32); even
// outputs kept the 3 x 3 kernel (14^2-112^2 1.05-1.43x, 14^2 at batch 1 1.9-2.1x)
// (docs/PERF.md).
constexpr int kFastPathOddGeneralMinBatch = 8;

// Fewer than 8 input channels off the 3 x 3 / 2 x 2 path (RGB first layers: ResNet's, GoogLeNet's
// and DenseNet's 7 x 7 / 2 stems) take the general kernel instead of the flat ones where the
// kernel is kFewChannelGeneralMinTaps to kFewChannelGeneralMaxTaps taps at strides of at most
// kFewChannelGeneralMaxStride, into more than 32 channels, and the layer fills at least one
// wave of N = 64 tiles of 256 conv pixels. The general kernel pads each tap's channels to a
// chunk (8 TF32 or 16 16-bit channels), yet its pipeline wins there: H200, the variants forced
// in one process, the general kernel's time over the chosen flat kernel's, NCHW | channels-last:
// 7 x 7 / 2 3 -> 64 at 224^2 (pool 3 x 3 / 2, batch 32) 0.83 | 0.75 (float32), 0.99 | 0.78
// (float16); 5 x 5 3 -> 64 at 224^2 (batch 32) 0.74 | 0.64, 0.78 | 0.57; 5 x 5 / 2 3 -> 96 at
// 128^2 (batch 8) 0.89 | 0.85, 0.89 | 0.78. Outside it lost: 11 x 11 / 4 (AlexNet) 1.52 |
// 1.33 and 1.66 | 1.31; the 7 x 7 / 2 stem at batch 1 (49 tiles) 1.30 | 1.15 in float32;
// 3 x 3 / 2 into 32 channels 1.07 | 0.87 and 1.16 | 0.85 (docs/PERF.md).
// From 3 x 3 kernels on (9 taps) in every form but float32 NCHW: H100, the same comparison on
// 3 x 3 RGB-like layers that fill the SMs (224^2 at batch 32, strides 1 to 4, into 64 to 1,024
// channels; 4 -> 256 at 128^2; 3 -> 96 at 160^2): float32 channels-last 0.33-0.79 on all ten,
// bfloat16 NCHW 0.47-0.88 on nine and 1.01 on the tenth (just over one wave), a 3 x 3 at
// 1 x 3, dilation 1 x 3, 0.39; float32 NCHW 0.71-1.23, slower on four of ten, so there from
// kFewChannelGeneralMinTapsFloat32Nchw. In 16 bits with a channels-last output (x's layout,
// which the flat kernels copy to NCHW, and their NCHW output re-laid out) also into more than
// 16 channels: H200, float16 channels-last, 3 x 3 / 2 into 32 channels (pool padded,
// ceil_mode) 0.71x (docs/PERF.md).
constexpr int kFewChannelGeneralMinTaps = 9;
constexpr int kFewChannelGeneralMinTapsFloat32Nchw = 25;
constexpr int kFewChannelGeneralMinOut16ChannelsLast = 17;
constexpr int kFewChannelGeneralMaxTaps = 49;
// Strides: at most 3 in either direction, and 4 in 16 bits with a channels-last output. H100,
// both variants in one process, the general kernel's time over the flat kernel's, among layers
// the rules above take: 5 x 5 / 3, 3 -> 96 channels at 224^2, 0.35x (float32 channels-last),
// 0.41x (bfloat16 NCHW), 0.23x (float16 channels-last); 7 x 7 at 1 x 3, 0.64x (float32
// channels-last); 7 x 7 / 4, 3 -> 64, 1.20x (float32 channels-last) and 1.24x (bfloat16 NCHW),
// but 0.98x in float16 channels-last, where 3 x 3 / 4 ran 0.73x, 1 x 11 / 4 0.40x and 5 x 7 at
// 1 x 3 0.69x (docs/PERF.md).
constexpr int kFewChannelGeneralMaxStride = 3;
constexpr int kFewChannelGeneralMaxStride16ChannelsLast = 4;

// ---- the general kernel (general_wgmma) -------------------------------------------------

// Cost model of the tile choice (plan_tile), in SM clock cycles. A K step (32 bytes of every
// operand row: 8 TF32 or 16 16-bit channels of one tap) of one 8 x 8 square is one m64nNk wgmma:
// N / 2 cycles of tensor-core work (64 x N x 8 TF32 MACs at 1024 a cycle, or 16-bit ones at
// twice that), and it reads 64 + N operand rows of 32 bytes from shared memory at 128 bytes a
// cycle, which the halo copies share (kSharedMemoryShare). So N = 64 blocks run at the
// shared-memory bandwidth rather than the tensor cores' rate, N = 128 below it.
// A block's fixed work: its accumulators through shared memory and the pooling (about 4 x
// squares x N cycles) and the pipeline's fill; where two blocks share an SM, most of one's
// fixed work runs under the other's wgmmas (kSharedSmFixed of it counts).
constexpr double kSharedMemoryShare = 1.15;
constexpr double kPipelineFillCycles = 1500.0;
constexpr double kSharedSmFixed = 0.6;
// The copy engine's rate into one SM, bytes a cycle, for the cost's copy term: box rows of one
// 16-byte slice (x read in place from channels-last, or strided boxes) ~13, whatever the tile
// (H200, every tile forced on the fuzz's 24 slowest general-kernel layers: 10-18 bytes a cycle
// a SM, a step's time proportional to its bytes); merged rows ~21 (strided NCHW layers from
// the column-phased copy, about the L2's rate over 132 SMs) (docs/PERF.md).
constexpr double kCopyBytesPerCycleSlices = 13.0;
constexpr double kCopyBytesPerCycleMerged = 21.0;
// The plan the copy term picks is taken where it runs at least this many steps a block
// (general_search.cu's best_plan). H200, the fuzz's 150 layers, the plans with the term and
// without it timed in one process: the term everywhere 0.981x of the kernel time without it on
// the geometric mean (27 layers 0.61-0.97x, 23 1.03-1.46x, the slower ones mostly of 1-6
// steps a block, the stages holding their copies); from 8 steps 0.967x; 4 0.971x, 16 0.973x.
// The zoo's layers the term made slower (timed earlier, up to 1.14x) all take plans of fewer
// than 8 steps a block with it (docs/PERF.md).
constexpr int kCopyCostMinSteps = 8;
// Split reductions: at most this many blocks a tile, each at least kMinSplitSteps steps; the
// last block of a tile reads the partials from L2 at about this many bytes a cycle.
constexpr int kMaxSplit = 16;
constexpr int kMinSplitSteps = 4;
constexpr double kPartialBytesPerCycle = 64.0;
// ... and up to this many blocks a tile, each of at least kFillSplitMinSteps steps, where the
// steps divide into them and they all run at once one an SM: on cluster splits in every
// element type (16-bit: deeper than the cost's own split; a paired plan the cost leaves whole
// loses its paired pooling to a split, a 2 x 2 / 2 layer of 4 steps took 1.45x the time),
// through L2 in float32 (TF32). A step of a block alone on its SM took ~2 us on
// layers of few tiles, about 10x its wgmmas, and such layers ran nearly 1/split faster up to 8
// (float32's zoo 1.05x in geometric mean, up to 1.31x). H200, the zoo's layers of one round,
// deeper splits forced, the kernel's time over the cost's split's: 16-bit cluster splits to
// shares of 3 steps 0.82-0.84x; float32 shares of 3 steps 0.84-0.94x, and its splits through
// L2 kept to one block an SM 0.81-0.88x of two an SM. 16-bit splits through L2 lost (56
// tiles of 6 steps 1.44x, 128 tiles 1.45-2.1x) and keep the cost's (docs/PERF.md).
constexpr int kFillSplit = 8;
constexpr int kFillSplitMinSteps = 3;
// The warp-specialized kernel sums a split tile's partials through its cluster's shared memory
// (one block an SM, the split a power of two) on layers of at most this many tiles; more tiles
// keep the partial sums through L2, whose blocks may run two an SM. H200 zoo: layers of 2-10
// tiles 1.2-1.8x faster with the cluster, layers of 32-64 tiles 0.80-1.23x (docs/PERF.md).
constexpr int kClusterSplitMaxTiles = 16;
// A layer of more tiles than SMs, one block an SM, runs its whole tiles in rounds whose last
// may leave many SMs idle (192 tiles on 132 SMs: two rounds, the second on 60 SMs). Its tiles
// split in two through L2 (the shares need not be resident together: the last to arrive adds
// them) where that takes the busiest SM's rounds to at most kWaveSplitShare of their length
// (192 tiles: three rounds of half a tile against two of whole ones, 0.75) and a tile holds at
// least kWaveSplitMinSteps steps. H100, the fuzz's 192-tile layers split so: those of 60-192
// steps (16-bit and TF32) 0.86-0.95x of the kernel time whole; those of 36 and 48 steps
// 1.04-1.12x, where a share's fixed work and the partial sums outweigh the rounds saved. The
// cost's own splits over several rounds lost on the geometric mean (1.12x over 28 layers;
// docs/PERF.md).
constexpr int kWaveSplitMinSteps = 60;
constexpr double kWaveSplitShare = 0.8;

// float32 inputs without contiguous channels (NCHW): the general kernel reads them from an NHWC
// copy (one pass over x before the launch) where out_channels x taps, the multiply-adds each
// input element feeds, reaches this; below it the kernel copies them element by element, 4
// bytes at a time with the transpose on the way in, which costs its loaders more instructions
// than 16-byte pixel slices. H200, 60 float32 NCHW zoo layers, each way forced, kernel time
// including the copy: above 2048 the copy measured 0.98-1.47x (large layers 1.2-1.5x);
// between 1024 and 2048 0.90-1.21x; below 1024 it lost, to 0.5x on 1 x 1 layers of few output
// channels (docs/PERF.md).
constexpr int64_t kNhwcCopyMinWork = 2048;

// The warp-specialized general kernel reads x through the tensor copy engine, from a
// slice-planar copy where x's channels are not contiguous. For float32 NCHW inputs whose
// out_channels x taps is below this, the cp.async loaders' element-by-element reads (no copy)
// stay. H200, the float32 zoo's 16 NCHW layers of x above kTmaCopyMaxSmallInput timed both ways
// in one process: at 128-448 the copy engine's kernel with the copy took 0.59-0.96x the time on
// 11 of 12 (1 x 1 layers over 7^2-56^2 images; one 1.08x: 768 -> 128 at 17^2), at 16-104
// 1.12-1.31x on three and 0.97x on one (64) (docs/PERF.md). Small inputs take the copy
// whatever the work (kTmaCopyMaxSmallInput elements of x at most): there the copy rides in
// the launch that packs the weights, and the copy engine's kernel measured 1.10-1.36x on 1 x 1
// layers of 128-512 output channels over 7 x 7 and 14 x 14 images (batch 1 and 32, x up to
// 0.8 M elements, docs/PERF.md).
constexpr int64_t kTmaCopyMinWork = 128;
constexpr int64_t kTmaCopyMaxSmallInput = int64_t(1) << 20;

// The warp-specialized general kernel reads weights whose channels are whole 16-byte slices in
// place (one box of 16-byte rows a step) only where its blocks fit in one round on the GPU
// (grid <= SMs x blocks a SM, times kInPlaceWeightsMaxRounds) and the weight has at least
// kInPlaceWeightsMinElements elements: there the packing it saves is latency, not amortized
// over rounds of tiles, and large enough to show beside the launch's copy of x. H200, batch-1
// 1 x 1 layers: 2048 x 512 weights 23.1 -> 17.6 us (float32) and 21.1 -> 16.9 (float16), 1152 x
// 320 15.9 -> 14.4, 512 x 144 and 896 x 128 within 2%, but 104 x 208 13.3 -> 14.7 (its packing
// was free beside the copy, the boxes cost the kernel 1.4 us); with many rounds the boxes'
// 16-byte rows cost more than the packing (128 x 1024 -> 1024 at 14^2 float16: 183 -> 218 us
// of kernel) (docs/PERF.md). Where x is read in place and no split counters are zeroed, the
// packing would be the preparation launch's only work: there any number of weights is read in
// place, and the kernel runs alone ($CONV_POOL_GENERAL_LAUNCH_FREE).
constexpr int kInPlaceWeightsMaxRounds = 1;
constexpr int64_t kInPlaceWeightsMinElements = 65536;

// A block of the warp-specialized general kernel writes its own part of x's slice-planar copy
// (Plan::self_copy) where that part is at most this many bytes: one round of its 384 threads'
// 64-byte items (each item a pixel's 4 slices, its loads in flight at once). H100, float16
// batch-1 1 x 1 layers: parts of 7-21 KB took 0.5-1.6 us off the kernel time against the
// preparation launch's copy, parts of 32-46 KB added 0.6-0.7 us, and a 41 KB part of a
// strided view (RegNet's 104 -> 208 at batch 32) 2.5 us (docs/PERF.md, v110).
constexpr int64_t kSelfCopyMaxBytes = 384 * 64;

// The warp-specialized general kernel runs persistent blocks (each block's producer loads its
// next tile's first steps while its consumers pool this one) where the layer's tiles take more
// than this many rounds of the blocks resident at once and the plan pools 2 x 2 / 2 windows in
// registers (paired: its staged windows, a quarter of the conv tile, fit beside three stages).
// H200, 2 x 2 / 2 zoo layers, one process: 1 x 1 layers of 448-3584 tiles 0.85-0.93x of the
// kernel time in float16 (ResNet-50's 64 -> 256 at 56^2, batch 32: 51.6 -> 43.8 us), 0.90x in
// float32, AlexNet's 3 x 3 at 13^2 0.95-0.97x, layers of one round within 1%; plans that stage
// the whole conv tile in passes beside the stages lost 1.35-2.7x, so they stay one tile a block
// (docs/PERF.md).
constexpr int kPersistentMinRounds = 1;

// Taps x chunks a step should hold at least: 12 wgmma K steps per square (a 3 x 3 chunk is 9)
// keep the tensor cores busy long enough to hide the loads issued two steps ahead.
constexpr int kMinStepKSteps = 12;
constexpr int kMaxStepChunks = 8;

// ---- the 3 x 3 / 2 x 2 wgmma kernel (tiled_tf32_wgmma, tiled_16bit_wgmma, 3xTF32) --------

// A layer whose 128-channel tiles number no more than this runs 64-channel blocks: twice
// the blocks, so twice the SMs share the in-kernel packing, and each block's chunk steps are
// shorter (H200: 18-38% less time for batch-1 and batch-8 VGG layers). Still one
// round of tiles on a Hopper GPU of 128 SMs or more (the H100 SXM and the H200 have 132).
// Such a layer packs its own weights whatever it is given: weights packed ahead of time are
// laid out for N = 128 (the packing sees the weight, not the batch), and the 128-channel
// blocks that read them were slower on all but one of the layers measured
// (docs/PERF.md).
constexpr int kFewTiles = 64;

// Without packed weights, every block of a launch packs a share of them at its start. Where
// the shares are large (a large weight over few blocks: VGG-16's blocks 4-5 at batch 1), a
// kernel of its own on every SM packs them into the workspace instead, and the kernel
// instance that reads packed weights runs on that copy, still in L2 (H200: VGG
// block 5 at batch 1 119 -> 77 us of kernel time, block 4 90 -> 83, block 5 at batch 8 80 ->
// 78; below this share the second launch added ~1 us of event time for nothing). In packed
// weight elements per block.
constexpr int64_t kPackApartElements = 32768;

// Split reductions: the N = 64 tiles of one block per SM that read packed weights (the tiles
// of layers of few tiles, kFewTiles; every 3xTF32 tile) can run a tile's chunks over the blocks
// of a cluster, when
// the layer's tiles leave SMs idle. Cluster sizes 2 to 8 (the portable limit), each block
// given at least kMinSplitChunks chunks. Cost model, fitted on the H200 (VGG-16's blocks 3-5
// at batch 1 and block 5 at batch 8, every split from 1 to 8 forced, float32 and float16;
// docs/PERF.md): kernel time ~ rounds x (chunks per block + kRoundChunks), ~1 us a chunk,
// where rounds = tiles over the clusters that run at once (ConvPoolDevice::max_clusters; for
// no split, one block per SM); the least cost wins, the smaller split on a tie.
constexpr int kMinSplitChunks = 4;
constexpr int kRoundChunks = 7;  // a round's fixed time (prologue, epilogue, reduction)

// Window-major 1 x 1 layers (kernels/hopper/general_windows.cu) by default where x is copied
// anyway (NCHW, the warp-specialized kernel: the copy makes x' in the same pass) and the
// windowed tiles cut the layer's waves of blocks (tiles x split over the resident blocks,
// rounded up) to at most kWindowsMaxWaveShare of at least kWindowsMinWaves. A layer of one wave
// takes one block's chain whatever its tiles hold, and a cut of one wave in many is within the
// copy's own cost: H100, the zoo's 16 windowable NCHW rows (docs/PERF.md), ResNeXt's 1024
// -> 1024 at 14 x 14 (8 -> 6 waves) 0.78x / 0.76x of the kernel time (float16 / float32),
// Inception's 256 -> 64 at 35 x 35 (5 -> 3) 0.93x, one-wave rows 0.89-1.11x, 14 -> 12 and
// 7 -> 6 waves 0.95-1.02x.
constexpr double kWindowsMaxWaveShare = 0.8;
constexpr int64_t kWindowsMinWaves = 2;

// A layer runs transposed (general_transpose.h; $CONV_POOL_GENERAL_TRANSPOSE) where the
// transposed layer's plan costs at most this share of its own by the cost model (the margin
// for the model's error on two different plans).
constexpr double kTransposeGain = 0.9;

}  // namespace conv_pool_heuristics
