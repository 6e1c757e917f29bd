// The general kernel's bfloat16 instances (general_launch.cuh): one translation unit per element type,
// so that they compile in parallel.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_bfloat16(const ConvPoolOperands& operands, const ConvPoolShape& shape,
                                  const general_wgmma::Plan& plan, cudaStream_t stream) {
  return general_wgmma::launch_element<BFloat16>(operands, shape, plan, stream);
}
