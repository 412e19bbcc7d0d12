"""The AOTInductor test's child script (tests/test_compile.py), runnable alone for a debugger."""

import sys, torch, torch.nn as nn
import myops

class CallsMyops(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6, 3, 3))
        self.gw = nn.Parameter(torch.randn(6))

    def forward(self, x):
        y = torch.ops.myops.conv_transpose2d_gelu_group_norm(
            x, self.w, None, [2, 2], [1, 1], [1, 1], 1, [1, 1], "tanh", 3, self.gw, None, 1e-5)
        return torch.ops.myops.gelu(y) + torch.ops.myops.group_norm(y, 2, None, None, 1e-5)

model = CallsMyops().eval()
x = torch.randn(2, 4, 5, 5)
ep = torch.export.export(model, (x,))
torch.testing.assert_close(ep.module()(x), model(x))
path = torch._inductor.aoti_compile_and_package(ep, package_path=(sys.argv[1] if len(sys.argv) > 1 else "/tmp/aoti_myops.pt2"))
loaded = torch._inductor.aoti_load_package(path)
with torch.no_grad():
    torch.testing.assert_close(loaded(x), model(x), atol=1e-5, rtol=1e-5)
print("AOTI OK")
