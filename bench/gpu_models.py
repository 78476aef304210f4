"""Real models on one GPU, as unmodified single-GPU scripts (bench/run-gpu-models.sh
runs each plain and under the shim, alternately):

  gpt       a GPT-style character model (6 layers, 6 heads, 384 wide, context
            256: 10.7 M parameters) on synthetic text, AdamW; --amp: autocast
            bfloat16 (as the usual character-level GPT scripts do)
  resnet50  torchvision's ResNet-50 on synthetic 224x224 images, SGD with
            momentum; --amp: autocast float16 + GradScaler

Prints "samples/s N" over the timed steps (after warm-up; the clock starts
and stops on a synchronized device) and the step time.

Usage: python3 gpu_models.py gpt|resnet50 [--amp] [--batch B] [--steps S]"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("model", choices=["gpt", "resnet50"])
ap.add_argument("--amp", action="store_true")
ap.add_argument("--batch", type=int, default=0)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=8)
args = ap.parse_args()
torch.manual_seed(0)
dev = "cuda"


class Block(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=65, ctx=256, d=384, layers=6, heads=6):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[Block(d, heads, ctx) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.tok.weight = self.head.weight  # tied, as in the usual GPT scripts

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


if args.model == "gpt":
    batch, ctx = args.batch or 64, 256
    model = GPT(ctx=ctx).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    text = torch.randint(0, 65, (1 << 20,), generator=torch.Generator().manual_seed(1))
    amp_dtype, scaler = torch.bfloat16, None

    def get_batch(i):
        g = torch.Generator().manual_seed(i)
        ix = torch.randint(len(text) - ctx - 1, (batch,), generator=g)
        x = torch.stack([text[j:j + ctx] for j in ix.tolist()])
        y = torch.stack([text[j + 1:j + ctx + 1] for j in ix.tolist()])
        return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    def loss_of(x, y):
        return F.cross_entropy(model(x).view(-1, 65), y.view(-1))
else:
    import torchvision

    batch = args.batch or 64
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    amp_dtype = torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
    images = torch.randn(batch, 3, 224, 224, device=dev)
    labels = torch.randint(0, 1000, (batch,), device=dev)

    def get_batch(i):
        return images, labels

    def loss_of(x, y):
        return F.cross_entropy(model(x), y)

nparams = sum(p.numel() for p in model.parameters())
times = []
for i in range(args.warmup + args.steps):
    if i == args.warmup:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    x, y = get_batch(i)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=amp_dtype, enabled=args.amp):
        loss = loss_of(x, y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
assert math.isfinite(loss.item())
print("%s%s: %.1f M parameters, batch %d: step %.2f ms, samples/s %.1f, loss %.4f"
      % (args.model, " amp" if args.amp else "", nparams / 1e6, batch, 1e3 * dt / args.steps,
         batch * args.steps / dt, loss.item()), flush=True)
