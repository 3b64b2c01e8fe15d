#!/usr/bin/python3
"""Reference for bench/train: the same ViT as shardgrid's models/vit.c
(patch embedding: a p x p stride-p convolution of the inputs plus 2 grid
channels to width C, plus a learned (C, H/p, W/p) position embedding;
`depth` pre-LN blocks x + proj(mhsa(ln1(x))), x + fc2(gelu(fc1(ln2(x))))
with MLP ratio 4, tanh GELU, LayerNorm eps 1e-5, biases everywhere,
softmax scale 1/sqrt(C/heads); a final LayerNorm and the un-patchify, a
transposed convolution C -> 1 with kernel = stride = p) and the same step
(AdamW, relative-L2 loss) in PyTorch on the CPU, timed.
Attention is F.scaled_dot_product_attention (PyTorch's fused CPU kernel).
For the benchmark only; the project never uses it.

usage: vit_torch.py --n 64 --batch 4 --history 10 --width 64 --heads 4
                    --depth 4 --patch 4 --steps 30 --threads 1 [--compile 1]
Prints one JSON line: {"impl": "pytorch", "model": "vit", "samples_per_s": ...}."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_step


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c, eps=1e-5), nn.LayerNorm(c, eps=1e-5)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, c // self.heads) \
            .permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class ViT(nn.Module):
    def __init__(self, cin, n, width, heads, depth, patch):
        super().__init__()
        self.embed = nn.Conv2d(cin + 2, width, patch, stride=patch)
        self.pos = nn.Parameter(0.02 * torch.randn(1, width, n // patch, n // patch))
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.ConvTranspose2d(width, 1, patch, stride=patch)

    def forward(self, x):
        b, _, h, w = x.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=x.device) / h,
                                torch.arange(w, device=x.device) / w, indexing="ij")
        grid = torch.stack([gx, gy]).expand(b, 2, h, w)
        x = self.embed(torch.cat([x, grid], 1)) + self.pos
        _, c, hp, wp = x.shape
        x = x.flatten(2).transpose(1, 2)  # (B, T, C)
        for blk in self.blocks:
            x = blk(x)
        x = self.ln(x).transpose(1, 2).reshape(b, c, hp, wp)
        return self.head(x)


def main():
    a = torch_step.parse([("heads", 4), ("depth", 4), ("patch", 4), ("compile", 0)])
    model = ViT(a.history, a.n, a.width, a.heads, a.depth, a.patch)
    torch_step.time_steps(model, a, {"model": "vit", "heads": a.heads, "depth": a.depth,
                                     "patch": a.patch, "compile": a.compile})


if __name__ == "__main__":
    main()
