// A kept decode plan's eager call in one C++ function (attnlab/gpu/native.py builds and loads this file).
//
// A kept plan's call in Python spends most of its host time on steps that are each a few Python operations: the
// plan's key from four tensors' shapes, strides, dtypes, devices and addresses, the two outputs, the launch's
// arguments. Here a ``program`` records what one steady eager call of a plan does — the signature of its inputs, its
// outputs' shapes, and each kernel launch with its parameters, the per-call ones as slots — and ``call`` makes that
// call again for tensors of the same signature: it checks them against the record, allocates the outputs, fills the
// slots and launches through the driver (cuLaunchKernelEx, found in libcuda at the first launch). Anything it does not
// find as recorded (another shape, stride, dtype or device, a misaligned tensor, another current device or stream, a
// CUDA graph being captured, a launch hook installed) makes it return None, and the caller takes the Python path.
//
// A program made with ``dry=True`` launches nothing: it keeps each launch's configuration and parameter words for
// ``last`` to return (the CPU tests read what a GPU launch would have been given).

#include <Python.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "cuda.h"  // the driver's types and enums only: the functions are looked up in libcuda at run time

namespace {

constexpr int kSlots = 7;  // per-call parameters: q, k, v, lens, out, lse, the page table (their data pointers)
constexpr int kInputs = 5;  // the call's tensors: q, k, v, lens, the page table (slots 0-3 and 6)
constexpr int kInputSlot[kInputs] = {0, 1, 2, 3, 6};
constexpr int kMaxParams = 96;

typedef CUresult (*LaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*CtxGetDevice)(CUdevice*);
typedef CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
typedef CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);

struct Driver {
  bool tried = false;
  LaunchKernelEx launch = nullptr;
  CtxGetDevice device = nullptr;
  StreamIsCapturing capturing = nullptr;
  FuncGetParamInfo param_info = nullptr;  // (CUDA 12.4 and later: a program is checked against the kernel with it)
};

Driver driver;

bool load_driver() {
  if (!driver.tried) {
    driver.tried = true;
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib != nullptr) {
      driver.launch = reinterpret_cast<LaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
      driver.device = reinterpret_cast<CtxGetDevice>(dlsym(lib, "cuCtxGetDevice"));
      driver.capturing = reinterpret_cast<StreamIsCapturing>(dlsym(lib, "cuStreamIsCapturing"));
      driver.param_info = reinterpret_cast<FuncGetParamInfo>(dlsym(lib, "cuFuncGetParamInfo"));
    }
  }
  return driver.launch != nullptr && driver.device != nullptr && driver.capturing != nullptr;
}

struct TensorSpec {
  bool present = false;  // false: the call passed None there
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::Device(at::kCPU);
};

struct Param {
  char letter;     // the parameter's type, as PyTorch's launcher letters them (O: a pointer)
  uint64_t word;   // a constant's value, in the parameter's own width and format
  int slot;        // -1: the constant; else which per-call pointer (0 q, 1 k, 2 v, 3 lens, 4 out, 5 lse, 6 table)
};

struct Launch {
  CUfunction function;
  unsigned grid[3];
  unsigned block;
  unsigned shared;
  bool pdl;  // a programmatic dependent launch
  std::vector<Param> params;
};

struct Program {
  TensorSpec inputs[kInputs];  // q, k, v, lens, the page table
  std::vector<int64_t> out_sizes, lse_sizes;
  at::ScalarType out_dtype = at::kFloat, lse_dtype = at::kFloat;
  int device = -1;        // the CUDA device the plan is for
  uint64_t stream = 0;    // the raw stream the plan launches on
  std::vector<Launch> launches;
  bool dry = false;
  PyObject* stream_fn = nullptr;  // device index -> the current raw stream (a new reference kept)
  PyObject* hooks_fn = nullptr;   // () -> whether a launch hook is installed
  uint64_t calls = 0;
  std::vector<std::vector<uint64_t>> last;  // dry programs: each launch's parameter words of the last call
};

const char* kCapsule = "attnlab.native_decode.Program";

void destroy(PyObject* capsule) {
  auto* p = static_cast<Program*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (p != nullptr) {
    Py_XDECREF(p->stream_fn);
    Py_XDECREF(p->hooks_fn);
    delete p;
  }
}

Program* program_of(PyObject* obj) {
  return static_cast<Program*>(PyCapsule_GetPointer(obj, kCapsule));  // (sets the error when it is not one)
}

bool record(PyObject* obj, TensorSpec& spec) {
  if (obj == Py_None) {
    spec.present = false;
    return true;
  }
  if (!THPVariable_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "program: the inputs must be tensors or None");
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.layout() != at::kStrided) {
    PyErr_SetString(PyExc_TypeError, "program: the inputs must be strided tensors");
    return false;
  }
  spec.present = true;
  spec.sizes = t.sizes().vec();
  spec.strides = t.strides().vec();
  spec.dtype = t.scalar_type();
  spec.device = t.device();
  return true;
}

// whether ``obj`` is a tensor of ``spec``'s signature (or None where the record has None); its data pointer into
// ``ptr``
bool matches(PyObject* obj, const TensorSpec& spec, uint64_t* ptr) {
  if (!spec.present) {
    *ptr = 0;
    return obj == Py_None;
  }
  if (!THPVariable_CheckExact(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.layout() != at::kStrided || t.scalar_type() != spec.dtype || t.device() != spec.device)
    return false;
  if (t.sizes() != at::IntArrayRef(spec.sizes) || t.strides() != at::IntArrayRef(spec.strides)) return false;
  const uint64_t p = reinterpret_cast<uint64_t>(t.data_ptr());
  if (p % 16 != 0) return false;
  *ptr = p;
  return true;
}

size_t letter_bytes(char letter) {
  switch (letter) {
    case 'b': case 'B': return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': case 'f': return 4;
    default: return 8;
  }
}

// whether ``l`` passes exactly the parameters its kernel takes, each of its size (the driver's list of them): a
// description that does not would have the driver read past the words a call fills
bool check_params(const Launch& l, size_t index) {
  if (driver.param_info == nullptr) {
    PyErr_SetString(PyExc_RuntimeError,
                     "program: this CUDA driver cannot list a kernel's parameters (cuFuncGetParamInfo, CUDA 12.4)");
    return false;
  }
  const size_t n = l.params.size();
  for (size_t j = 0; j <= n; ++j) {
    size_t offset = 0, bytes = 0;
    const CUresult r = driver.param_info(l.function, j, &offset, &bytes);
    if (j == n) {
      if (r == CUDA_SUCCESS) {
        PyErr_Format(PyExc_RuntimeError, "program: launch %zu's kernel takes more than the %zu parameters described",
                     index, n);
        return false;
      }
      break;
    }
    if (r != CUDA_SUCCESS || bytes != letter_bytes(l.params[j].letter)) {
      PyErr_Format(PyExc_RuntimeError,
                   "program: launch %zu's parameter %zu is %zu bytes in the kernel (CUresult %d), %zu as described",
                   index, j, bytes, static_cast<int>(r), letter_bytes(l.params[j].letter));
      return false;
    }
  }
  return true;
}

bool to_word(char letter, PyObject* value, uint64_t* word) {
  *word = 0;
  if (letter == 'f' || letter == 'd') {
    const double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return false;
    if (letter == 'f') {
      const float f = static_cast<float>(v);
      std::memcpy(word, &f, sizeof f);
    } else {
      std::memcpy(word, &v, sizeof v);
    }
    return true;
  }
  if (value == Py_None) {  // a null pointer (an unused scratch parameter)
    if (letter != 'O') {
      PyErr_SetString(PyExc_TypeError, "program: None for a parameter that is not a pointer");
      return false;
    }
    return true;
  }
  const unsigned long long u = PyLong_AsUnsignedLongLongMask(value);  // (two's complement for negative ints)
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
  switch (letter) {
    case 'b': case 'B': { const uint8_t x = static_cast<uint8_t>(u); std::memcpy(word, &x, sizeof x); break; }
    case 'h': case 'H': { const uint16_t x = static_cast<uint16_t>(u); std::memcpy(word, &x, sizeof x); break; }
    case 'i': case 'I': { const uint32_t x = static_cast<uint32_t>(u); std::memcpy(word, &x, sizeof x); break; }
    case 'l': case 'K': case 'O': { const uint64_t x = static_cast<uint64_t>(u); std::memcpy(word, &x, sizeof x); break; }
    default:
      PyErr_Format(PyExc_ValueError, "program: unknown parameter type %c", letter);
      return false;
  }
  return true;
}

// program(q, k, v, lens, table, out, lse, device, stream, launches, stream_fn, hooks_fn, dry) -> a program (a capsule).
// launches: a sequence of (function, (gx, gy, gz), num_warps, shared, pdl, params), params a sequence of
// (letter, value, slot): slot -1 a constant ``value`` (an int, a float, or None for a null pointer), else a per-call
// pointer (value ignored).
PyObject* make_program_(PyObject* args);
PyObject* call_(PyObject* const* args, Py_ssize_t nargs);

// (PyTorch's C++ calls may throw: an exception becomes a RuntimeError, never a crossing of the C boundary)
PyObject* make_program(PyObject*, PyObject* args) {
  try {
    return make_program_(args);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  try {
    return call_(args, nargs);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* make_program_(PyObject* args) {
  PyObject *q, *k, *v, *lens, *table, *out, *lse, *launches, *stream_fn, *hooks_fn;
  int device, dry;
  unsigned long long stream;
  if (!PyArg_ParseTuple(args, "OOOOOOOiKOOOp", &q, &k, &v, &lens, &table, &out, &lse, &device, &stream, &launches,
                        &stream_fn, &hooks_fn, &dry))
    return nullptr;
  auto p = std::make_unique<Program>();
  PyObject* in[kInputs] = {q, k, v, lens, table};
  for (int i = 0; i < kInputs; ++i)
    if (!record(in[i], p->inputs[i])) return nullptr;
  if (!p->inputs[0].present || !p->inputs[1].present || !p->inputs[2].present) {
    PyErr_SetString(PyExc_TypeError, "program: q, k and v must be tensors");
    return nullptr;
  }
  if (!THPVariable_Check(out) || !THPVariable_Check(lse)) {
    PyErr_SetString(PyExc_TypeError, "program: out and lse must be tensors");
    return nullptr;
  }
  p->out_sizes = THPVariable_Unpack(out).sizes().vec();
  p->out_dtype = THPVariable_Unpack(out).scalar_type();
  p->lse_sizes = THPVariable_Unpack(lse).sizes().vec();
  p->lse_dtype = THPVariable_Unpack(lse).scalar_type();
  p->device = device;
  p->stream = stream;
  p->dry = dry != 0;
  PyObject* seq = PySequence_Fast(launches, "program: launches must be a sequence");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *grid, *params;
    unsigned long long function;
    unsigned gx, gy, gz, warps, shared;
    int pdl;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "KOIIpO", &function, &grid, &warps, &shared, &pdl,
                          &params) ||
        !PyArg_ParseTuple(grid, "III", &gx, &gy, &gz)) {
      Py_DECREF(seq);
      return nullptr;
    }
    Launch l;
    l.function = reinterpret_cast<CUfunction>(function);
    l.grid[0] = gx;
    l.grid[1] = gy;
    l.grid[2] = gz;
    l.block = 32 * warps;
    l.shared = shared;
    l.pdl = pdl != 0;
    PyObject* ps = PySequence_Fast(params, "program: a launch's params must be a sequence");
    if (ps == nullptr) {
      Py_DECREF(seq);
      return nullptr;
    }
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(ps);
    if (m > kMaxParams) {
      PyErr_Format(PyExc_ValueError, "program: %zd parameters, at most %d", m, kMaxParams);
      Py_DECREF(ps);
      Py_DECREF(seq);
      return nullptr;
    }
    for (Py_ssize_t j = 0; j < m; ++j) {
      const char* letter;
      PyObject* value;
      int slot;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ps, j), "sOi", &letter, &value, &slot)) {
        Py_DECREF(ps);
        Py_DECREF(seq);
        return nullptr;
      }
      Param prm{letter[0], 0, slot};
      if (std::strlen(letter) != 1 || slot < -1 || slot >= kSlots || (slot >= 0 && prm.letter != 'O')) {
        PyErr_SetString(PyExc_ValueError, "program: a parameter is (one type letter, value, slot -1..6 for pointers)");
        Py_DECREF(ps);
        Py_DECREF(seq);
        return nullptr;
      }
      if (slot == -1 && !to_word(prm.letter, value, &prm.word)) {
        Py_DECREF(ps);
        Py_DECREF(seq);
        return nullptr;
      }
      l.params.push_back(prm);
    }
    Py_DECREF(ps);
    if (!p->dry) {
      if (!load_driver()) {
        PyErr_SetString(PyExc_RuntimeError, "program: libcuda.so.1 or one of its functions not found");
        Py_DECREF(seq);
        return nullptr;
      }
      if (l.function == nullptr) {
        PyErr_Format(PyExc_RuntimeError, "program: launch %zd has no function", i);
        Py_DECREF(seq);
        return nullptr;
      }
      if (!check_params(l, static_cast<size_t>(i))) {
        Py_DECREF(seq);
        return nullptr;
      }
    }
    p->launches.push_back(std::move(l));
  }
  Py_DECREF(seq);
  Py_INCREF(stream_fn);
  Py_INCREF(hooks_fn);
  p->stream_fn = stream_fn;
  p->hooks_fn = hooks_fn;
  PyObject* capsule = PyCapsule_New(p.get(), kCapsule, destroy);
  if (capsule != nullptr) p.release();
  else {
    Py_DECREF(stream_fn);
    Py_DECREF(hooks_fn);
  }
  return capsule;
}

// whether the call may launch here: no hook installed, the plan's device current, its stream the current one on
// it, no graph being captured on it (dry programs skip the CUDA checks). -1: an error is set.
int may_launch(Program* p) {
  PyObject* hooked = PyObject_CallNoArgs(p->hooks_fn);
  if (hooked == nullptr) return -1;
  const int h = PyObject_IsTrue(hooked);
  Py_DECREF(hooked);
  if (h != 0) return h < 0 ? -1 : 0;
  if (p->dry) return 1;
  if (!load_driver()) return 0;
  CUdevice dev;
  if (driver.device(&dev) != CUDA_SUCCESS || dev != p->device) return 0;
  PyObject* index = PyLong_FromLong(p->device);
  if (index == nullptr) return -1;
  PyObject* stream = PyObject_CallOneArg(p->stream_fn, index);
  Py_DECREF(index);
  if (stream == nullptr) return -1;
  const unsigned long long s = PyLong_AsUnsignedLongLongMask(stream);
  Py_DECREF(stream);
  if (PyErr_Occurred()) return -1;
  if (s != p->stream) return 0;
  CUstreamCaptureStatus status;
  if (driver.capturing(reinterpret_cast<CUstream>(s), &status) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_NONE)
    return 0;
  return 1;
}

// call(program, q, k, v, lens, table) -> (out, lse), or None where the call is not the program's
PyObject* call_(PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 + kInputs) {
    PyErr_SetString(PyExc_TypeError, "call(program, q, k, v, lens, table)");
    return nullptr;
  }
  Program* p = program_of(args[0]);
  if (p == nullptr) return nullptr;
  uint64_t ptr[kSlots];
  for (int i = 0; i < kInputs; ++i)
    if (!matches(args[1 + i], p->inputs[i], &ptr[kInputSlot[i]])) Py_RETURN_NONE;
  const int ok = may_launch(p);
  if (ok < 0) return nullptr;
  if (ok == 0) Py_RETURN_NONE;
  const at::TensorOptions opts = at::TensorOptions().device(p->inputs[0].device);
  at::Tensor out = at::empty(p->out_sizes, opts.dtype(p->out_dtype));
  at::Tensor lse = at::empty(p->lse_sizes, opts.dtype(p->lse_dtype));
  ptr[4] = reinterpret_cast<uint64_t>(out.data_ptr());
  ptr[5] = reinterpret_cast<uint64_t>(lse.data_ptr());
  if (p->dry) p->last.clear();
  for (const Launch& l : p->launches) {
    uint64_t words[kMaxParams];
    void* params[kMaxParams];
    const size_t n = l.params.size();
    for (size_t j = 0; j < n; ++j) {
      const Param& prm = l.params[j];
      words[j] = prm.slot < 0 ? prm.word : ptr[prm.slot];
      params[j] = &words[j];
    }
    if (p->dry) {
      std::vector<uint64_t> record_words(words, words + n);
      p->last.push_back(std::move(record_words));
      continue;
    }
    CUlaunchAttribute attrs[1];
    CUlaunchConfig config;
    std::memset(&config, 0, sizeof config);
    config.gridDimX = l.grid[0];
    config.gridDimY = l.grid[1];
    config.gridDimZ = l.grid[2];
    config.blockDimX = l.block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = l.shared;
    config.hStream = reinterpret_cast<CUstream>(p->stream);
    config.attrs = attrs;
    config.numAttrs = 0;
    if (l.pdl) {
      std::memset(&attrs[0], 0, sizeof attrs[0]);
      attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[0].value.programmaticStreamSerializationAllowed = 1;
      config.numAttrs = 1;
    }
    if (l.grid[0] * l.grid[1] * l.grid[2] == 0) continue;
    const CUresult r = driver.launch(&config, l.function, params, nullptr);
    if (r != CUDA_SUCCESS) {
      PyErr_Format(PyExc_RuntimeError, "attnlab native decode: cuLaunchKernelEx failed (CUresult %d)",
                   static_cast<int>(r));
      return nullptr;
    }
  }
  ++p->calls;
  PyObject* o = THPVariable_Wrap(std::move(out));
  if (o == nullptr) return nullptr;
  PyObject* s = THPVariable_Wrap(std::move(lse));
  if (s == nullptr) {
    Py_DECREF(o);
    return nullptr;
  }
  PyObject* pair = PyTuple_Pack(2, o, s);
  Py_DECREF(o);
  Py_DECREF(s);
  return pair;
}

// calls(program) -> how many calls it has launched
PyObject* calls(PyObject*, PyObject* arg) {
  Program* p = program_of(arg);
  if (p == nullptr) return nullptr;
  return PyLong_FromUnsignedLongLong(p->calls);
}

// last(program) -> each launch's (function, grid, block, shared, pdl, parameter words) of a dry program's last call
PyObject* last(PyObject*, PyObject* arg) {
  Program* p = program_of(arg);
  if (p == nullptr) return nullptr;
  PyObject* result = PyList_New(0);
  if (result == nullptr) return nullptr;
  for (size_t i = 0; i < p->last.size() && i < p->launches.size(); ++i) {
    const Launch& l = p->launches[i];
    PyObject* words = PyList_New(0);
    if (words == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    for (uint64_t w : p->last[i]) {
      PyObject* x = PyLong_FromUnsignedLongLong(w);
      if (x == nullptr || PyList_Append(words, x) < 0) {
        Py_XDECREF(x);
        Py_DECREF(words);
        Py_DECREF(result);
        return nullptr;
      }
      Py_DECREF(x);
    }
    PyObject* item = Py_BuildValue("K(III)IION", reinterpret_cast<unsigned long long>(l.function), l.grid[0],
                                   l.grid[1], l.grid[2], l.block, l.shared, l.pdl ? Py_True : Py_False, words);
    if (item == nullptr || PyList_Append(result, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(result);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return result;
}

PyMethodDef methods[] = {
    {"program", make_program, METH_VARARGS,
     "program(q, k, v, lens, table, out, lse, device, stream, launches, stream_fn, hooks_fn, dry): a steady call, "
     "recorded"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(program, q, k, v, lens, table) -> (out, lse), or None where the call is not the program's"},
    {"calls", calls, METH_O, "calls(program) -> how many calls the program has launched"},
    {"last", last, METH_O, "last(program) -> a dry program's last launches: (function, grid, block, shared, pdl, words)"},
    {nullptr, nullptr, 0, nullptr}};

#define ATTNLAB_STR2(x) #x
#define ATTNLAB_STR(x) ATTNLAB_STR2(x)
PyModuleDef module = {PyModuleDef_HEAD_INIT, ATTNLAB_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};

}  // namespace

#define ATTNLAB_CONCAT2(a, b) a##b
#define ATTNLAB_CONCAT(a, b) ATTNLAB_CONCAT2(a, b)
PyMODINIT_FUNC ATTNLAB_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
