"""The native decode call's launching half on the CPU, against a stand-in CUDA driver: a small ``libcuda.so.1`` built
here from the driver's own header (``cuda.h``, as triton ships it) that answers the four functions the module looks up
— it lists the parameters of the kernels a test registers, says which device is current and whether a stream is
capturing, and records what ``cuLaunchKernelEx`` is given. A GPU program (not dry) is then made and called for CPU
tensors in a fresh interpreter whose library path finds the stand-in first: the launch configuration (grid, block,
shared memory, stream, the dependent-launch attribute), each parameter's bytes as the kernel's sizes take them, the
checks of a program against the driver's list, and each reason a call goes back to the Python path (another device,
another stream, a capture, a launch hook)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

pytest.importorskip("triton")
from tests.helpers import ROOT  # noqa: E402

from attnlab.gpu import native  # noqa: E402

FAKE = r"""
#include <string.h>
#include "cuda.h"
#undef cuStreamIsCapturing
#undef cuLaunchKernelEx

#define MAXF 8
#define MAXP 128
static unsigned long long fns[MAXF];
static int nparams[MAXF];
static size_t psize[MAXF][MAXP];
static int nf = 0, device = 0, capturing = 0, launches = 0;
static CUlaunchConfig last;
static CUlaunchAttribute attrs[4];
static unsigned char bytes[MAXP * 8];
static size_t nbytes = 0;
static unsigned long long last_fn = 0;

void fake_register(unsigned long long fn, int n, const size_t *sizes) {
  fns[nf] = fn; nparams[nf] = n;
  for (int i = 0; i < n; ++i) psize[nf][i] = sizes[i];
  ++nf;
}
void fake_state(int dev, int capture) { device = dev; capturing = capture; }
int fake_launches(void) { return launches; }
static int find(CUfunction f) {
  for (int i = 0; i < nf; ++i) if (fns[i] == (unsigned long long)f) return i;
  return -1;
}
CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *offset, size_t *size) {
  int k = find(f);
  if (k < 0) return CUDA_ERROR_INVALID_HANDLE;
  if (i >= (size_t)nparams[k]) return CUDA_ERROR_INVALID_VALUE;
  size_t off = 0;
  for (size_t j = 0; j < i; ++j) off += psize[k][j];
  *offset = off; *size = psize[k][i];
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) { *d = device; return CUDA_SUCCESS; }
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
  *st = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  int k = find(f);
  if (k < 0 || extra != 0) return CUDA_ERROR_INVALID_HANDLE;
  last = *c;
  for (unsigned i = 0; i < c->numAttrs && i < 4; ++i) attrs[i] = c->attrs[i];
  nbytes = 0;
  for (int i = 0; i < nparams[k]; ++i) { memcpy(bytes + nbytes, params[i], psize[k][i]); nbytes += psize[k][i]; }
  last_fn = (unsigned long long)f;
  ++launches;
  return CUDA_SUCCESS;
}
/* the last launch: function, grid, block, shared, stream, attributes (id, first int of the value), parameter bytes */
int fake_last(unsigned long long *out, unsigned char *param_bytes) {
  out[0] = last_fn; out[1] = last.gridDimX; out[2] = last.gridDimY; out[3] = last.gridDimZ;
  out[4] = last.blockDimX; out[5] = last.blockDimY; out[6] = last.blockDimZ; out[7] = last.sharedMemBytes;
  out[8] = (unsigned long long)last.hStream; out[9] = last.numAttrs;
  out[10] = last.numAttrs ? (unsigned long long)attrs[0].id : 0;
  out[11] = last.numAttrs ? (unsigned long long)attrs[0].value.programmaticStreamSerializationAllowed : 0;
  memcpy(param_bytes, bytes, nbytes);
  return (int)nbytes;
}
"""

SCRIPT = r"""
import ctypes, json, struct, warnings, torch
lib = ctypes.CDLL("libcuda.so.1")  # (the stand-in: the module's dlopen by the same name finds this one)
from attnlab.gpu import native
mod = native.module()

def register(fn, sizes):
    arr = (ctypes.c_size_t * len(sizes))(*sizes)
    lib.fake_register(ctypes.c_ulonglong(fn), len(sizes), arr)

def last():
    out = (ctypes.c_ulonglong * 12)()
    buf = (ctypes.c_ubyte * 1024)()
    n = lib.fake_last(out, buf)
    return list(out), bytes(buf[:n]).hex()

register(0x1000, [8, 8, 8, 8, 4, 4, 8, 8, 8])  # q, k, v, lens, i32, f32, out, lse, a null pointer
register(0x2000, [8, 8, 4])                     # out, a constant pointer, i32
register(0x3000, [8, 8])                        # a kernel of two parameters
q, k, v = (torch.randn(1, 4, 1, 64), torch.randn(1, 2, 100, 64), torch.randn(1, 2, 100, 64))
lens = torch.tensor([100], dtype=torch.int32)
out, lse = torch.empty(1, 4, 1, 64), torch.empty(1, 4, 1)
split = (0x1000, (2, 3, 1), 4, 1024, True, (("O", None, 0), ("O", None, 1), ("O", None, 2), ("O", None, 3),
                                            ("i", -5, -1), ("f", 0.5, -1), ("O", None, 4), ("O", None, 5),
                                            ("O", None, -1)))
merge = (0x2000, (7, 1, 1), 8, 0, False, (("O", None, 4), ("O", 4096, -1), ("i", 9, -1)))
stream = [123]
hooked = [False]
prog = native.program(q, k, v, lens, out, lse, device=0, stream=123, launches=[split, merge],
                      stream_fn=lambda i: stream[0], hooks_fn=lambda: hooked[0])
res = {"made": prog is not None}
o, s = mod.call(prog, q, k, v, lens, None)
res["launches"] = lib.fake_launches()
res["merge"] = last()
res["ptrs"] = [q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), o.data_ptr(), s.data_ptr()]
# the split launch alone (a program of it), to read its configuration and bytes
one = native.program(q, k, v, lens, out, lse, device=0, stream=123, launches=[split],
                     stream_fn=lambda i: stream[0], hooks_fn=lambda: hooked[0])
o1, s1 = mod.call(one, q, k, v, lens, None)
res["split"] = last()
res["split_ptrs"] = [q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), o1.data_ptr(), s1.data_ptr()]
n = lib.fake_launches()
back = {}
lib.fake_state(1, 0); back["device"] = mod.call(one, q, k, v, lens, None) is None; lib.fake_state(0, 0)
lib.fake_state(0, 1); back["capture"] = mod.call(one, q, k, v, lens, None) is None; lib.fake_state(0, 0)
stream[0] = 7; back["stream"] = mod.call(one, q, k, v, lens, None) is None; stream[0] = 123
hooked[0] = True; back["hook"] = mod.call(one, q, k, v, lens, None) is None; hooked[0] = False
back["launched_meanwhile"] = lib.fake_launches() - n
res["back"] = back
res["again"] = mod.call(one, q, k, v, lens, None) is not None and lib.fake_launches() == n + 1
refused = {}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    fewer = (0x3000, (1, 1, 1), 4, 0, False, (("O", None, 4),))  # one parameter of the kernel's two
    refused["fewer"] = native.program(q, k, v, lens, out, lse, device=0, stream=123, launches=[fewer],
                                      stream_fn=lambda i: 123, hooks_fn=lambda: False) is None
    wider = (0x3000, (1, 1, 1), 4, 0, False, (("O", None, 4), ("i", 1, -1)))  # an i32 where the kernel has 8 bytes
    import attnlab._runtime as rt
    rt._warned.clear()
    refused["sizes"] = native.program(q, k, v, lens, out, lse, device=0, stream=123, launches=[wider],
                                      stream_fn=lambda i: 123, hooks_fn=lambda: False) is None
    unknown = (0x4000, (1, 1, 1), 4, 0, False, (("O", None, 4),))  # a function the driver does not know
    rt._warned.clear()
    refused["unknown"] = native.program(q, k, v, lens, out, lse, device=0, stream=123, launches=[unknown],
                                        stream_fn=lambda i: 123, hooks_fn=lambda: False) is None
refused["warnings"] = [str(x.message) for x in w]
res["refused"] = refused
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    include = native.driver_include()
    cc = shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None or native.module() is None:
        pytest.skip("needs a C compiler, triton's cuda.h and the native module")
    where = tmp_path_factory.mktemp("libcuda")
    (where / "fake.c").write_text(FAKE)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{include}", str(where / "fake.c"), "-o",
                    str(where / "libcuda.so.1")], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["LD_LIBRARY_PATH"] = f"{where}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _words(hexbytes: str, sizes) -> list[int]:
    raw, out, at = bytes.fromhex(hexbytes), [], 0
    for n in sizes:
        out.append(int.from_bytes(raw[at:at + n], "little"))
        at += n
    return out


def test_a_call_launches_each_kernel_as_described(stand_in):
    r = stand_in
    assert r["made"] and r["launches"] == 2  # the split and the merge launch of one call, in order
    cfg, raw = r["split"]
    q, k, v, lens, out, lse = r["split_ptrs"]
    assert cfg[:10] == [0x1000, 2, 3, 1, 128, 1, 1, 1024, 123, 1]  # grid, 32 threads a warp, shared, the stream
    assert cfg[10:] == [6, 1]  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, allowed
    f32_half = int.from_bytes(struct.pack("<f", 0.5), "little")
    assert _words(raw, [8, 8, 8, 8, 4, 4, 8, 8, 8]) == [q, k, v, lens, (-5) % 2**32, f32_half, out, lse, 0]
    cfg, raw = r["merge"]
    out = r["ptrs"][4]
    assert cfg[:10] == [0x2000, 7, 1, 1, 256, 1, 1, 0, 123, 0] and cfg[10:] == [0, 0]  # a plain launch: no attribute
    assert _words(raw, [8, 8, 4]) == [out, 4096, 9]


def test_each_reason_to_take_the_python_path(stand_in):
    back = stand_in["back"]
    assert back == {"device": True, "capture": True, "stream": True, "hook": True, "launched_meanwhile": 0}
    assert stand_in["again"]  # and back to launching once all is as recorded


def test_a_program_the_drivers_list_contradicts_is_not_made(stand_in):
    refused = stand_in["refused"]
    assert refused["fewer"] and refused["sizes"] and refused["unknown"]
    warned = " | ".join(refused["warnings"])
    assert "takes more than the 1 parameters described" in warned
    assert "parameter 1 is 8 bytes in the kernel (CUresult 0), 4 as described" in warned
    assert "parameter 0 is 0 bytes in the kernel (CUresult 400)" in warned  # CUDA_ERROR_INVALID_HANDLE
