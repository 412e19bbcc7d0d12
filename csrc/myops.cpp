// Every myops schema, in one place. Kernels are registered per dispatch key in csrc/cpu and
// csrc/cuda, their Autograd kernel in autograd_entry.cpp; fake (meta) impls and autograd formulas
// are registered from Python (myops/_fake.py, myops/_autograd.py).
#include <Python.h>
#include <torch/library.h>

#include <cstring>

#include "autograd_entry.h"
#include "common/options.h"

namespace {

// index of option `name`, or -1 with a Python KeyError set
int option_index(const char* name) {
  for (int i = 0; myops::option_name(i) != nullptr; ++i)
    if (std::strcmp(myops::option_name(i), name) == 0) return i;
  PyErr_Format(PyExc_KeyError, "myops.backends: no option '%s'", name);
  return -1;
}

PyObject* option_names(PyObject*, PyObject*) {
  PyObject* names = PyList_New(0);
  for (int i = 0; names != nullptr && myops::option_name(i) != nullptr; ++i) {
    PyObject* name = PyUnicode_FromString(myops::option_name(i));
    if (name == nullptr || PyList_Append(names, name) != 0) {
      Py_XDECREF(name);
      Py_DECREF(names);
      return nullptr;
    }
    Py_DECREF(name);
  }
  return names;
}

PyObject* get_option(PyObject*, PyObject* args) {
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  const int i = option_index(name);
  return i < 0 ? nullptr : PyLong_FromLong(myops::option(static_cast<myops::Option>(i)));
}

PyObject* set_option(PyObject*, PyObject* args) {
  const char* name = nullptr;
  int value = 0;
  if (!PyArg_ParseTuple(args, "si", &name, &value)) return nullptr;
  const int i = option_index(name);
  if (i < 0) return nullptr;
  myops::set_option(static_cast<myops::Option>(i), value);
  Py_RETURN_NONE;
}

}  // namespace

extern "C" {
// Importing myops._C runs the static registrations below; the module's one function hands the
// Python autograd formulas to the C++ Autograd kernels (autograd_entry.cpp).
PyObject* PyInit__C(void) {
  static PyMethodDef methods[] = {
      {"_set_autograd_formula", myops_set_autograd_formula, METH_VARARGS,
       "_set_autograd_formula(name, fn): the Python autograd kernel for calls of op `name` that need a gradient"},
      {"_option_names", option_names, METH_NOARGS, "the names of the runtime options (myops.backends)"},
      {"_get_option", get_option, METH_VARARGS, "_get_option(name) -> int"},
      {"_set_option", set_option, METH_VARARGS, "_set_option(name, value)"},
      {nullptr, nullptr, 0, nullptr}};
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(myops, m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "conv_transpose2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, "
      "SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation) -> Tensor",
      tags);
  // A one-row conv_transpose2d ([N, C, L] as [N, C, 1, L]): the same engines, autograd, fake impl.
  m.def(
      "conv_transpose1d(Tensor input, Tensor weight, Tensor? bias, SymInt[1] stride, "
      "SymInt[1] padding, SymInt[1] output_padding, SymInt groups, SymInt[1] dilation) -> Tensor",
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
  // The same chain up to GroupNorm's statistics: GELU's output (as stored) and its mean / rstd
  // per (sample, group) in float32 (float64 for float64 input), [N, num_groups]. The compile pass
  // uses it where the normalisation's consumers are pointwise, so that Inductor fuses the
  // normalisation into them (a residual add) instead of a separate pass over the output.
  m.def(
      "conv_transpose2d_gelu_group_stats(Tensor input, Tensor weight, Tensor? bias, "
      "SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, "
      "SymInt[2] dilation, str approximate, int num_groups, float eps) -> (Tensor, Tensor, Tensor)",
      tags);
  // The conv + normalisation + activation family's conv step: the conv with bias, the activation
  // (F.<activation>; none, gelu, silu, relu, leaky_relu, tanh, sigmoid) and the statistics of its
  // stored output that the normalisation needs: stats "channel" per channel over (N, H, W)
  // (BatchNorm, [C_out]), "group" per (sample, group) ([N, num_groups]; GroupNorm, InstanceNorm
  // with one group per channel), "none". Returns (output, mean, biased variance), the statistics
  // in float32 (float64 for float64 input; empty for "none"). The normalisation and an activation
  // after it are torch ops (myops.conv_transpose2d_norm_act), which torch.compile fuses with their
  // consumers.
  m.def(
      "conv_transpose2d_act_stats(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, "
      "SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, str activation, "
      "float negative_slope, str approximate, str stats, int num_groups) -> (Tensor, Tensor, Tensor)",
      tags);
  // The family's normalise + activation pass in one read and one write (eager calls; under
  // torch.compile the same math as torch ops fuses into the consumers): out[n, c, ...] =
  // act((input - mean[n, c]) * scale[n, c] + shift[n, c]) in the compute dtype (float64 for
  // float64 input, else float32, which mean / scale / shift [N, C] are in), rounded to input's
  // dtype, in input's memory format.
  m.def(
      "normalize_act(Tensor input, Tensor mean, Tensor scale, Tensor shift, str activation, "
      "float negative_slope, str approximate) -> Tensor",
      tags);
  // The BatchNorm chain conv_transpose2d -> batch_norm -> tanh -> max_pool2d -> group_norm, as two
  // functional ops: the conv with its per-channel batch statistics (mean, biased variance), and
  // the rest given the statistics to normalise with; running buffers are updated outside.
  m.def(
      "conv_transpose2d_channel_stats(Tensor input, Tensor weight, Tensor? bias, "
      "SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, "
      "SymInt[2] dilation) -> (Tensor, Tensor, Tensor)",
      tags);
  m.def(
      "batch_norm_tanh_max_pool2d_group_norm(Tensor input, Tensor mean, Tensor var, "
      "Tensor? bn_weight, Tensor? bn_bias, float bn_eps, int[2] kernel_size, int[2] pool_stride, "
      "int[2] pool_padding, int[2] pool_dilation, int num_groups, Tensor? gn_weight, "
      "Tensor? gn_bias, float gn_eps) -> Tensor",
      tags);
  // BatchNorm's running-buffer step, in place: running = (1 - momentum) * running + momentum *
  // batch (var's batch value times var_factor, the unbiased correction), in the buffers' compute
  // dtype as aten's batch_norm updates them, and num_batches_tracked += 1 where given: one kernel
  // where torch's ops take four launches after every training step of the chain.
  m.def(
      "batch_norm_update_running_stats(Tensor(a!) running_mean, Tensor(b!) running_var, Tensor mean, "
      "Tensor var, float momentum, float var_factor, Tensor(c!)? num_batches_tracked) -> ()",
      tags);
  // The whole chain in one call (what needs no gradient): (output, batch mean, biased batch var),
  // the statistics [C_out] in float32 (float64 for float64 input) in training, empty otherwise
  // (mean / var then normalise). One call lets the CUDA kernels pick a cheaper intermediate than
  // the conv output: where the conv kernel can, column pairs already reduced for a width-2 pool.
  m.def(
      "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(Tensor input, Tensor weight, "
      "Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, "
      "SymInt[2] dilation, Tensor? mean, Tensor? var, Tensor? bn_weight, Tensor? bn_bias, "
      "bool training, float bn_eps, int[2] kernel_size, int[2] pool_stride, int[2] pool_padding, "
      "int[2] pool_dilation, int num_groups, Tensor? gn_weight, Tensor? gn_bias, float gn_eps) "
      "-> (Tensor, Tensor, Tensor)",
      tags);
  // What runs a call of conv op `op` (one of the conv ops above) on the input's device and why:
  // the conv's source (ours or cuDNN's) and engine, with a reason for every engine passed over.
  // myops.explain in Python. Not part of any computation, so no pt2 tag.
  m.def(
      "_explain(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, SymInt[2] padding, "
      "SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, str op) -> str");
}
