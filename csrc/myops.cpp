// Every myops schema, in one place. Kernels are registered per dispatch key in csrc/cpu and
// csrc/cuda; fake (meta) impls and autograd are registered from Python (myops/ops.py).
#include <Python.h>
#include <torch/library.h>

extern "C" {
// Importing myops._C only has to run the static registrations below: an empty module suffices.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(myops, m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "conv_transpose2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, "
      "SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation) -> Tensor",
      tags);
  m.def("gelu(Tensor self, *, str approximate=\"none\") -> Tensor", tags);
  m.def(
      "group_norm(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps) -> Tensor",
      tags);
  m.def(
      "conv_transpose2d_gelu_group_norm(Tensor input, Tensor weight, Tensor? bias, "
      "SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, "
      "SymInt[2] dilation, str approximate, int num_groups, Tensor? gn_weight, Tensor? gn_bias, "
      "float eps) -> Tensor",
      tags);
}
