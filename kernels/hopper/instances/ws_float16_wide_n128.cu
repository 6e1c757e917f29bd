// The warp-specialized general kernel for float16 on the wide_n128 tile (general_launch.cuh).
#include "../general_launch.cuh"

GENERAL_WGMMA_WS_INSTANCE(Float16, kWide128)
