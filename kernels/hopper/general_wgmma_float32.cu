// The general kernel's float32 instances that read x as 16-byte pixel slices (channels-last);
// the element-wise ones are in general_wgmma_float32_planar.cu. One file per element type and
// input path, so that the instances compile in parallel.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_float32(const ConvPoolOperands& operands,
                                         const ConvPoolShape& shape,
                                         const general_wgmma::Plan& plan, cudaStream_t stream) {
  if (plan.input == general_wgmma::kPlanarInput)
    return general_wgmma_launch_float32_planar(operands, shape, plan, stream);
  return general_wgmma::launch_element<Float32, general_wgmma::kPixelInput>(operands, shape,
                                                                             plan, stream);
}
