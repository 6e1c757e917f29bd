// The general kernel's float32 instances that read x element by element (kPlanarInput: NCHW and
// other strides); general_wgmma_float32.cu has the pixel-slice ones.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_float32_planar(const ConvPoolOperands& operands,
                                                const ConvPoolShape& shape,
                                                const general_wgmma::Plan& plan,
                                                cudaStream_t stream) {
  return general_wgmma::launch_element<Float32, general_wgmma::kPlanarInput>(operands, shape,
                                                                              plan, stream);
}
