"""Published generator and decoder architectures, written as their authors write them (random
init, nothing downloaded), for the compile demos and tests: the chains myops.compile must find
in unmodified models.

- DCGAN generator (pytorch/examples, dcgan/main.py): ConvT(bias=False) -> BatchNorm2d -> ReLU(True).
- pix2pix U-Net generator (junyanz/pytorch-CycleGAN-and-pix2pix, UnetSkipConnectionBlock):
  ReLU(True) -> ConvT(k4 s2 p1, bias=False) -> BatchNorm2d, then torch.cat with the skip.
- CycleGAN ResNet generator (same repository, ResnetGenerator): ConvT(k3 s2 p1 op1) ->
  InstanceNorm2d -> ReLU(True).
- A decoder stage in diffusers' style: Upsample2D(use_conv_transpose=True), a ConvT(k4 s2 p1),
  then ResnetBlock2D: GroupNorm(eps=1e-6) -> SiLU -> Conv2d, the ConvT output also feeding the
  residual add.
- A SAGAN-style generator block: spectral-normed ConvT (the weight is computed in the forward) ->
  BatchNorm2d -> ReLU.
- A GAN block in functional style: F.conv_transpose2d -> F.batch_norm(running buffers) ->
  F.leaky_relu(0.2, inplace=True).
- A HiFi-GAN-style vocoder upsampler: LeakyReLU(0.1) -> weight_norm(ConvTranspose1d) per stage.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm


class DCGANGenerator(nn.Module):
    def __init__(self, nz=100, ngf=64, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class UnetSkipConnectionBlock(nn.Module):
    def __init__(self, outer_nc, inner_nc, input_nc=None, submodule=None, outermost=False, innermost=False):
        super().__init__()
        self.outermost = outermost
        input_nc = outer_nc if input_nc is None else input_nc
        downconv = nn.Conv2d(input_nc, inner_nc, kernel_size=4, stride=2, padding=1, bias=False)
        downrelu, downnorm = nn.LeakyReLU(0.2, True), nn.BatchNorm2d(inner_nc)
        uprelu, upnorm = nn.ReLU(True), nn.BatchNorm2d(outer_nc)
        if outermost:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1)
            model = [downconv, submodule, uprelu, upconv, nn.Tanh()]
        elif innermost:
            upconv = nn.ConvTranspose2d(inner_nc, outer_nc, kernel_size=4, stride=2, padding=1, bias=False)
            model = [downrelu, downconv, uprelu, upconv, upnorm]
        else:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1, bias=False)
            model = [downrelu, downconv, downnorm, submodule, uprelu, upconv, upnorm]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        return self.model(x) if self.outermost else torch.cat([x, self.model(x)], 1)


class UnetGenerator(nn.Module):
    def __init__(self, input_nc=3, output_nc=3, num_downs=8, ngf=64):
        super().__init__()
        block = UnetSkipConnectionBlock(ngf * 8, ngf * 8, innermost=True)
        for _ in range(num_downs - 5):
            block = UnetSkipConnectionBlock(ngf * 8, ngf * 8, submodule=block)
        block = UnetSkipConnectionBlock(ngf * 4, ngf * 8, submodule=block)
        block = UnetSkipConnectionBlock(ngf * 2, ngf * 4, submodule=block)
        block = UnetSkipConnectionBlock(ngf, ngf * 2, submodule=block)
        self.model = UnetSkipConnectionBlock(output_nc, ngf, input_nc=input_nc, submodule=block, outermost=True)

    def forward(self, x):
        return self.model(x)


class ResnetBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=True), nn.InstanceNorm2d(dim), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=True), nn.InstanceNorm2d(dim))

    def forward(self, x):
        return x + self.conv_block(x)


class ResnetGenerator(nn.Module):
    def __init__(self, input_nc=3, output_nc=3, ngf=64, n_blocks=9):
        super().__init__()
        model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, 7, bias=True), nn.InstanceNorm2d(ngf), nn.ReLU(True)]
        for i in range(2):
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, 3, stride=2, padding=1, bias=True),
                      nn.InstanceNorm2d(ngf * mult * 2), nn.ReLU(True)]
        model += [ResnetBlock(ngf * 4) for _ in range(n_blocks)]
        for i in range(2):
            mult = 2 ** (2 - i)
            model += [nn.ConvTranspose2d(ngf * mult, ngf * mult // 2, 3, stride=2, padding=1, output_padding=1,
                                         bias=True), nn.InstanceNorm2d(ngf * mult // 2), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, 7), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        return self.model(x)


class ResnetBlock2D(nn.Module):
    def __init__(self, channels, groups=32, eps=1e-6):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels, eps=eps)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels, eps=eps)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.nonlinearity = nn.SiLU()

    def forward(self, input_tensor):
        hidden = self.conv1(self.nonlinearity(self.norm1(input_tensor)))
        hidden = self.conv2(self.nonlinearity(self.norm2(hidden)))
        return input_tensor + hidden


class UpDecoder(nn.Module):
    """Stages of Upsample2D(use_conv_transpose=True) then a ResnetBlock2D."""

    def __init__(self, channels=(256, 128, 64), groups=32):
        super().__init__()
        self.stages = nn.ModuleList(
            nn.ModuleDict(dict(upsample=nn.ConvTranspose2d(c_in, c_out, 4, 2, 1), resnet=ResnetBlock2D(c_out, groups)))
            for c_in, c_out in zip(channels[:-1], channels[1:]))

    def forward(self, x):
        for stage in self.stages:
            x = stage["resnet"](stage["upsample"](x))
        return x


class SAGANBlock(nn.Module):
    def __init__(self, c_in=64, c_out=32):
        super().__init__()
        self.conv = spectral_norm(nn.ConvTranspose2d(c_in, c_out, 4, 2, 1))
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class FunctionalGANBlock(nn.Module):
    def __init__(self, c_in=64, c_out=32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c_in, c_out, 4, 4) * 0.05)
        self.gamma, self.beta = nn.Parameter(torch.ones(c_out)), nn.Parameter(torch.zeros(c_out))
        self.register_buffer("running_mean", torch.zeros(c_out))
        self.register_buffer("running_var", torch.ones(c_out))

    def forward(self, x):
        y = F.conv_transpose2d(x, self.weight, None, 2, 1)
        y = F.batch_norm(y, self.running_mean, self.running_var, self.gamma, self.beta, self.training, 0.1, 1e-5)
        return F.leaky_relu(y, 0.2, inplace=True)


class VocoderUpsampler(nn.Module):
    """HiFi-GAN's generator up to its residual blocks: a Conv1d from mel channels, then per rate
    LeakyReLU(0.1) and a weight-normed ConvTranspose1d(k = 2 u, stride u) halving the channels."""

    def __init__(self, mels=80, channels=512, rates=(8, 8, 2, 2)):
        super().__init__()
        self.conv_pre = weight_norm(nn.Conv1d(mels, channels, 7, 1, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(nn.ConvTranspose1d(channels // 2 ** i, channels // 2 ** (i + 1), 2 * u, u, padding=u // 2))
            for i, u in enumerate(rates))

    def forward(self, x):
        x = self.conv_pre(x)
        for up in self.ups:
            x = up(F.leaky_relu(x, 0.1))
        return x
