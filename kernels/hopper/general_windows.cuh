// Window-major 1 x 1 layers (general_windows.cu): where a pixel of x', the windows' conv pixels
// side by side, reads x. Shared by the window gathers and by the preparation launch's
// slice-planar copy, which makes x' itself where the windowed layer reads a copy anyway.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../conv_pool_shape.h"

namespace general_wgmma {

struct WindowSource {
  ConvPoolShape layer;  // the layer whose pooling windows x' holds
  int cols;             // windows a row of x' (0: x' is x)
};

// A window-major launch's remaps (launch_shape): the epilogue's stores through the windows
// (Plan::windows) and, with copy_x, the preparation launch's slice-planar copy reading x
// through window_source.
struct WindowedLayer {
  WindowSource source;
  int64_t x_stride[4];  // the layer's x
  bool copy_x;
};

// The element offset in x (image, row and column strides xn, xh, xw) of x' pixel (r, q), or
// -1 where it reads the padding or lies past the last window:
//   window w = (r / pool_h) cols + q / pool_w = (n, ph, pw) of the layer's pooled output,
//   its element (a, b) = (r % pool_h, q % pool_w) the conv pixel
//   (clamp(window_row0(ph) + a, 0, conv_h - 1), likewise for the column)
// (a window element in the pool's padding or past a ceil-mode edge repeats one of the window's
// own pixels, so the maximum is the window's). windows_apply keeps the windows' count and x''s
// pixels in int.
__host__ __device__ inline int64_t window_source(const WindowSource& ws, int64_t xn,
                                                 int64_t xh, int64_t xw, int r, int q) {
  const ConvPoolShape& s = ws.layer;
  const int image_windows = s.out_height * s.out_width;
  const int w = r / s.pool_h * ws.cols + q / s.pool_w;
  if (int64_t(w) >= int64_t(s.batch) * image_windows) return -1;
  const int n = w / image_windows, at = w - n * image_windows;
  const int ph = at / s.out_width, pw = at - ph * s.out_width;
  const int a = r % s.pool_h, b = q % s.pool_w;
  const int i = min(max(s.window_row0(ph) + a, 0), s.conv_height - 1);
  const int j = min(max(s.window_col0(pw) + b, 0), s.conv_width - 1);
  const int row = s.input_row0(i), col = s.input_col0(j);
  if (row < 0 || row >= s.in_height || col < 0 || col >= s.in_width) return -1;
  return int64_t(n) * xn + int64_t(row) * xh + int64_t(col) * xw;
}

}  // namespace general_wgmma
