// The Autograd kernel of every myops op on CPU and CUDA, in C++: a call that needs no gradient (no
// input requires grad, or grad mode off: inference, the forward of a compiled inference graph)
// goes straight below the Autograd key, without entering Python. The Python kernel that
// torch.library.register_autograd installs did that redispatch itself, in Python, before the first
// kernel of every call. A call that needs a gradient runs
// the op's Python autograd formula (myops/_autograd.py), which hands it over at import through
// myops._C._set_autograd_formula; every other device keeps register_autograd's Python kernel.
#include "autograd_entry.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <string>
#include <unordered_map>

namespace {

namespace py = pybind11;

// op name ("myops::gelu") -> the Python autograd kernel, called as fn(keyset, *args, **kwargs).
// Owned references, never released: they live as long as the process (releasing them after the
// interpreter has finalised would crash at exit).
std::unordered_map<std::string, PyObject*>& formulas() {
  static auto* table = new std::unordered_map<std::string, PyObject*>();
  return *table;
}

// The rule of register_autograd's kernel: grad mode on and some positional tensor argument (no
// myops op has keyword-only tensors) requiring grad.
bool needs_grad(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  if (!at::GradMode::is_enabled()) return false;
  const auto args = torch::jit::last(stack, schema.arguments().size());
  for (const c10::IValue& v : args)
    if (v.isTensor() && v.toTensor().requires_grad()) return true;
  return false;
}

void call_python_formula(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  // looked up before taking the GIL: without the Python package (a C++-only process) there is none
  const auto it = formulas().find(schema.name());
  TORCH_CHECK(it != formulas().end(), schema.name(),
              ": no autograd formula registered (importing the myops package registers them)");
  py::gil_scoped_acquire gil;
  const size_t count = schema.arguments().size();
  std::vector<c10::IValue> values = torch::jit::pop(*stack, count);
  py::list args;
  args.append(py::cast(keyset));
  py::dict kwargs;
  for (size_t i = 0; i < count; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    py::object value = torch::jit::toPyObject(std::move(values[i]));
    if (a.kwarg_only())
      kwargs[py::str(a.name())] = value;
    else
      args.append(value);
  }
  const py::object out = py::reinterpret_borrow<py::object>(it->second)(*args, **kwargs);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].type()));
    return;
  }
  const py::tuple outs = out.cast<py::tuple>();
  TORCH_CHECK(outs.size() == returns.size(), schema.name(), ": the autograd formula returned ", outs.size(),
              " values, the schema declares ", returns.size());
  for (size_t i = 0; i < returns.size(); ++i) stack->push_back(torch::jit::toIValue(outs[i], returns[i].type()));
}

void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
  if (needs_grad(op.schema(), *stack)) return call_python_formula(op, keyset, stack);
  at::AutoDispatchBelowAutograd below;
  op.redispatchBoxed(keyset & c10::after_autograd_keyset, stack);
}

// Every differentiable op of csrc/myops.cpp (a test checks that each op is in this list or the next).
constexpr const char* kOps[] = {
    "conv_transpose2d",
    "gelu",
    "group_norm",
    "conv_transpose2d_gelu_group_norm",
    "conv_transpose2d_gelu_group_stats",
    "conv_transpose2d_channel_stats",
    "batch_norm_tanh_max_pool2d_group_norm",
    "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
    "conv_transpose2d_act_stats",
    "normalize_act",
};

// Ops without a differentiable output (BatchNorm's running-buffer step): every call goes below
// autograd, so a tensor the op writes must not require grad (autograd would not see the write).
void no_gradient_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto args = torch::jit::last(*stack, schema.arguments().size());
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    TORCH_CHECK(!(alias && alias->isWrite() && args[i].isTensor() && args[i].toTensor().requires_grad()),
                schema.name(), ": argument '", schema.arguments()[i].name(),
                "' is updated in place and must not require grad");
  }
  at::AutoDispatchBelowAutograd below;
  op.redispatchBoxed(keyset & c10::after_autograd_keyset, stack);
}
constexpr const char* kNoGradientOps[] = {"batch_norm_update_running_stats"};

void register_autograd_kernels(torch::Library& m) {
  for (const char* name : kOps) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
  for (const char* name : kNoGradientOps)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_gradient_kernel>());
}

}  // namespace

PyObject* myops_set_autograd_formula(PyObject* /*module*/, PyObject* args) {
  const char* name = nullptr;
  PyObject* fn = nullptr;
  if (!PyArg_ParseTuple(args, "sO", &name, &fn)) return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "myops._C._set_autograd_formula: fn must be callable");
    return nullptr;
  }
  Py_INCREF(fn);
  PyObject*& slot = formulas()[name];
  PyObject* old = slot;
  slot = fn;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

TORCH_LIBRARY_IMPL(myops, AutogradCPU, m) { register_autograd_kernels(m); }
TORCH_LIBRARY_IMPL(myops, AutogradCUDA, m) { register_autograd_kernels(m); }
