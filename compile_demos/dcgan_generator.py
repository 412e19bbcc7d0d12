"""Demo 3: a small DCGAN-like generator: a latent vector up-sampled by ConvTranspose2d -> GELU ->
GroupNorm stages to a 64x64 image (Tanh at the end)."""
import torch
from torch import nn

from demo_common import compare, parse_args


def stage(c_in, c_out, **conv):
    return nn.Sequential(nn.ConvTranspose2d(c_in, c_out, 4, **conv), nn.GELU(), nn.GroupNorm(8, c_out))


class Generator(nn.Module):
    def __init__(self, z=100, width=64):
        super().__init__()
        self.net = nn.Sequential(
            stage(z, width * 8, stride=1, padding=0, bias=False),      # 1 -> 4
            stage(width * 8, width * 4, stride=2, padding=1, bias=False),  # 4 -> 8
            stage(width * 4, width * 2, stride=2, padding=1, bias=False),  # 8 -> 16
            stage(width * 2, width, stride=2, padding=1, bias=False),      # 16 -> 32
            nn.ConvTranspose2d(width, 3, 4, stride=2, padding=1), nn.Tanh())  # 32 -> 64

    def forward(self, z):
        return self.net(z)


def main():
    args = parse_args(__doc__)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    n = 256 if args.device == "cuda" else 4
    model = Generator().to(args.device, dtype)
    z = torch.randn(n, 100, 1, 1, device=args.device, dtype=dtype)
    print(f"DCGAN generator, latent {tuple(z.shape)} {args.dtype} on {args.device}")
    compare(model, z, args.device, args.reps, measure=args.measure, profile=args.profile)


if __name__ == "__main__":
    main()
