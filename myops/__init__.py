"""myops: transposed convolution and its usual epilogues as fused PyTorch custom ops.

Importing the package loads the compiled extension (which registers the ``torch.ops.myops.*``
schemas and their CPU / CUDA kernels) and then registers the fake impls and autograd formulas.
"""
import torch  # noqa: F401  (libtorch must be loaded before the extension)

from ._version import __version__
from ._check_build import check_build

check_build()  # before loading the extension: a mismatched torch fails there with an obscure symbol error
from . import _C  # noqa: F401,E402  (static TORCH_LIBRARY registrations)
from . import _fake, _autograd  # noqa: F401  (register_fake / register_autograd side effects)
from . import backends, nn  # noqa: F401  (runtime options: myops.backends; drop-in modules: myops.nn)
from .norm_act import conv_transpose1d_norm_act, conv_transpose2d_act_stats, conv_transpose2d_norm_act
from .ops import (conv_transpose1d, conv_transpose2d, explain, conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm,
                  conv_transpose2d_gelu_group_norm, conv_transpose2d_gelu_group_stats, gelu, group_norm,
                  group_norm_with_stats)

__all__ = ["conv_transpose1d", "conv_transpose2d", "explain", "gelu", "group_norm", "conv_transpose2d_gelu_group_norm",
           "conv_transpose2d_gelu_group_stats", "group_norm_with_stats",
           "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm", "conv_transpose2d_norm_act",
           "conv_transpose2d_act_stats", "conv_transpose1d_norm_act"]
