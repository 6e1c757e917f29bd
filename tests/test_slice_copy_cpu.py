"""The slice-planar copy's band order (kernels/conv_pool_layout.cuh, to_slices_band_slot).

The copy of a transposed NCHW view (ToSlices::columns_first) takes a plane's slots by bands of
kBand columns, row by row within a band, so that a warp's loads and stores are whole sectors.
A host program built here with nvcc (no GPU needed) runs the header's own function over every
plane of 1-40 rows and 1-70 slots a row, for bands of 1, 2, 4 and 8 columns and both index
types, and checks that each position lands on a slot of the plane, that every slot is visited
exactly once, and that consecutive positions of a band walk its rows left to right, then
down: a warp's 32 positions of a whole band are 32 / band rows of band consecutive columns.
"""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <vector>

#include "conv_pool_layout.cuh"

template <class I>
int check(int height, int pitch, int band) {
  std::vector<int> seen(size_t(height) * pitch, 0);
  int last_h = -1, last_col = -1, last_first = -band;
  for (int64_t within = 0; within < int64_t(height) * pitch; ++within) {
    int h = -1, col = -1;
    to_slices_band_slot<I>(I(within), height, pitch, band, h, col);
    if (h < 0 || h >= height || col < 0 || col >= pitch) {
      std::printf("height %d pitch %d band %d: position %lld -> (%d, %d) off the plane\n",
                  height, pitch, band, (long long)within, h, col);
      return 1;
    }
    const int first = col / band * band;
    const int end = first + band < pitch ? first + band : pitch;  // past the band's columns
    const bool next_in_row = h == last_h && col == last_col + 1;
    const bool next_row = h == last_h + 1 && col == first && last_col == end - 1;
    const bool new_band = h == 0 && col == first && first == last_first + band &&
                          (within == 0 || last_h == height - 1);
    if (first == last_first ? !(next_in_row || next_row) : !new_band) {
      std::printf("height %d pitch %d band %d: position %lld -> (%d, %d) after (%d, %d)\n",
                  height, pitch, band, (long long)within, h, col, last_h, last_col);
      return 1;
    }
    ++seen[size_t(h) * pitch + col];
    last_h = h, last_col = col, last_first = first;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) {
      std::printf("height %d pitch %d band %d: slot %zu visited %d times\n", height, pitch,
                  band, i, seen[i]);
      return 1;
    }
  return 0;
}

int main() {
  int planes = 0;
  for (int band : {1, 2, 4, 8})
    for (int height = 1; height <= 40; ++height)
      for (int pitch = 1; pitch <= 70; ++pitch) {
        if (check<uint32_t>(height, pitch, band) || check<int64_t>(height, pitch, band))
          return 1;
        ++planes;
      }
  std::printf("%d planes, every slot once, bands row by row\n", planes);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_band_order_visits_every_slot_once_row_by_row(tmp_path):
    source = tmp_path / "band_order.cu"
    source.write_text(PROGRAM)
    binary = tmp_path / "band_order"
    subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                    "-I", str(REPO_ROOT / "kernels"), "-o", str(binary), str(source)],
                   check=True, capture_output=True, text=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    print(run.stdout)
    assert run.returncode == 0, run.stdout
    assert "11200 planes" in run.stdout
