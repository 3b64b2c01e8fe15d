#!/usr/bin/python3
"""Reference for bench/train: the same U-Net as shardgrid's models/unet.c
(grid channels appended; L levels of width W << l; each level's block twice
conv3x3 (circular padding) - GroupNorm - GELU (tanh); the encoder average-
pools 2x2 before levels 1..L-1; the decoder up-samples bilinearly
(align_corners=False, as sg_ag_upsample), concatenates the skip [up, skip]
and runs a block of width W << l; a 1x1 linear to 1 channel) and the same
step (AdamW, relative-L2 loss) in PyTorch on the CPU, timed.
For the benchmark only; the project never uses it.

usage: unet_torch.py --n 64 --batch 8 --history 10 --width 16 --levels 3
                     --groups 4 --steps 30 --threads 1
Prints one JSON line: {"impl": "pytorch", "model": "unet", "samples_per_s": ...}."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_step


def conv(cin, cout):
    return nn.Conv2d(cin, cout, 3, padding=1, padding_mode="circular")


class Block(nn.Module):
    def __init__(self, cin, w, groups):
        super().__init__()
        self.c1, self.n1 = conv(cin, w), nn.GroupNorm(groups, w)
        self.c2, self.n2 = conv(w, w), nn.GroupNorm(groups, w)

    def forward(self, x):
        x = F.gelu(self.n1(self.c1(x)), approximate="tanh")
        return F.gelu(self.n2(self.c2(x)), approximate="tanh")


class UNet(nn.Module):
    def __init__(self, cin, width, levels, groups):
        super().__init__()
        c, self.enc = cin + 2, nn.ModuleList()
        for l in range(levels):
            self.enc.append(Block(c, width << l, groups))
            c = width << l
        self.dec = nn.ModuleList([Block((width << (l + 1)) + (width << l), width << l, groups)
                                  for l in range(levels - 2, -1, -1)])
        self.out = nn.Conv2d(width, 1, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=x.device) / h,
                                torch.arange(w, device=x.device) / w, indexing="ij")
        x = torch.cat([x, torch.stack([gx, gy]).expand(b, 2, h, w)], 1)
        skips = []
        for l, blk in enumerate(self.enc):
            if l > 0:
                x = F.avg_pool2d(x, 2)
            x = blk(x)
            skips.append(x)
        skips.pop()
        for blk in self.dec:
            up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = blk(torch.cat([up, skips.pop()], 1))
        return self.out(x)


def main():
    a = torch_step.parse([("levels", 3), ("groups", 4)])
    torch_step.time_steps(UNet(a.history, a.width, a.levels, a.groups), a,
                          {"model": "unet", "levels": a.levels})


if __name__ == "__main__":
    main()
