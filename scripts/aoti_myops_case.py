"""The AOTInductor test's child script (tests/test_compile.py), runnable alone for a debugger.

    python scripts/aoti_myops_case.py package PATH [DEVICE]   exports and packages the model
    python scripts/aoti_myops_case.py load PATH [DEVICE]      loads it in this (fresh) process

The model calls the seed ops directly and the family through its drop-in modules (a BatchNorm in
eval mode -> ReLU, a GroupNorm -> SiLU); both phases build it from the same seed, and the loaded
package must equal eager PyTorch's own modules."""
import sys

import torch
import torch.nn as nn

import myops


class CallsSeedOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6, 3, 3))
        self.gw = nn.Parameter(torch.randn(6))

    def forward(self, x):
        y = torch.ops.myops.conv_transpose2d_gelu_group_norm(
            x, self.w, None, [2, 2], [1, 1], [1, 1], 1, [1, 1], "tanh", 3, self.gw, None, 1e-5)
        return torch.ops.myops.gelu(y) + torch.ops.myops.group_norm(y, 2, None, None, 1e-5)


def models(device):
    """(the model with myops, the same computation in PyTorch's own modules, an input)."""
    torch.manual_seed(0)
    seed = CallsSeedOps()
    bn_chain = [nn.ConvTranspose2d(6, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU()]
    gn_chain = [nn.ConvTranspose2d(8, 8, 3, 1, 1), nn.GroupNorm(4, 8, eps=1e-6), nn.SiLU()]
    with torch.no_grad():
        bn_chain[1].running_mean.uniform_(-1, 1)
        bn_chain[1].running_var.uniform_(0.5, 2)
    fused = nn.Sequential(seed, myops.nn.ConvTranspose2dNormAct.from_modules(*bn_chain),
                          myops.nn.ConvTranspose2dNormAct.from_modules(*gn_chain))

    def reference(x):  # the seed ops' own reference is their eager call (tests cover those)
        return nn.Sequential(*bn_chain, *gn_chain)(seed(x))
    return fused.to(device).eval(), reference, torch.randn(2, 4, 5, 5, device=device)


def main(phase, path, device="cpu"):
    torch.backends.cudnn.allow_tf32 = False  # exact float32 convs on both sides (ours follow this flag)
    model, reference, x = models(device)
    with torch.no_grad():
        expected = reference(x)
        if phase == "package":
            ep = torch.export.export(model, (x,))
            targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
            assert "myops.conv_transpose2d_act_stats.default" in targets, sorted(targets)
            torch.testing.assert_close(ep.module()(x), expected, atol=1e-4, rtol=1e-4)
            torch._inductor.aoti_compile_and_package(ep, package_path=path)
        else:
            loaded = torch._inductor.aoti_load_package(path)
            torch.testing.assert_close(loaded(x), expected, atol=1e-4, rtol=1e-4)
    print(f"AOTI {phase} OK on {device}")


if __name__ == "__main__":
    main(*sys.argv[1:])
