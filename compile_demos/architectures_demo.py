"""Published architectures (architectures.py), unmodified: chains found / rewritten by
myops.compile, and the time of a forward (training mode, no gradient: a GAN's generator step for
the discriminator) and of a training step against plain torch.compile."""
import torch

import architectures as arch
from demo_common import compare, compare_training, parse_args

# name -> (model, input shape on CUDA, on the CPU[, myops.compile.enable options])
ARCHITECTURES = {
    "dcgan": (lambda: arch.DCGANGenerator(), (256, 100, 1, 1), (4, 100, 1, 1)),
    "pix2pix": (lambda: arch.UnetGenerator(3, 3, num_downs=7), (16, 3, 128, 128), (1, 3, 128, 128)),
    "cyclegan": (lambda: arch.ResnetGenerator(3, 3), (4, 3, 256, 256), (1, 3, 64, 64)),
    "decoder": (lambda: arch.UpDecoder((512, 256, 128)), (8, 512, 32, 32), (1, 512, 8, 8)),
    # its ConvTranspose1d layers are standalone convs: routed with conv_transpose2d=True
    "vocoder": (lambda: arch.VocoderUpsampler(), (16, 80, 256), (1, 80, 32), dict(conv_transpose2d=True)),
}


def main():
    args = parse_args(__doc__, extra=lambda p: (
        p.add_argument("--arch", default="all", choices=["all", *ARCHITECTURES]),
        p.add_argument("--skip-training", action="store_true")))
    dtype = getattr(torch, args.dtype)
    for name in ARCHITECTURES if args.arch == "all" else [args.arch]:
        make, cuda_shape, cpu_shape, *options = ARCHITECTURES[name]
        options = options[0] if options else None
        torch.manual_seed(0)
        model = make().to(args.device, dtype).train()
        x = torch.randn(cuda_shape if args.device == "cuda" else cpu_shape, device=args.device, dtype=dtype)
        print(f"\n== {name}: input {tuple(x.shape)} {args.dtype} on {args.device}, training mode")
        compare(model, x, args.device, args.reps, measure=args.measure, profile=args.profile, options=options)
        if not args.skip_training:
            compare_training(model, x, args.device, args.reps, measure=args.measure, options=options)


if __name__ == "__main__":
    main()
