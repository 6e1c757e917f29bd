// The warp-specialized general kernel's float16 instances (general_ws_kernel.cuh, kTmaInput). One
// file per element type, so that the instances compile in parallel.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_ws_float16(const ConvPoolOperands& operands,
                                       const ConvPoolShape& shape,
                                       const general_wgmma::Plan& plan,
                                       const CUtensorMap& x_map,
                                       const CUtensorMap& weight_map, cudaStream_t stream) {
  return general_wgmma::launch_ws_element<Float16>(operands, shape, plan, x_map, weight_map,
                                                   stream);
}
