"""The seed workloads' conv layers: name -> (input shape, C_out, kernel, conv kwargs)."""
LAYERS = {
    "L2_19": ((128, 64, 256, 256), 64, (3, 3), {}),
    "L2_11": ((512, 64, 32, 32), 128, (5, 5), dict(padding=1)),
    "L1_75": ((16, 32, 128, 256), 64, (3, 5), dict(stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4)),
    "L1_57": ((8, 64, 1024, 1024), 64, (3, 3), {}),
    "L1_65": ((8, 64, 512, 512), 64, (3, 7), {}),
    # the compile demos' layers (compile_demos/vae_up_block.py, dcgan_generator.py)
    "VAE_up": ((16, 128, 64, 64), 128, (4, 4), dict(stride=2, padding=1)),
    "VAE_refine": ((16, 128, 128, 128), 128, (3, 3), dict(padding=1)),
    "DCGAN_1": ((256, 100, 1, 1), 512, (4, 4), {}),
    "DCGAN_2": ((256, 512, 4, 4), 256, (4, 4), dict(stride=2, padding=1)),
    "DCGAN_3": ((256, 256, 8, 8), 128, (4, 4), dict(stride=2, padding=1)),
    "DCGAN_4": ((256, 128, 16, 16), 64, (4, 4), dict(stride=2, padding=1)),
    # the bench's decoder_gn_silu up-sampler (diffusers' Upsample2D with use_conv_transpose)
    "decoder_up": ((8, 512, 32, 32), 256, (4, 4), dict(stride=2, padding=1)),
}
