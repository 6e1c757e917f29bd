// The general kernel's bfloat16 instances (general_launch.cuh): 16-bit inputs are read as pixel
// slices, from x itself (channels-last) or from the launch's NHWC copy. One file per element
// type, so that the instances compile in parallel.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_bfloat16(const ConvPoolOperands& operands,
                                    const ConvPoolShape& shape,
                                    const general_wgmma::Plan& plan, cudaStream_t stream) {
  return general_wgmma::launch_element<BFloat16, general_wgmma::kPixelInput>(operands, shape, plan,
                                                                        stream);
}
