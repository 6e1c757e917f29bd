// The general kernel's float16 instances (general_launch.cuh): one translation unit per element type,
// so that they compile in parallel.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_float16(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                  const general_wgmma::Plan& plan, cudaStream_t stream) {
  return general_wgmma::launch_element<Float16>(operands, shape, plan, stream);
}
