#pragma once
// myops._C._set_autograd_formula(name, fn): the Python autograd kernel that the C++ Autograd
// kernel of op `name` ("myops::gelu") calls for calls that need a gradient (autograd_entry.cpp).
#include <Python.h>

PyObject* myops_set_autograd_formula(PyObject* module, PyObject* args);
