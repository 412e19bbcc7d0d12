"""A few calls of the installed package against PyTorch (scripts/wheel_smoke.sh runs it in a
fresh venv, outside the checkout)."""
import os

import torch
import torch.nn.functional as F

import myops
import myops.compile

assert "site-packages" in os.path.abspath(myops.__file__), myops.__file__
torch.manual_seed(0)
x, w, b = torch.randn(2, 4, 5, 5), torch.randn(4, 6, 4, 4), torch.randn(6)
torch.testing.assert_close(myops.conv_transpose2d(x, w, b, 2, 1), F.conv_transpose2d(x, w, b, 2, 1),
                           atol=1e-5, rtol=1e-5)
y = myops.conv_transpose2d_norm_act(x, w, b, 2, 1, norm="group_norm", num_groups=3, activation="silu")
torch.testing.assert_close(y, F.silu(F.group_norm(F.conv_transpose2d(x, w, b, 2, 1), 3)), atol=1e-5, rtol=1e-5)
block = torch.nn.Sequential(torch.nn.ConvTranspose2d(4, 6, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(6),
                            torch.nn.ReLU())
module = torch.export.export(block, (x,)).module()
assert myops.compile.fuse(module) == 1, "the exported ConvT -> BatchNorm -> ReLU chain not rewritten"
torch.testing.assert_close(module(x), block(x), atol=1e-5, rtol=1e-5)
print(f"myops {myops.__version__} (torch {torch.__version__}) from {os.path.dirname(myops.__file__)}: smoke test ok")
