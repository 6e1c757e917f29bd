// The general kernel's 3xTF32 instances in the registers form (Plan::split_registers): the
// N = 64 tiles of two squares a warpgroup, x read as the TF32 form reads it (16-byte pixel
// slices in place or from the NHWC copy, or element by element) and split in the registers.
#include "general_launch.cuh"

cudaError_t general_wgmma_launch_float32_3xtf32_registers(const ConvPoolOperands& operands,
                                                          const ConvPoolShape& shape,
                                                          const general_wgmma::Plan& plan,
                                                          cudaStream_t stream) {
  using namespace general_wgmma;
  if (!plan.split_operands || !plan.split_registers) return cudaErrorInvalidValue;
  const bool pixels = plan.input == kPixelInput;
  if (!pixels && plan.input != kPlanarInput) return cudaErrorInvalidValue;
  switch (plan.tile) {
    case kWide64:
      return pixels ? launch_instance<Float32, kWide64, kPixelInput, kSplitRegisters>(
                          operands, shape, plan, stream)
                    : launch_instance<Float32, kWide64, kPlanarInput, kSplitRegisters>(
                          operands, shape, plan, stream);
    case kSquare64:
      return pixels ? launch_instance<Float32, kSquare64, kPixelInput, kSplitRegisters>(
                          operands, shape, plan, stream)
                    : launch_instance<Float32, kSquare64, kPlanarInput, kSplitRegisters>(
                          operands, shape, plan, stream);
    default:
      return cudaErrorInvalidValue;
  }
}
