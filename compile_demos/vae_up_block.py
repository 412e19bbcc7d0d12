"""Demo 2: a VAE-decoder style up-block with a residual:
ConvTranspose2d(k4, s2, p1) -> GELU(tanh) -> GroupNorm(32), plus a refining
ConvTranspose2d(k3, p1) -> GELU -> GroupNorm(32) added back."""
import torch
from torch import nn

from demo_common import compare, parse_args


class UpBlock(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_out, 4, stride=2, padding=1)
        self.act = nn.GELU(approximate="tanh")
        self.norm = nn.GroupNorm(32, c_out)
        self.refine = nn.Sequential(nn.ConvTranspose2d(c_out, c_out, 3, padding=1), nn.GELU(), nn.GroupNorm(32, c_out))

    def forward(self, x):
        h = self.norm(self.act(self.up(x)))
        return h + self.refine(h)


def main():
    args = parse_args(__doc__)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    n, hw = (16, 64) if args.device == "cuda" else (2, 16)
    model = UpBlock(128, 128).to(args.device, dtype)
    x = torch.randn(n, 128, hw, hw, device=args.device, dtype=dtype)
    print(f"VAE up-block, input {tuple(x.shape)} {args.dtype} on {args.device}")
    compare(model, x, args.device, args.reps, measure=args.measure, profile=args.profile)


if __name__ == "__main__":
    main()
