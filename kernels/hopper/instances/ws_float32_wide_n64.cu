// The warp-specialized general kernel for float32 on the wide_n64 tile (general_launch.cuh).
#include "../general_launch.cuh"

GENERAL_WGMMA_WS_INSTANCE(Float32, kWide64)
