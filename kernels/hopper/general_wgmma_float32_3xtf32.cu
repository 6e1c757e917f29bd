// The general kernel's 3xTF32 instances (general_3xtf32_wgmma: float32 with allow_tf32 =
// False; Plan::split_operands): the N = 64 tiles of two squares a warpgroup, x read from the
// launch's split NHWC copy; the registers form's (Plan::split_registers) are in
// general_wgmma_float32_3xtf32_registers.cu. Their own files, so that they compile in
// parallel with the others.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_float32_3xtf32(const ConvPoolOperands& operands,
                                                const ConvPoolShape& shape,
                                                const general_wgmma::Plan& plan,
                                                cudaStream_t stream) {
  using namespace general_wgmma;
  if (!plan.split_operands) return cudaErrorInvalidValue;
  if (plan.split_registers)
    return general_wgmma_launch_float32_3xtf32_registers(operands, shape, plan, stream);
  if (plan.input != kPixelInput) return cudaErrorInvalidValue;
  switch (plan.tile) {
    case kWide64:
      return launch_instance<Float32, kWide64, kPixelInput, kSplitStaged>(operands, shape, plan,
                                                                          stream);
    case kSquare64:
      return launch_instance<Float32, kSquare64, kPixelInput, kSplitStaged>(operands, shape,
                                                                            plan, stream);
    default:
      return cudaErrorInvalidValue;
  }
}
