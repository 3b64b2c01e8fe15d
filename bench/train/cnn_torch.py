#!/usr/bin/python3
"""Reference for bench/train: the same ResNet-style CNN as shardgrid's
models/cnn.c (lifting 3x3 conv from the inputs plus 2 grid channels to
width W, B residual blocks conv3x3-GroupNorm-GELU-conv3x3 + skip, all with
periodic (circular) padding, projection 1x1 to 128, GELU, 1x1 to 1) and the
same step (AdamW, relative-L2 loss) in PyTorch on the CPU or
(--device cuda) the GPU, eager or (--compile 1) torch.compile, timed.
For the benchmark only (Debian's python3-torch); the project never uses it.

usage: cnn_torch.py --n 64 --batch 8 --history 10 --width 32 --blocks 4
                    --groups 4 --steps 30 --threads 1
Prints one JSON line: {"impl": "pytorch", "model": "cnn", "samples_per_s": ...}."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_step


def conv(cin, cout):
    return nn.Conv2d(cin, cout, 3, padding=1, padding_mode="circular")


class Block(nn.Module):
    def __init__(self, w, groups):
        super().__init__()
        self.c1 = conv(w, w)
        self.norm = nn.GroupNorm(groups, w)
        self.c2 = conv(w, w)

    def forward(self, x):
        return x + self.c2(F.gelu(self.norm(self.c1(x)), approximate="tanh"))


class CNN(nn.Module):
    def __init__(self, cin, width, blocks, groups, proj=128):
        super().__init__()
        self.lift = conv(cin + 2, width)
        self.blocks = nn.ModuleList([Block(width, groups) for _ in range(blocks)])
        self.p1 = nn.Conv2d(width, proj, 1)
        self.p2 = nn.Conv2d(proj, 1, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=x.device) / h,
                                torch.arange(w, device=x.device) / w, indexing="ij")
        grid = torch.stack([gx, gy]).expand(b, 2, h, w)
        x = self.lift(torch.cat([x, grid], 1))
        for blk in self.blocks:
            x = blk(x)
        return self.p2(F.gelu(self.p1(x), approximate="tanh"))


def main():
    a = torch_step.parse([("blocks", 4), ("groups", 4)])
    torch_step.time_steps(CNN(a.history, a.width, a.blocks, a.groups), a, {"model": "cnn", "blocks": a.blocks})


if __name__ == "__main__":
    main()
