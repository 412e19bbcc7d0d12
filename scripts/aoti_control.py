"""Control for the AOTInductor test: a plain model without myops ops, exported, packaged, loaded
(on the device named by the first argument, default cpu)."""
import sys
import tempfile

import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to(device).eval()
x = torch.randn(2, 8, device=device)
ep = torch.export.export(model, (x,))
with tempfile.TemporaryDirectory() as d:
    path = torch._inductor.aoti_compile_and_package(ep, package_path=f"{d}/m.pt2")
    loaded = torch._inductor.aoti_load_package(path)
    torch.testing.assert_close(loaded(x), model(x))
print("plain AOTI OK", torch.__version__, file=sys.stderr)
