// The 3 x 3 Hopper kernel's float16 launches and weight packing (tiled_launch.cuh).
#include "../tiled_launch.cuh"

TILED_WGMMA_LAUNCH_INSTANCE(tiled_wgmma::HalfOperands<Float16>)
TILED_WGMMA_PACK_INSTANCE(tiled_wgmma::HalfOperands<Float16>)
