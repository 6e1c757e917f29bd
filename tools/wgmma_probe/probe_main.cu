// Standalone timing of the wgmma kernel's C launcher (no PyTorch), with parts of the kernel
// knocked out by the PROBE bit mask (gen.py lists the bits). Run on the H200:
//   bash tools/wgmma_probe/run.sh 0 1 4 7 "default vgg_b3 vgg_b5"
// Each shape: 60 launches with a 256 MB memset (L2 flush) before each, median and p10 of the
// last 50 (CUDA events around the launch); for PROBE 0 also the relative L2 error of 300
// sampled outputs against a float64 CPU reference (-1 when not checked).
#include "wgmma_probe.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>

struct Case { const char* name; int n, c, k, h, w, pad; };

static float frand(uint64_t& s) { s = s * 6364136223846793005ull + 1442695040888963407ull; return ((s >> 40) & 0xFFFFFF) / float(1 << 24) - 0.5f; }

int main(int argc, char** argv) {
  Case cases[] = {{"default", 128, 64, 128, 128, 128, 0}, {"vgg_b2", 32, 128, 128, 112, 112, 1},
                  {"vgg_b3", 32, 256, 256, 56, 56, 1}, {"vgg_b5", 32, 512, 512, 14, 14, 1},
                  {"scalar30", 8, 64, 128, 30, 30, 1}, {"tail_c20", 4, 20, 136, 34, 34, 0},
                  {"plane16", 8, 40, 128, 16, 16, 1}, {"plane_wide", 4, 12, 128, 8, 30, 1},
                  {"batch1", 1, 64, 128, 128, 128, 0}, {"b2_n1", 1, 128, 128, 112, 112, 1},
                  {"b3_n1", 1, 256, 256, 56, 56, 1}, {"b4_n1", 1, 512, 512, 28, 28, 1},
                  {"b5_n8", 8, 512, 512, 14, 14, 1}, {"b3_n4", 4, 256, 256, 56, 56, 1}};
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int smem = 0; cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  ConvPoolDevice dev{smem, sms, 90};
  void* flush; const size_t flush_bytes = 256u << 20; cudaMalloc(&flush, flush_bytes);
  for (const Case& c : cases) {
    if (argc > 1 && std::string(argv[1]).find(c.name) == std::string::npos) continue;
    ConvPoolShape s{};
    s.batch = c.n; s.in_channels = c.c; s.in_height = c.h; s.in_width = c.w;
    s.out_channels = c.k; s.kernel_h = s.kernel_w = 3; s.stride_h = s.stride_w = 1;
    s.pad_h = s.pad_w = c.pad; s.dilation_h = s.dilation_w = 1;
    s.conv_height = c.h + 2 * c.pad - 2; s.conv_width = c.w + 2 * c.pad - 2;
    s.pool_h = s.pool_w = s.pool_stride_h = s.pool_stride_w = 2;
    s.out_height = s.conv_height / 2; s.out_width = s.conv_width / 2; s.has_bias = true;
    const size_t xn = size_t(c.n) * c.c * c.h * c.w, wn = size_t(c.k) * c.c * 9, on = s.output_elements();
    std::vector<float> hx(xn), hw(wn), hb(c.k);
    uint64_t seed = 42;
    for (auto& v : hx) v = frand(seed);
    for (auto& v : hw) v = frand(seed) * 0.1f;
    for (auto& v : hb) v = frand(seed);
    float *x, *w, *b, *o, *ws;
    cudaMalloc(&x, xn * 4); cudaMalloc(&w, wn * 4); cudaMalloc(&b, c.k * 4); cudaMalloc(&o, on * 4);
    const int64_t wsb = wgmma_conv_pool_workspace_bytes(s); cudaMalloc(&ws, wsb);
    cudaMemcpy(x, hx.data(), xn * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(w, hw.data(), wn * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), c.k * 4, cudaMemcpyHostToDevice);
    ConvPoolOperands ops{};
    ops.x = x; ops.x_stride[0] = int64_t(c.c) * c.h * c.w; ops.x_stride[1] = int64_t(c.h) * c.w; ops.x_stride[2] = c.w; ops.x_stride[3] = 1;
    ops.weight = w; ops.weight_stride[0] = c.c * 9; ops.weight_stride[1] = 9; ops.weight_stride[2] = 3; ops.weight_stride[3] = 1;
    ops.bias = b; ops.bias_stride = 1; ops.out = o; ops.workspace = ws;
    const char* why = wgmma_conv_pool_unsupported(s, dev);
    if (why) { printf("%s unsupported: %s\n", c.name, why); continue; }
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    std::vector<float> times;
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < 60; ++i) {
      cudaMemsetAsync(flush, i, flush_bytes);
      cudaEventRecord(e0);
      err = wgmma_conv_pool_launch(ops, s, dev, 0);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (i >= 10) times.push_back(ms * 1000.f);
    }
    err = err != cudaSuccess ? err : cudaDeviceSynchronize();
    std::sort(times.begin(), times.end());
    const WgmmaPlan p = with_tile(s, [&](auto t) { return make_plan<decltype(t)>(s); });
    const int blocks = std::min(p.tiles, sms);
    const double steps = double((p.tiles + blocks - 1) / blocks) * p.chunks;
    double check = -1;
    if (PROBE == 0) {  // sampled check against a double CPU reference
      std::vector<float> ho(on); cudaMemcpy(ho.data(), o, on * 4, cudaMemcpyDeviceToHost);
      double num = 0, den = 0; uint64_t r = 7;
      for (int t = 0; t < 300; ++t) {
        r = r * 6364136223846793005ull + 1; const size_t idx = (r >> 20) % on;
        const int ow = idx % s.out_width, oh = (idx / s.out_width) % s.out_height;
        const int k = (idx / (size_t(s.out_width) * s.out_height)) % c.k;
        const int n = idx / (size_t(s.out_width) * s.out_height * c.k);
        double best = -1e300;
        for (int dy = 0; dy < 2; ++dy) for (int dx = 0; dx < 2; ++dx) {
          double acc = hb[k];
          const int y = 2 * oh + dy, xx = 2 * ow + dx;
          for (int ci = 0; ci < c.c; ++ci) for (int rr = 0; rr < 3; ++rr) for (int q = 0; q < 3; ++q) {
            const int iy = y + rr - c.pad, ix = xx + q - c.pad;
            if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
            acc += double(hx[((size_t(n) * c.c + ci) * c.h + iy) * c.w + ix]) * hw[(size_t(k) * c.c + ci) * 9 + rr * 3 + q];
          }
          best = std::max(best, acc);
        }
        best = std::max(best, 0.0);
        num += (ho[idx] - best) * (ho[idx] - best); den += best * best;
      }
      check = std::sqrt(num / std::max(den, 1e-30));
    }
    printf("PROBE=%3d %-10s median %8.1f us  p10 %8.1f  steps/block %5.0f  us/step %.3f  relerr %.2e  %s\n", PROBE, c.name,
           times[times.size() / 2], times[times.size() / 10], steps, times[times.size() / 2] / steps, check, cudaGetErrorString(err));
    cudaFree(x); cudaFree(w); cudaFree(b); cudaFree(o); cudaFree(ws);
  }
  return 0;
}
