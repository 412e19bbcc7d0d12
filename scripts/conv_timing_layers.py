"""The seed workloads' conv layers: name -> (input shape, C_out, kernel, conv kwargs)."""
LAYERS = {
    "L2_19": ((128, 64, 256, 256), 64, (3, 3), {}),
    "L2_11": ((512, 64, 32, 32), 128, (5, 5), dict(padding=1)),
    "L1_75": ((16, 32, 128, 256), 64, (3, 5), dict(stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4)),
    "L1_57": ((8, 64, 1024, 1024), 64, (3, 3), {}),
    "L1_65": ((8, 64, 512, 512), 64, (3, 7), {}),
}
