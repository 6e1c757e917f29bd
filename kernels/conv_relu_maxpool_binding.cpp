// PyTorch boundary of the fused Conv2d -> ReLU -> MaxPool2d op.
//
// Every argument is checked here, shapes/dtypes/parameters first and devices
// last (so each error is reachable on a CPU-only machine), with a message that
// names the argument and what was expected. The .cu launcher trusts what it gets.
// The same checks (check_geometry) serve the op's fake implementation through
// conv2d_relu_maxpool_output, on symbolic sizes: the rules and messages exist once.
// Torch is used only to check tensors and allocate the output.
#include <ATen/Context.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../binding_registry.h"
#include "conv_pool_env.h"
#include "conv_pool_layout.h"
#include "conv_relu_maxpool.h"

namespace {

using IntPair = std::vector<int64_t>;

// Error messages are assembled here with std::to_string instead of letting
// TORCH_CHECK stream integers: on the H200 image (torch 2.11, g++ 13) an integer
// streamed from inside this module crashed the process (SIGSEGV in
// std::ostream::_M_insert<long>), while strings and c10's own printers are fine.
void append(std::string& out, const char* text) { out += text; }
void append(std::string& out, const std::string& text) { out += text; }
void append(std::string& out, c10::ScalarType type) { out += c10::toString(type); }
void append(std::string& out, const c10::Device& device) { out += device.str(); }
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
void append(std::string& out, T value) {
  out += std::to_string(value);
}
// A size of a fake tensor: its value where it has one, else its symbol ("s0").
void append(std::string& out, const c10::SymInt& value) {
  if (const auto known = value.maybe_as_int())
    out += std::to_string(*known);
  else
    out += value.toSymNode()->str();
}

template <class... Parts>
std::string message(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

// The checks below run on int64_t sizes (real tensors: the forward) and on c10::SymInt ones
// (fake tensors: the op's fake implementation, for torch.compile, torch.export and meta
// tensors, whose sizes may be symbolic); one text for both, so that both refuse the same
// arguments with the same message.
template <class Size>
auto sizes_of(const torch::Tensor& t) {
  if constexpr (std::is_same_v<Size, c10::SymInt>)
    return t.sym_sizes();
  else
    return t.sizes();
}

template <class Size = int64_t>
std::string shape_string(const torch::Tensor& t) {
  std::string out = "[";
  const auto sizes = sizes_of<Size>(t);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d) out += ", ";
    append(out, sizes[d]);
  }
  return out + "]";
}

// PyTorch-style pair: one value is used for both dimensions.
std::pair<int64_t, int64_t> as_pair(const IntPair& value, const char* name) {
  TORCH_CHECK(value.size() == 1 || value.size() == 2,
              message(name, " must be an int pair (h, w), got ", value.size(), " values"));
  return value.size() == 1 ? std::make_pair(value[0], value[0])
                           : std::make_pair(value[0], value[1]);
}

// The element types the kernels take; x decides, weight and bias must match it.
bool kernel_dtype(c10::ScalarType type) {
  return type == torch::kFloat32 || type == torch::kFloat16 || type == torch::kBFloat16;
}

ConvPoolElement element_of(c10::ScalarType type) {
  return type == torch::kFloat16    ? kElementFloat16
         : type == torch::kBFloat16 ? kElementBFloat16
                                    : kElementFloat32;
}

const char* dtype_name(c10::ScalarType type) {
  return type == torch::kFloat16 ? "float16" : type == torch::kBFloat16 ? "bfloat16" : "float32";
}

template <class Size = int64_t>
void check_rank(const torch::Tensor& t, const char* name, int64_t dims, const char* layout) {
  TORCH_CHECK(t.dim() == dims, message(name, " must be ", dims, "-D ", layout, ", got ", t.dim(),
                                       "-D with shape ", shape_string<Size>(t)));
}

// weight and bias must have x's dtype (already checked to be one the kernels take).
void check_same_dtype_as_x(const torch::Tensor& t, const char* name, c10::ScalarType x_type) {
  TORCH_CHECK(t.scalar_type() == x_type,
              message(name, " must be ", dtype_name(x_type), " like x, got ", t.scalar_type()));
}

void check_int_range(int64_t value, const char* what) {
  TORCH_CHECK(value <= INT32_MAX, message(what, " = ", value, " is too large (at most 2^31 - 1)"));
}
// A symbolic size is checked when the forward runs with its value: a guard here would narrow
// the sizes torch.export accepts for a dynamic dimension to 2^31 - 1.
void check_int_range(const c10::SymInt& value, const char* what) {
  if (const auto known = value.maybe_as_int()) check_int_range(*known, what);
}

// An empty packed_weight (what packing gives where nothing takes it) means none.
bool has_packed_weight(const std::optional<torch::Tensor>& packed_weight) {
  return packed_weight.has_value() && packed_weight->defined() && packed_weight->sym_numel() > 0;
}

// A problem's geometry, every argument checked: the sizes (Size) and the settings.
template <class Size>
struct Geometry {
  Size batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  Size conv_h, conv_w;
  int64_t pool_h, pool_w, pool_stride_h, pool_stride_w, pool_pad_h, pool_pad_w;
  Size out_h, out_w;
};

// Every check of the op's arguments that needs no data and no GPU: dtypes, ranks, sizes,
// settings, the output size, devices (x on a CUDA device, or a meta one for shape-only calls;
// weight and bias on x's).
template <class Size>
Geometry<Size> check_geometry(const torch::Tensor& x, const torch::Tensor& weight,
                              const std::optional<torch::Tensor>& bias, const IntPair& stride,
                              const IntPair& padding, const IntPair& dilation,
                              const IntPair& pool_kernel, const IntPair& pool_stride,
                              const IntPair& pool_padding, bool ceil_mode, int64_t config,
                              const std::optional<torch::Tensor>& packed_weight) {
  TORCH_CHECK(kernel_dtype(x.scalar_type()),
              message("x must be float32, float16 or bfloat16, got ", x.scalar_type()));
  check_rank<Size>(x, "x", 4, "(N, C, H, W)");
  check_same_dtype_as_x(weight, "weight", x.scalar_type());
  check_rank<Size>(weight, "weight", 4, "(out_channels, in_channels, kH, kW)");
  const auto x_sizes = sizes_of<Size>(x);
  const auto weight_sizes = sizes_of<Size>(weight);
  Geometry<Size> g{};
  g.batch = x_sizes[0];
  g.in_channels = x_sizes[1];
  g.in_h = x_sizes[2];
  g.in_w = x_sizes[3];
  g.out_channels = weight_sizes[0];
  g.kernel_h = weight_sizes[2];
  g.kernel_w = weight_sizes[3];
  const Size weight_in_channels = weight_sizes[1];
  TORCH_CHECK(g.in_channels >= 1,
              message("x must have at least 1 channel, got shape ", shape_string<Size>(x)));
  TORCH_CHECK(g.out_channels >= 1 && g.kernel_h >= 1 && g.kernel_w >= 1,
              message("weight must have out_channels, kH and kW >= 1, got shape ",
                      shape_string<Size>(weight)));
  if (weight_in_channels != g.in_channels) {
    TORCH_CHECK(weight_in_channels < 1 || g.in_channels % weight_in_channels != 0,
                message("groups other than 1 are not supported: weight expects ",
                        weight_in_channels, " input channels per group and x has ",
                        g.in_channels, " (groups=", g.in_channels / weight_in_channels, ")"));
    TORCH_CHECK(false, message("channel mismatch: x has ", g.in_channels,
                               " channels but weight expects ", weight_in_channels,
                               " (weight shape ", shape_string<Size>(weight), ")"));
  }
  if (bias.has_value()) {
    check_same_dtype_as_x(*bias, "bias", x.scalar_type());
    TORCH_CHECK(bias->dim() == 1 && sizes_of<Size>(*bias)[0] == g.out_channels,
                message("bias must be 1-D with out_channels = ", g.out_channels,
                        " elements, got shape ", shape_string<Size>(*bias)));
  }

  std::tie(g.stride_h, g.stride_w) = as_pair(stride, "stride");
  std::tie(g.pad_h, g.pad_w) = as_pair(padding, "padding");
  std::tie(g.dil_h, g.dil_w) = as_pair(dilation, "dilation");
  std::tie(g.pool_h, g.pool_w) = as_pair(pool_kernel, "pool_kernel");
  // An empty pool_stride means "same as pool_kernel", as in F.max_pool2d.
  std::tie(g.pool_stride_h, g.pool_stride_w) = pool_stride.empty()
                                                   ? std::make_pair(g.pool_h, g.pool_w)
                                                   : as_pair(pool_stride, "pool_stride");
  std::tie(g.pool_pad_h, g.pool_pad_w) = as_pair(pool_padding, "pool_padding");
  TORCH_CHECK(g.stride_h > 0 && g.stride_w > 0,
              message("stride must be positive, got (", g.stride_h, ", ", g.stride_w, ")"));
  TORCH_CHECK(g.dil_h > 0 && g.dil_w > 0,
              message("dilation must be positive, got (", g.dil_h, ", ", g.dil_w, ")"));
  TORCH_CHECK(g.pad_h >= 0 && g.pad_w >= 0,
              message("padding must be non-negative, got (", g.pad_h, ", ", g.pad_w, ")"));
  TORCH_CHECK(g.pool_h > 0 && g.pool_w > 0,
              message("pool_kernel must be positive, got (", g.pool_h, ", ", g.pool_w, ")"));
  TORCH_CHECK(g.pool_stride_h > 0 && g.pool_stride_w > 0,
              message("pool_stride must be positive, got (", g.pool_stride_h, ", ",
                      g.pool_stride_w, ")"));
  TORCH_CHECK(g.pool_pad_h >= 0 && g.pool_pad_w >= 0,
              message("pool_padding must be non-negative, got (", g.pool_pad_h, ", ",
                      g.pool_pad_w, ")"));
  TORCH_CHECK(g.pool_pad_h <= g.pool_h / 2 && g.pool_pad_w <= g.pool_w / 2,
              message("pool_padding must be at most half of pool_kernel, got pool_padding (",
                      g.pool_pad_h, ", ", g.pool_pad_w, ") for pool_kernel (", g.pool_h, ", ",
                      g.pool_w, ")"));
  TORCH_CHECK(config >= kVariantAuto && config < kVariantCount,
              message("config must be -1 (auto) or a ", "variant id in [0, ",
                      int(kVariantCount) - 1, "], got ", config));

  // Before any size arithmetic: every factor fits in 31 bits, so nothing below overflows.
  for (const Size& v : {g.batch, g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h,
                        g.kernel_w})
    check_int_range(v, "a size or parameter");
  for (int64_t v : {g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w, g.pool_h,
                    g.pool_w, g.pool_stride_h, g.pool_stride_w})
    check_int_range(v, "a size or parameter");
  g.conv_h = conv_length(g.in_h, g.kernel_h, g.pad_h, g.stride_h, g.dil_h);
  g.conv_w = conv_length(g.in_w, g.kernel_w, g.pad_w, g.stride_w, g.dil_w);
  TORCH_CHECK(g.conv_h >= 1 && g.conv_w >= 1,
              message("convolution output is smaller than 1 element: ", "input ", g.in_h, "x",
                      g.in_w, " with kernel ", g.kernel_h, "x", g.kernel_w, ", padding (",
                      g.pad_h, ", ", g.pad_w, "), dilation (", g.dil_h, ", ", g.dil_w,
                      ") gives ", g.conv_h, "x", g.conv_w));
  g.out_h = pooled_length(g.conv_h, g.pool_h, g.pool_pad_h, g.pool_stride_h, ceil_mode);
  g.out_w = pooled_length(g.conv_w, g.pool_w, g.pool_pad_w, g.pool_stride_w, ceil_mode);
  TORCH_CHECK(g.out_h >= 1 && g.out_w >= 1,
              message("pooled output is smaller than 1 element: ", "convolution output ",
                      g.conv_h, "x", g.conv_w, " with pool_kernel (", g.pool_h, ", ", g.pool_w,
                      "), pool_stride (", g.pool_stride_h, ", ", g.pool_stride_w,
                      "), pool_padding (", g.pool_pad_h, ", ", g.pool_pad_w, ") gives ",
                      g.out_h, "x", g.out_w));
  for (const Size& v : {g.conv_h, g.conv_w, g.out_h, g.out_w}) check_int_range(v, "an output size");
  // packed_weight, where given, as far as it can be judged without the GPU: x's dtype, 1-D (its
  // length and alignment depend on the GPU: the forward's check_packed_weight).
  const bool packed = has_packed_weight(packed_weight);
  if (packed) {
    check_same_dtype_as_x(*packed_weight, "packed_weight", x.scalar_type());
    TORCH_CHECK(packed_weight->dim() == 1,
                message("packed_weight must be conv2d_relu_maxpool_pack_weight(weight): a 1-D "
                        "tensor, got shape ", shape_string<Size>(*packed_weight)));
  }

  // Devices last, so that all the checks above are reachable without a GPU.
  TORCH_CHECK(x.is_cuda() || x.is_meta(),
              message("x must be a CUDA tensor, got device ", x.device()));
  TORCH_CHECK(weight.device() == x.device(),
              message("weight must be on x's device ", x.device(), ", got ", weight.device()));
  if (bias.has_value())
    TORCH_CHECK(bias->device() == x.device(),
                message("bias must be on x's device ", x.device(), ", got ", bias->device()));
  if (packed)
    TORCH_CHECK(packed_weight->device() == x.device(),
                message("packed_weight must be on x's device ", x.device(), ", got ",
                        packed_weight->device()));
  return g;
}

// The output's memory format: channels-last when x or weight suggests it, as for PyTorch's
// convolution (whose output the max-pool keeps the layout of), else NCHW contiguous.
c10::MemoryFormat output_memory_format(const torch::Tensor& x, const torch::Tensor& weight) {
  const bool channels_last = x.suggest_memory_format() == c10::MemoryFormat::ChannelsLast ||
                             weight.suggest_memory_format() == c10::MemoryFormat::ChannelsLast;
  return channels_last ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
}

struct Checked {
  ConvPoolShape shape;
  bool empty;  // batch of 0: nothing to launch
};

Checked check_and_plan(const torch::Tensor& x, const torch::Tensor& weight,
                       const std::optional<torch::Tensor>& bias, const IntPair& stride,
                       const IntPair& padding, const IntPair& dilation, const IntPair& pool_kernel,
                       const IntPair& pool_stride, const IntPair& pool_padding, bool ceil_mode,
                       int64_t config, const std::optional<torch::Tensor>& packed_weight) {
  const Geometry<int64_t> g =
      check_geometry<int64_t>(x, weight, bias, stride, padding, dilation, pool_kernel,
                              pool_stride, pool_padding, ceil_mode, config, packed_weight);
  TORCH_CHECK(x.is_cuda(), message("x must be a CUDA tensor, got device ", x.device()));
  ConvPoolShape s{};
  s.batch = int(g.batch);
  s.in_channels = int(g.in_channels);
  s.in_height = int(g.in_h);
  s.in_width = int(g.in_w);
  s.out_channels = int(g.out_channels);
  s.kernel_h = int(g.kernel_h);
  s.kernel_w = int(g.kernel_w);
  s.stride_h = int(g.stride_h);
  s.stride_w = int(g.stride_w);
  s.pad_h = int(g.pad_h);
  s.pad_w = int(g.pad_w);
  s.dilation_h = int(g.dil_h);
  s.dilation_w = int(g.dil_w);
  s.conv_height = int(g.conv_h);
  s.conv_width = int(g.conv_w);
  s.pool_h = int(g.pool_h);
  s.pool_w = int(g.pool_w);
  s.pool_stride_h = int(g.pool_stride_h);
  s.pool_stride_w = int(g.pool_stride_w);
  s.pool_pad_h = int(g.pool_pad_h);
  s.pool_pad_w = int(g.pool_pad_w);
  s.out_height = int(g.out_h);
  s.out_width = int(g.out_w);
  s.has_bias = bias.has_value();
  s.element = element_of(x.scalar_type());
  s.channels_last = output_memory_format(x, weight) == c10::MemoryFormat::ChannelsLast;
  return {s, g.batch == 0};
}

// What the variant choice needs to know about a GPU, queried once per device (the attributes
// are fixed for the life of the process).
const ConvPoolDevice& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static ConvPoolDevice info[kMaxDevices];
  static std::once_flag queried[kMaxDevices];
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              message("CUDA device index ", device, " is out of range (at most ", kMaxDevices - 1,
                      ")"));
  std::call_once(queried[device], [device] {
    C10_CUDA_CHECK(conv_relu_maxpool_query_device(device, &info[device]));
  });
  return info[device];
}

bool tf32_allowed() { return at::globalContext().allowTF32CuDNN(); }

// The variant `config` runs on `device` (automatic choice for -1); raises when an
// explicitly requested variant cannot run the shape.
int resolve_variant(const ConvPoolShape& shape, int64_t config, const ConvPoolDevice& device) {
  const int variant = conv_relu_maxpool_choose(&shape, int(config), tf32_allowed(), &device);
  const char* why_not = conv_relu_maxpool_unsupported(&shape, variant, &device);
  TORCH_CHECK(why_not == nullptr,
              message("config ", config, " (",
                      conv_relu_maxpool_variant_name(variant, shape.element),
                      ") cannot run this shape: ", why_not));
  return variant;
}

// The packed copy of `weight` that conv2d_relu_maxpool_pack_weight makes on `device`: its
// element count (0: such weights are not packed there).
int64_t packed_weight_elements(const ConvPoolShape& shape, const ConvPoolDevice& device,
                               const torch::Tensor& weight) {
  return conv_relu_maxpool_packed_weight_bytes(&shape, &device) / weight.element_size();
}

// packed_weight, when given and not empty, must be what conv2d_relu_maxpool_pack_weight made of
// a weight like this one: beyond check_geometry's dtype, rank and device, as long as the
// packed layout on this GPU, contiguous and 16-byte aligned. Its values are the caller's
// business (made from this very weight).
void check_packed_weight(const torch::Tensor& packed, const torch::Tensor& x,
                         const torch::Tensor& weight, int64_t expected_elements) {
  const char* what = "packed_weight must be conv2d_relu_maxpool_pack_weight(weight)";
  TORCH_CHECK(packed.numel() == expected_elements,
              message(what, ": a 1-D tensor of ", expected_elements,
                      " elements for weight of shape ", shape_string(weight), " on ", x.device(),
                      ", got shape ", shape_string(packed)));
  TORCH_CHECK(packed.is_contiguous() &&
                  reinterpret_cast<uintptr_t>(packed.data_ptr()) % 16 == 0,
              message(what, ": contiguous and 16-byte aligned, got a view with offset ",
                      packed.storage_offset()));
}

// x and weight, which pybind11 hands over as optional so that a None gets this one-line error
// instead of an overload-resolution TypeError that prints every argument, tensors included.
std::pair<const torch::Tensor&, const torch::Tensor&> required_tensors(
    const std::optional<torch::Tensor>& x, const std::optional<torch::Tensor>& weight) {
  TORCH_CHECK(x.has_value() && x->defined(), "x must be a 4-D tensor (N, C, H, W), got None");
  TORCH_CHECK(weight.has_value() && weight->defined(),
              "weight must be a 4-D tensor (out_channels, in_channels, kH, kW), got None");
  return {*x, *weight};
}

// x's and weight's addresses and strides, as the launch and the plans read them.
ConvPoolOperands input_operands(const ConvPoolShape& shape, const torch::Tensor& x,
                                const torch::Tensor& weight) {
  ConvPoolOperands operands{};
  if (shape.element == kElementFloat32) {
    operands.x = x.data_ptr<float>();
    operands.weight = weight.data_ptr<float>();
  } else {  // float16 / bfloat16: the kernels read the 16-bit words
    operands.x16 = static_cast<const uint16_t*>(x.data_ptr());
    operands.weight16 = static_cast<const uint16_t*>(weight.data_ptr());
  }
  for (int d = 0; d < 4; ++d) {
    operands.x_stride[d] = x.stride(d);
    operands.weight_stride[d] = weight.stride(d);
  }
  return operands;
}

}  // namespace

torch::Tensor conv2d_relu_maxpool_forward(const std::optional<torch::Tensor>& x_arg,
                                          const std::optional<torch::Tensor>& weight_arg,
                                          const std::optional<torch::Tensor>& bias,
                                          const IntPair& stride, const IntPair& padding,
                                          const IntPair& dilation, const IntPair& pool_kernel,
                                          const IntPair& pool_stride, const IntPair& pool_padding,
                                          bool ceil_mode, int64_t config,
                                          const std::optional<torch::Tensor>& packed_weight) {
  const conv_pool_env::HookScope hooks;  // the tuning hooks' environment, walked once a call
  const auto& [x, weight] = required_tensors(x_arg, weight_arg);
  Checked plan = check_and_plan(x, weight, bias, stride, padding, dilation, pool_kernel,
                                pool_stride, pool_padding, ceil_mode, config, packed_weight);
  const ConvPoolShape& shape = plan.shape;
  const int device = x.get_device();
  const ConvPoolDevice& info = device_info(device);
  const int variant = resolve_variant(shape, config, info);
  const bool packed = has_packed_weight(packed_weight);
  if (packed)
    check_packed_weight(*packed_weight, x, weight, packed_weight_elements(shape, info, weight));

  c10::cuda::CUDAGuard device_guard(x.device());
  // The output's layout follows PyTorch's convolution (channels-last when x or weight is, and
  // the max-pool keeps its input's): output_memory_format. The general kernel and the 3 x 3
  // one write either layout (conv_relu_maxpool_writes_strided_output); the others write NCHW,
  // which conv_pool_to_channels_last then re-lays out.
  const auto memory_format = output_memory_format(x, weight);
  const std::vector<int64_t> out_shape = {shape.batch, shape.out_channels, shape.out_height,
                                          shape.out_width};
  auto out = torch::empty(out_shape, x.options().memory_format(memory_format));
  if (plan.empty) return out;
  const bool channels_last = memory_format == torch::MemoryFormat::ChannelsLast;
  const bool writes_layout =
      !channels_last || conv_relu_maxpool_writes_strided_output(&shape, variant);
  torch::Tensor nchw =
      writes_layout ? out
                    : torch::empty(out_shape, x.options().memory_format(
                                                  torch::MemoryFormat::Contiguous));

  ConvPoolOperands operands = input_operands(shape, x, weight);
  if (shape.element == kElementFloat32) {
    operands.bias = bias.has_value() ? bias->data_ptr<float>() : nullptr;
    operands.out = nchw.data_ptr<float>();
  } else {  // float16 / bfloat16: the kernels read the 16-bit words
    operands.bias16 = bias.has_value() ? static_cast<const uint16_t*>(bias->data_ptr()) : nullptr;
    operands.out16 = static_cast<uint16_t*>(nchw.data_ptr());
  }
  operands.bias_stride = bias.has_value() ? bias->stride(0) : 0;
  // The wgmma variants read packed weights instead of packing them into their workspace.
  if (packed && conv_relu_maxpool_takes_packed_weight(&shape, variant))
    operands.packed_weight = static_cast<const float*>(packed_weight->data_ptr());
  // Scratch for the variants that need it (re-laid-out weights, tiled_16bit_mma's packed
  // input): from the caching allocator, on this stream, freed when the op returns
  // (stream-ordered reuse). Counted in floats whatever x's dtype.
  torch::Tensor workspace;
  const int64_t workspace_bytes =
      operands.packed_weight ? 0
                             : conv_relu_maxpool_workspace_bytes(&shape, variant, &info, &operands);
  if (workspace_bytes > 0) {
    workspace = torch::empty({(workspace_bytes + 3) / 4}, x.options().dtype(torch::kFloat32));
    operands.workspace = workspace.data_ptr<float>();
  }

  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const int64_t out_stride[4] = {out.stride(0), out.stride(1), out.stride(2), out.stride(3)};
  C10_CUDA_CHECK(conv_relu_maxpool_launch(&operands, &shape, variant, &info, stream,
                                          channels_last && writes_layout ? out_stride : nullptr));
  if (!writes_layout) {
    const int64_t nchw_stride[4] = {nchw.stride(0), nchw.stride(1), nchw.stride(2),
                                    nchw.stride(3)};
    C10_CUDA_CHECK(conv_pool_to_channels_last(nchw.data_ptr(), nchw_stride,
                                              int(out.element_size()), shape.batch,
                                              shape.out_channels, shape.out_height,
                                              shape.out_width, shape.out_channels,
                                              out.data_ptr(), stream));
  }
  return out;
}

// The op's fake implementation (model_new.py) in one call: the forward's checks on the
// arguments' metadata (fake or meta tensors, sizes possibly symbolic) and the output's sizes and
// layout, so that torch.compile and torch.export refuse what the forward refuses, with its
// message, and allocate what it returns.
pybind11::tuple conv2d_relu_maxpool_output(const std::optional<torch::Tensor>& x_arg,
                                           const std::optional<torch::Tensor>& weight_arg,
                                           const std::optional<torch::Tensor>& bias,
                                           const IntPair& stride, const IntPair& padding,
                                           const IntPair& dilation, const IntPair& pool_kernel,
                                           const IntPair& pool_stride,
                                           const IntPair& pool_padding, bool ceil_mode,
                                           int64_t config,
                                           const std::optional<torch::Tensor>& packed_weight) {
  const auto& [x, weight] = required_tensors(x_arg, weight_arg);
  const Geometry<c10::SymInt> g =
      check_geometry<c10::SymInt>(x, weight, bias, stride, padding, dilation, pool_kernel,
                                  pool_stride, pool_padding, ceil_mode, config, packed_weight);
  const std::vector<c10::SymInt> sizes = {g.batch, g.out_channels, g.out_h, g.out_w};
  const bool channels_last =
      output_memory_format(x, weight) == torch::MemoryFormat::ChannelsLast;
  return pybind11::make_tuple(sizes, channels_last);
}

// The weights re-laid out once for the wgmma variants, to pass as the op's packed_weight on
// every call with this weight (empty where no variant takes packed weights).
torch::Tensor conv2d_relu_maxpool_pack_weight(const torch::Tensor& weight) {
  const conv_pool_env::HookScope hooks;
  TORCH_CHECK(kernel_dtype(weight.scalar_type()),
              message("weight must be float32, float16 or bfloat16, got ", weight.scalar_type()));
  check_rank(weight, "weight", 4, "(out_channels, in_channels, kH, kW)");
  TORCH_CHECK(
      weight.size(0) >= 1 && weight.size(1) >= 1 && weight.size(2) >= 1 && weight.size(3) >= 1,
      message("weight must have out_channels, in_channels, kH and kW >= 1, got shape ",
              shape_string(weight)));
  for (int64_t d = 0; d < 4; ++d) check_int_range(weight.size(d), "a weight size");
  TORCH_CHECK(weight.is_cuda(),
              message("weight must be a CUDA tensor, got device ", weight.device()));
  ConvPoolShape shape{};
  shape.out_channels = int(weight.size(0));
  shape.in_channels = int(weight.size(1));
  shape.kernel_h = int(weight.size(2));
  shape.kernel_w = int(weight.size(3));
  shape.element = element_of(weight.scalar_type());
  const int device = weight.get_device();
  const ConvPoolDevice& info = device_info(device);
  c10::cuda::CUDAGuard device_guard(weight.device());
  auto packed = torch::empty({packed_weight_elements(shape, info, weight)}, weight.options());
  if (packed.numel() == 0) return packed;
  ConvPoolOperands operands{};
  if (shape.element == kElementFloat32)
    operands.weight = weight.data_ptr<float>();
  else
    operands.weight16 = static_cast<const uint16_t*>(weight.data_ptr());
  for (int d = 0; d < 4; ++d) operands.weight_stride[d] = weight.stride(d);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  C10_CUDA_CHECK(conv_relu_maxpool_pack_weight(&operands, &shape,
                                               static_cast<float*>(packed.data_ptr()), &info,
                                               stream));
  return packed;
}

// The checked shape, the device and the variant the forward would run for these arguments
// (config -1 = automatic choice): what conv2d_relu_maxpool_choose and _plan report.
struct Resolved {
  ConvPoolShape shape;
  ConvPoolDevice device;
  int variant;
};

Resolved resolve_arguments(const std::optional<torch::Tensor>& x_arg,
                           const std::optional<torch::Tensor>& weight_arg,
                           const std::optional<torch::Tensor>& bias, const IntPair& stride,
                           const IntPair& padding, const IntPair& dilation,
                           const IntPair& pool_kernel, const IntPair& pool_stride,
                           const IntPair& pool_padding, bool ceil_mode, int64_t config) {
  const auto& [x, weight] = required_tensors(x_arg, weight_arg);
  const Checked checked = check_and_plan(x, weight, bias, stride, padding, dilation, pool_kernel,
                                         pool_stride, pool_padding, ceil_mode, config,
                                         std::nullopt);
  const ConvPoolDevice& device = device_info(x.get_device());
  return {checked.shape, device, resolve_variant(checked.shape, config, device)};
}

std::string conv2d_relu_maxpool_choose(const std::optional<torch::Tensor>& x,
                                       const std::optional<torch::Tensor>& weight,
                                       const std::optional<torch::Tensor>& bias,
                                       const IntPair& stride, const IntPair& padding,
                                       const IntPair& dilation, const IntPair& pool_kernel,
                                       const IntPair& pool_stride, const IntPair& pool_padding,
                                       bool ceil_mode, int64_t config) {
  const conv_pool_env::HookScope hooks;
  const Resolved resolved = resolve_arguments(x, weight, bias, stride, padding, dilation,
                                              pool_kernel, pool_stride, pool_padding, ceil_mode,
                                              config);
  return conv_relu_maxpool_variant_name(resolved.variant, resolved.shape.element);
}

// Every member's name to its variant's id: a dtype twin's two names (direct, direct_16bit) map
// to the one id, in id order.
pybind11::dict conv2d_relu_maxpool_variants() {
  pybind11::dict variants;
  for (int v = 0; v < kVariantCount; ++v)
    for (int e : {kElementFloat32, kElementFloat16})
      variants[conv_relu_maxpool_variant_name(v, e)] = v;
  return variants;
}

// The registry's rows (conv_relu_maxpool_registry.cu), in id order.
pybind11::list conv2d_relu_maxpool_variant_table() {
  static const char* const kElementNames[] = {"float32", "float16", "bfloat16"};
  pybind11::list rows;
  for (int v = 0; v < kVariantCount; ++v) {
    ConvPoolVariantInfo info{};
    TORCH_CHECK(conv_relu_maxpool_variant_info(v, &info), "variant ", v, " has no registry row");
    pybind11::list dtypes;
    for (int e = 0; e < 3; ++e)
      if ((info.elements >> e) & 1u) dtypes.append(kElementNames[e]);
    pybind11::dict row;
    row["id"] = v;
    // Per dtype: the member's name, math and source (dtype twins differ there).
    pybind11::dict names, math, sources;
    for (int e = 0; e < 3; ++e) {
      if (((info.elements >> e) & 1u) == 0) continue;
      const bool sixteen = e != kElementFloat32;
      names[kElementNames[e]] = sixteen ? info.name_16bit : info.name;
      math[kElementNames[e]] = sixteen ? info.math_16bit : info.math;
      sources[kElementNames[e]] =
          std::string("kernels/") + (sixteen ? info.source_16bit : info.source);
    }
    row["name"] = info.name;
    row["names"] = names;
    row["family"] = info.family;
    row["math"] = math;
    row["source"] = sources;
    row["dtypes"] = dtypes;
    row["arch"] = info.arch;
    rows.append(row);
  }
  return rows;
}

// The host's plan for these arguments: the variant the forward would run, its workspace, whether
// it would read packed weights, and, for every other variant, why it was not taken (its own
// refusal, or that the choice puts the chosen one first).
pybind11::dict conv2d_relu_maxpool_plan(const std::optional<torch::Tensor>& x,
                                        const std::optional<torch::Tensor>& weight,
                                        const std::optional<torch::Tensor>& bias,
                                        const IntPair& stride, const IntPair& padding,
                                        const IntPair& dilation, const IntPair& pool_kernel,
                                        const IntPair& pool_stride, const IntPair& pool_padding,
                                        bool ceil_mode, int64_t config) {
  const conv_pool_env::HookScope hooks;
  const Resolved resolved = resolve_arguments(x, weight, bias, stride, padding, dilation,
                                              pool_kernel, pool_stride, pool_padding, ceil_mode,
                                              config);
  const ConvPoolShape& shape = resolved.shape;
  const ConvPoolDevice& info = resolved.device;
  const int variant = resolved.variant;
  const char* chosen = conv_relu_maxpool_variant_name(variant, shape.element);
  pybind11::dict passed_over;
  for (int v = 0; v < kVariantCount; ++v) {
    if (v == variant) continue;
    const char* why = conv_relu_maxpool_unsupported(&shape, v, &info);
    const bool automatic = config == kVariantAuto;
    passed_over[conv_relu_maxpool_variant_name(v, shape.element)] =
        why ? std::string(why)
            : std::string(automatic ? "runs it; the choice takes " : "runs it; config ") + chosen +
                  (automatic ? " first" : " asked for");
  }
  // The plan for these operands: x's layout decides, e.g., whether the general kernel reads
  // it in place or copies it first.
  const auto& [x_tensor, weight_tensor] = required_tensors(x, weight);
  const ConvPoolOperands operands = input_operands(shape, x_tensor, weight_tensor);
  ConvPoolPlanInfo record{};
  conv_relu_maxpool_variant_plan(&shape, variant, &info, &operands, &record);
  pybind11::dict plan;
  plan["variant"] = chosen;
  plan["config"] = variant;
  plan["workspace_bytes"] = record.workspace_bytes;
  plan["takes_packed_weight"] = record.takes_packed_weight;
  auto text_or_none = [](const char* text) {
    return text != nullptr && *text ? pybind11::object(pybind11::str(text)) : pybind11::none();
  };
  plan["wgmma_tile"] = text_or_none(record.wgmma_tile);
  plan["wgmma_tiles"] = record.wgmma_tiles;
  plan["wgmma_split"] = record.wgmma_split;
  plan["packs_weight_apart"] = record.packs_weight_apart;
  plan["flat_tiling"] = text_or_none(record.flat_tiling);
  plan["out_block"] = record.out_block;
  plan["general"] = text_or_none(record.general);
  plan["passed_over"] = passed_over;
  return plan;
}

// ---- the custom op: fused_conv::conv2d_relu_maxpool in the dispatcher ----------------------
//
// Defined here, with its CPU and CUDA kernels (the forward above: on CPU tensors its checks
// raise "x must be a CUDA tensor") and its autograd kernel, so that a call through torch.ops
// (torch.compile's graphs, torch.export, the profiler) reaches the kernel with no Python on the
// way. model_new.py adds the fake (meta) implementation, which runs
// conv2d_relu_maxpool_output, and the backward op the autograd kernel calls.
namespace {

constexpr const char* kOpSchema =
    "conv2d_relu_maxpool(Tensor x, Tensor weight, Tensor? bias, int[2] stride, "
    "int[2] padding, int[2] dilation, int[2] pool_kernel, int[2] pool_stride, "
    "int[2] pool_padding, bool ceil_mode, int config=-1, Tensor? packed_weight=None) -> Tensor";

torch::Tensor op_kernel(const torch::Tensor& x, const torch::Tensor& weight,
                        const std::optional<torch::Tensor>& bias, c10::IntArrayRef stride,
                        c10::IntArrayRef padding, c10::IntArrayRef dilation,
                        c10::IntArrayRef pool_kernel, c10::IntArrayRef pool_stride,
                        c10::IntArrayRef pool_padding, bool ceil_mode, int64_t config,
                        const std::optional<torch::Tensor>& packed_weight) {
  return conv2d_relu_maxpool_forward(x, weight, bias, stride.vec(), padding.vec(),
                                     dilation.vec(), pool_kernel.vec(), pool_stride.vec(),
                                     pool_padding.vec(), ceil_mode, config, packed_weight);
}

using OpSignature = torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                  const std::optional<torch::Tensor>&, c10::IntArrayRef,
                                  c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef,
                                  c10::IntArrayRef, c10::IntArrayRef, bool, int64_t,
                                  const std::optional<torch::Tensor>&);

// The op below the autograd key: the CUDA or CPU kernel, or the fake one while torch.compile
// or torch.export trace.
torch::Tensor redispatch_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const std::optional<torch::Tensor>& bias,
                                 c10::IntArrayRef stride, c10::IntArrayRef padding,
                                 c10::IntArrayRef dilation, c10::IntArrayRef pool_kernel,
                                 c10::IntArrayRef pool_stride, c10::IntArrayRef pool_padding,
                                 bool ceil_mode, int64_t config,
                                 const std::optional<torch::Tensor>& packed_weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fused_conv::conv2d_relu_maxpool", "")
                             .typed<OpSignature>();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, weight, bias, stride, padding, dilation, pool_kernel, pool_stride,
                 pool_padding, ceil_mode, config, packed_weight);
}

// The op is forward-only. Its backward runs fused_conv::conv2d_relu_maxpool_backward_unsupported
// (model_new.py), which raises model_new.FORWARD_ONLY_MESSAGE on real tensors and returns empty
// gradients on fake ones, so that torch.compile can trace a forward with grad enabled; the
// error then comes when the backward runs, in eager and compiled code alike.
struct ForwardOnly : public torch::autograd::Function<ForwardOnly> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias,
                               c10::IntArrayRef stride, c10::IntArrayRef padding,
                               c10::IntArrayRef dilation, c10::IntArrayRef pool_kernel,
                               c10::IntArrayRef pool_stride, c10::IntArrayRef pool_padding,
                               bool ceil_mode, int64_t config,
                               const std::optional<torch::Tensor>& packed_weight) {
    // Shapes only: the backward computes nothing, so no tensor is kept alive.
    ctx->saved_data["x_shape"] = x.sym_sizes();
    ctx->saved_data["weight_shape"] = weight.sym_sizes();
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["bias_shape"] =
        has_bias ? c10::IValue(bias->sym_sizes()) : c10::IValue(std::vector<c10::SymInt>{});
    return redispatch_forward(x, weight, bias, stride, padding, dilation, pool_kernel,
                              pool_stride, pool_padding, ceil_mode, config, packed_weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    using Signature = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
        const torch::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef);
    static const auto unsupported =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("fused_conv::conv2d_relu_maxpool_backward_unsupported", "")
            .typed<Signature>();
    const auto x_shape = ctx->saved_data["x_shape"].toSymIntVector();
    const auto weight_shape = ctx->saved_data["weight_shape"].toSymIntVector();
    const auto bias_shape = ctx->saved_data["bias_shape"].toSymIntVector();
    auto [grad_x, grad_weight, grad_bias] =
        unsupported.call(grads[0], x_shape, weight_shape, bias_shape);
    torch::autograd::variable_list out(12);  // one per forward argument; settings get none
    out[0] = grad_x;
    out[1] = grad_weight;
    if (ctx->saved_data["has_bias"].toBool()) out[2] = grad_bias;
    return out;
  }
};

torch::Tensor autograd_kernel(const torch::Tensor& x, const torch::Tensor& weight,
                              const std::optional<torch::Tensor>& bias, c10::IntArrayRef stride,
                              c10::IntArrayRef padding, c10::IntArrayRef dilation,
                              c10::IntArrayRef pool_kernel, c10::IntArrayRef pool_stride,
                              c10::IntArrayRef pool_padding, bool ceil_mode, int64_t config,
                              const std::optional<torch::Tensor>& packed_weight) {
  const bool needs_graph =
      c10::GradMode::is_enabled() &&
      (x.requires_grad() || weight.requires_grad() ||
       (bias.has_value() && bias->defined() && bias->requires_grad()));
  if (!needs_graph)  // inference: straight to the kernel
    return redispatch_forward(x, weight, bias, stride, padding, dilation, pool_kernel,
                              pool_stride, pool_padding, ceil_mode, config, packed_weight);
  return ForwardOnly::apply(x, weight, bias, stride, padding, dilation, pool_kernel,
                            pool_stride, pool_padding, ceil_mode, config, packed_weight);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(fused_conv, m) { m.def(kOpSchema); }

TORCH_LIBRARY_IMPL(fused_conv, CUDA, m) { m.impl("conv2d_relu_maxpool", &op_kernel); }

TORCH_LIBRARY_IMPL(fused_conv, CPU, m) { m.impl("conv2d_relu_maxpool", &op_kernel); }

TORCH_LIBRARY_IMPL(fused_conv, Autograd, m) { m.impl("conv2d_relu_maxpool", &autograd_kernel); }

void register_conv_relu_maxpool(pybind11::module& m) {
  namespace py = pybind11;
  const char* doc =
      "Fused F.max_pool2d(F.relu(F.conv2d(x, weight, bias, stride, padding, dilation)),\n"
      "pool_kernel, pool_stride, pool_padding, 1, ceil_mode) in one kernel launch.\n"
      "x: float32, float16 or bfloat16 CUDA (N, C, H, W); weight: (K, C, kH, kW) and\n"
      "bias: (K,) or None, both in x's dtype; the output has x's dtype, and is channels-last\n"
      "when x or weight is (as PyTorch's conv and pool), else NCHW contiguous;\n"
      "each spatial argument an (h, w) pair; pool_stride=[] means pool_kernel;\n"
      "config: -1 picks a variant automatically (see conv2d_relu_maxpool_variants());\n"
      "packed_weight: None, or conv2d_relu_maxpool_pack_weight(weight) made from this very\n"
      "weight's current values (the caller repacks after any change; it is not checked).";
  m.def("conv2d_relu_maxpool_forward", &conv2d_relu_maxpool_forward, doc, py::arg("x"),
        py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("pool_kernel"), py::arg("pool_stride"),
        py::arg("pool_padding"), py::arg("ceil_mode"), py::arg("config") = -1,
        py::arg("packed_weight") = py::none());
  m.def("conv2d_relu_maxpool_output", &conv2d_relu_maxpool_output,
        "The forward's checks on the arguments' metadata (fake or meta tensors: the op's fake\n"
        "implementation) and (output sizes, channels_last): what the forward would return.",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("pool_kernel"), py::arg("pool_stride"),
        py::arg("pool_padding"), py::arg("ceil_mode"), py::arg("config") = -1,
        py::arg("packed_weight") = py::none());
  m.def("conv2d_relu_maxpool_pack_weight", &conv2d_relu_maxpool_pack_weight,
        "weight re-laid out for the wgmma kernels (Hopper, 3x3 kernels), to pass as\n"
        "conv2d_relu_maxpool_forward's packed_weight while weight stays unchanged: those\n"
        "kernels then skip their per-call packing. An empty tensor where no kernel takes it.",
        py::arg("weight"));
  m.def("conv2d_relu_maxpool_choose", &conv2d_relu_maxpool_choose,
        "Name of the kernel variant conv2d_relu_maxpool_forward would run for these arguments.",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("pool_kernel"), py::arg("pool_stride"),
        py::arg("pool_padding"), py::arg("ceil_mode"), py::arg("config") = -1);
  m.def("conv2d_relu_maxpool_variants", &conv2d_relu_maxpool_variants,
        "Kernel variants of conv2d_relu_maxpool_forward: {name: config id}; a variant's\n"
        "float32 and 16-bit members (dtype twins, e.g. direct / direct_16bit) share one id.");
  m.def("conv2d_relu_maxpool_variant_table", &conv2d_relu_maxpool_variant_table,
        "The variant registry: one dict per variant (id, name: the float32 member's, family,\n"
        "dtypes, arch: the lowest compute capability it is built for, 90 meaning sm_90a; names,\n"
        "math and source: {dtype: the member's}).");
  m.def("conv2d_relu_maxpool_plan", &conv2d_relu_maxpool_plan,
        "What the forward would do for these arguments: {variant, config, workspace_bytes (for\n"
        "an NCHW x), takes_packed_weight, the variant's plan (ConvPoolPlanInfo: wgmma_tile,\n"
        "wgmma_tiles, wgmma_split, packs_weight_apart, flat_tiling, out_block, general: None /\n"
        "0 where they do not apply), passed_over: {other variant: why it was not taken}}.",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("pool_kernel"), py::arg("pool_stride"),
        py::arg("pool_padding"), py::arg("ceil_mode"), py::arg("config") = -1);
}

REGISTER_BINDING(conv_relu_maxpool, register_conv_relu_maxpool);
