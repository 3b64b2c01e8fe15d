#!/usr/bin/python3
"""Reference for bench/train: the same FNO-2D (lifting with the grid,
L spectral layers of width W keeping M x M modes, projection to 128 then 1)
and the same step (AdamW, relative-L2 loss) in PyTorch on the CPU or
(--device cuda) the GPU, eager or (--compile 1) torch.compile, timed.
For the benchmark only (Debian's python3-torch); the project never uses it.

usage: fno_torch.py --n 64 --batch 8 --history 10 --width 32 --modes 12
                    --layers 4 --steps 30 --threads 1
Prints one JSON line: {"impl": "pytorch", "samples_per_s": ...}."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_step


class Spectral(nn.Module):
    def __init__(self, c, m):
        super().__init__()
        s = 1.0 / (c * c)
        self.m = m
        self.w1 = nn.Parameter(s * torch.rand(c, c, m, m, dtype=torch.cfloat))
        self.w2 = nn.Parameter(s * torch.rand(c, c, m, m, dtype=torch.cfloat))

    def forward(self, x):
        b, c, h, w = x.shape
        xf = torch.fft.rfft2(x)
        out = torch.zeros(b, c, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        m = self.m
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], self.w1)
        out[:, :, -m:, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -m:, :m], self.w2)
        return torch.fft.irfft2(out, s=(h, w))


class FNO(nn.Module):
    def __init__(self, cin, width, modes, layers):
        super().__init__()
        self.lift = nn.Conv2d(cin + 2, width, 1)
        self.spec = nn.ModuleList([Spectral(width, modes) for _ in range(layers)])
        self.lin = nn.ModuleList([nn.Conv2d(width, width, 1) for _ in range(layers)])
        self.p1 = nn.Conv2d(width, 128, 1)
        self.p2 = nn.Conv2d(128, 1, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=x.device) / h,
                                torch.arange(w, device=x.device) / w, indexing="ij")
        grid = torch.stack([gx, gy]).expand(b, 2, h, w)
        x = self.lift(torch.cat([x, grid], 1))
        for i, (s, l) in enumerate(zip(self.spec, self.lin)):
            x = s(x) + l(x)
            if i + 1 < len(self.spec):
                x = F.gelu(x)
        return self.p2(F.gelu(self.p1(x)))


def main():
    a = torch_step.parse([("modes", 12), ("layers", 4)])
    torch_step.time_steps(FNO(a.history, a.width, a.modes, a.layers), a, {"model": "fno", "modes": a.modes})


if __name__ == "__main__":
    main()
