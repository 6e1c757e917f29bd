"""Reference model: Conv2d -> ReLU -> MaxPool2d in plain PyTorch ops.

This file defines the task. ModelNew (model_new.py) must compute the same
function with the same constructor arguments and state-dict keys.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size, stride=1,
                 padding=0, dilation=1, pool_stride=None, pool_padding=0, ceil_mode=False,
                 bias=True):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                              bias=bias)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(pool_kernel_size, pool_stride, pool_padding, ceil_mode=ceil_mode)

    def forward(self, x):
        return self.pool(self.relu(self.conv(x)))


batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3
pool_kernel_size = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_kernel_size]
