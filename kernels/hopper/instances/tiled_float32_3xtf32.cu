// The 3 x 3 Hopper kernel's 3xTF32 launches (tiled_launch.cuh).
#include "../tiled_launch.cuh"

TILED_WGMMA_LAUNCH_INSTANCE(tiled_wgmma::Tf32SplitOperands)
