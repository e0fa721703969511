"""Launch tests: CPU checks of the PTX signature reader and argument marshalling; GPU checks of real launches."""
from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from _fake_driver import (CupyLikeStream, FakeDescriptor, FakeDeviceArray, TorchLikeStream,
                          fake_kernel_of)
import tmakit
from tmakit import InvalidArgumentError, LaunchError, UnsupportedDeviceError
from tmakit.arrays import ArrayView
from tmakit.kernel_signature import ParamInfo, merge_driver_layout, parse_ptx_entries, ptx_targets
from tmakit.launch import _dim3
from tmakit.launch_args import ArgPacker
from tmakit.streams import stream_handle

# ----------------------------------------------------------------------------------------------- CPU tests

HAND_PTX = r'''
.version 8.0
.target sm_90a
.address_size 64
/* a block comment with .entry fake( .param .u32 x ) inside */
.visible .entry first(
    .param .u64 .ptr .global .align 16 first_param_0,  // pointer with attributes
    .param .u8 first_param_1,
    .param .align 64 .b8 first_param_2[128],
    .param .f64 first_param_3,
    .param .s16 first_param_4
)
{ ret; }
.visible .entry no_params()
{ ret; }
'''


def test_parse_ptx_entries_layout() -> None:
    entries = parse_ptx_entries(HAND_PTX)
    assert list(entries) == ["first", "no_params"]
    assert entries["no_params"] == []
    got = [(p.name, p.offset, p.size, p.ptx_type, p.kind) for p in entries["first"]]
    assert got == [
        ("first_param_0", 0, 8, ".u64", "int"),
        ("first_param_1", 8, 1, ".u8", "int"),
        ("first_param_2", 64, 128, ".b8[128]", "bytes"),
        ("first_param_3", 192, 8, ".f64", "float"),
        ("first_param_4", 200, 2, ".s16", "int"),
    ]
    assert ptx_targets(HAND_PTX) == ["sm_90a"]


def test_merge_driver_layout() -> None:
    ptx = parse_ptx_entries(HAND_PTX)["first"]
    merged = merge_driver_layout(ptx, [(0, 8), (8, 1), (64, 128), (192, 8), (200, 2)], "first")
    assert [p.name for p in merged] == [p.name for p in ptx]
    bare = merge_driver_layout(None, [(0, 8), (8, 4)], "k")
    assert [(p.offset, p.size, p.kind) for p in bare] == [(0, 8, "unknown"), (8, 4, "unknown")]
    with pytest.raises(LaunchError, match="disagrees with the driver"):
        merge_driver_layout(ptx, [(0, 8)], "first")


def _packer() -> ArgPacker:
    return ArgPacker(parse_ptx_entries(HAND_PTX)["first"], "first", device=0)


def test_packs_every_kind_byte_for_byte() -> None:
    rng = np.random.default_rng()
    payload = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
    ptr = int(rng.integers(1, 2**62))
    packer = _packer()
    packer.view[:] = b"\xcd" * len(packer.view)  # poison
    desc = FakeDescriptor(payload)
    packer.pack([FakeDeviceArray(ptr=ptr), -3, desc, 2.5, -7])
    assert packer.bytes_of(0) == struct.pack("<Q", ptr)
    assert packer.bytes_of(1) == b"\xfd"
    assert packer.bytes_of(2) == payload and desc.asked == [128]
    assert packer.bytes_of(3) == struct.pack("<d", 2.5)
    assert packer.bytes_of(4) == struct.pack("<h", -7)
    base = ctypes.addressof(packer.buffer)
    assert [packer.pointers[i] - base for i in range(5)] == [0, 8, 64, 192, 200]


def test_packs_other_value_forms() -> None:
    packer = _packer()
    view = ArrayView(0x1000, (4,), (4,), "float32", 4, 0)
    struct_value = np.frombuffer(bytes(range(128)), dtype=np.uint8)
    packer.pack([view, np.uint8(200), struct_value, np.float64(1.25), True])
    assert packer.bytes_of(0) == struct.pack("<Q", 0x1000)
    assert packer.bytes_of(1) == b"\xc8" and packer.bytes_of(2) == bytes(range(128))
    assert packer.bytes_of(3) == struct.pack("<d", 1.25) and packer.bytes_of(4) == b"\x01\x00"
    packer.pack([2**64 - 1, 255, bytearray(128), 3, 0])
    assert packer.bytes_of(0) == b"\xff" * 8 and packer.bytes_of(3) == struct.pack("<d", 3.0)


@pytest.mark.parametrize("args, pattern", [
    ((1, 2), r"takes 5 argument\(s\), got 2.*first_param_0"),
    ((0, 1, b"\0" * 127, 0.0, 0), r"argument 2 \(first_param_2.*128 bytes\).*gives 127 bytes"),
    ((0, 1, FakeDescriptor(b"\0" * 64), 0.0, 0), r"argument 2 .*gives 64 bytes, the parameter has 128"),
    ((0, 1, "text", 0.0, 0), r"argument 2 .*__kernel_param__"),
    ((0, 1.5, b"\0" * 128, 0.0, 0), r"argument 1 \(first_param_1.*floats are not converted"),
    ((0, 256 + 255, b"\0" * 128, 0.0, 0), r"argument 1 .*out of range for a 1-byte integer"),
    ((0, np.int32(1), b"\0" * 128, 0.0, 0), r"argument 1 .*numpy int32 \(4 bytes\) does not match"),
    ((0, 1, b"\0" * 128, np.float32(1), 0), r"argument 3 .*numpy float32 does not match"),
    ((0, 1, b"\0" * 128, "x", 0), r"argument 3 .*takes a Python float"),
    ((object(), 1, b"\0" * 128, 0.0, 0), r"argument 0 .*device array"),
    ((0, 1, FakeDescriptor(b"\0" * 128, device=1), 0.0, 0), r"argument 2 .*belongs to device 1.*device 0"),
])
def test_bad_arguments_raise_before_launch(args: tuple, pattern: str) -> None:
    with pytest.raises(LaunchError, match=pattern):
        _packer().pack(list(args))


def test_blank_packer_shares_the_layout_with_its_own_buffer() -> None:
    """What Kernel.bind takes: a packer of the same parameter list, its own buffer and kernelParams, the same
    checks, and no reference cycle (freed by reference counting alone, without the cycle collector)."""
    import gc
    import weakref

    proto = _packer()
    args = [FakeDeviceArray(ptr=0x1000), -3, b"\x07" * 128, 2.5, -7]
    proto.pack(args)
    blank = proto.blank()
    assert ctypes.addressof(blank.buffer) != ctypes.addressof(proto.buffer) and blank.bytes_of(2) == bytes(128)
    base = ctypes.addressof(blank.buffer)
    assert [blank.pointers[i] - base for i in range(5)] == [0, 8, 64, 192, 200]
    blank.pack(args)
    assert [blank.bytes_of(i) for i in range(5)] == [proto.bytes_of(i) for i in range(5)]
    with pytest.raises(LaunchError, match=r"kernel first: argument 1 .*out of range"):
        blank.write(1, 1 << 20)
    gc.disable()
    try:
        gone = weakref.ref(blank.buffer)
        del blank
        assert gone() is None
    finally:
        gc.enable()


def test_unknown_type_params_pack_by_size() -> None:
    packer = ArgPacker([ParamInfo(0, 0, 4), ParamInfo(1, 8, 8), ParamInfo(2, 16, 16)], "k")
    packer.pack([1.5, -1, b"\1" * 16])
    assert packer.bytes_of(0) == struct.pack("<f", 1.5) and packer.bytes_of(1) == b"\xff" * 8


def test_stream_handle_forms() -> None:
    assert stream_handle(None) == 0 and stream_handle(42) == 42
    assert stream_handle(TorchLikeStream(0x1234)) == 0x1234 and stream_handle(CupyLikeStream(0x99)) == 0x99
    from cuda.bindings import driver

    assert stream_handle(driver.CUstream(77)) == 77
    with pytest.raises(InvalidArgumentError, match="stream=.*not a CUDA stream"):
        stream_handle("default")


def test_dim3() -> None:
    assert _dim3(5, "grid") == (5, 1, 1) and _dim3((2, 3), "grid") == (2, 3, 1) and _dim3([1, 2, 3], "b") == (1, 2, 3)
    for bad in (0, (1, 2, 3, 4), (1.5,), (), True):
        with pytest.raises(InvalidArgumentError, match="grid=.*positive"):
            _dim3(bad, "grid")


# ----------------------------------------------------------------------------------------------- GPU tests

ECHO = r'''
struct __align__(64) Desc { unsigned char bytes[128]; };
// Copies every argument's bytes into out, so the host can compare them byte for byte.
extern "C" __global__ void echo(unsigned char* out, int i, float f, const __grid_constant__ Desc d,
                                char c, double x, unsigned long long p) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned char* src;
    src = (const unsigned char*)&i; for (int k = 0; k < 4; ++k) out[k] = src[k];
    src = (const unsigned char*)&f; for (int k = 0; k < 4; ++k) out[4 + k] = src[k];
    for (int k = 0; k < 128; ++k) out[8 + k] = d.bytes[k];
    out[136] = (unsigned char)c;
    src = (const unsigned char*)&x; for (int k = 0; k < 8; ++k) out[137 + k] = src[k];
    src = (const unsigned char*)&p; for (int k = 0; k < 8; ++k) out[145 + k] = src[k];
}
// Fills all of dynamic shared memory, then each thread sums a strided slice so every byte is read back.
extern "C" __global__ void smem_fill(unsigned int* out, unsigned int nbytes) {
    extern __shared__ unsigned char smem[];
    for (unsigned int k = threadIdx.x; k < nbytes; k += blockDim.x) smem[k] = (unsigned char)(k * 7 + 1);
    __syncthreads();
    unsigned int sum = 0;
    for (unsigned int k = threadIdx.x; k < nbytes; k += blockDim.x) sum += smem[nbytes - 1 - k];
    atomicAdd(out, sum);
}
extern "C" __global__ void block_ids(unsigned int* out) {
    if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x + 1;
}
'''
ECHO_BYTES = 153


class DeviceBuffer:
    """A minimal device allocation for the tests (cuMemAlloc through tmakit's driver chokepoint)."""

    def __init__(self, nbytes: int):
        from tmakit import _driver

        _driver.ensure_context(0)
        self._drv, self.nbytes = _driver, nbytes
        self.ptr = int(_driver.call("cuMemAlloc", nbytes))
        self.__cuda_array_interface__ = {"data": (self.ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def upload(self, data: bytes) -> None:
        host = np.frombuffer(data, dtype=np.uint8).copy()
        self._drv.call("cuMemcpyHtoD", self.ptr, host.ctypes.data, host.nbytes)

    def download(self) -> bytes:
        host = np.empty(self.nbytes, dtype=np.uint8)
        self._drv.call("cuCtxSynchronize")
        self._drv.call("cuMemcpyDtoH", host.ctypes.data, self.ptr, self.nbytes)
        return host.tobytes()

    def free(self) -> None:
        self._drv.call("cuMemFree", self.ptr)


@pytest.fixture(scope="module")
def module():
    from tmakit.build import load_module

    with load_module(ECHO) as mod:
        yield mod


@pytest.fixture()
def buffer():
    buf = DeviceBuffer(1 << 12)
    buf.upload(b"\xcd" * buf.nbytes)  # poison
    yield buf
    buf.free()


@pytest.mark.requires_gpu
def test_echo_arguments_byte_for_byte(module, buffer) -> None:
    rng = np.random.default_rng()
    kernel = module.kernel("echo")
    assert [p.size for p in kernel.params] == [8, 4, 4, 128, 1, 8, 8]
    i, f = int(rng.integers(-2**31, 2**31)), float(np.float32(rng.standard_normal()))
    desc, c, x, p = rng.integers(0, 256, 128, dtype=np.uint8).tobytes(), -5, float(rng.standard_normal()), int(rng.integers(0, 2**63))
    kernel(buffer, i, f, FakeDescriptor(desc), c, x, p, grid=1, block=32)
    got = buffer.download()[:ECHO_BYTES]
    expected = struct.pack("<if", i, f) + desc + struct.pack("<b", c) + struct.pack("<dQ", x, p)
    assert got == expected


@pytest.mark.requires_gpu
def test_repeated_launches_write_every_time(module, buffer) -> None:
    """Repeated identical launches each run (poisoned in between); a changed grid takes effect, and a bound
    launch updated between relaunches writes the new value."""
    kernel = module.kernel("block_ids")
    for blocks in (7, 7, 7, 5, 5):
        buffer.upload(b"\xcd" * buffer.nbytes)
        kernel(buffer.ptr, grid=(blocks,), block=(32, 1, 1))
        got = np.frombuffer(buffer.download(), dtype=np.uint32)
        assert list(got[:blocks]) == list(range(1, blocks + 1)) and got[blocks] == 0xCDCDCDCD
    bound = kernel.bind(buffer, grid=(3,), block=(32, 1, 1))
    for _ in range(2):
        buffer.upload(b"\xcd" * buffer.nbytes)
        bound()
        got = np.frombuffer(buffer.download(), dtype=np.uint32)
        assert list(got[:3]) == [1, 2, 3] and got[3] == 0xCDCDCDCD


@pytest.mark.requires_gpu
def test_bound_launch_update_and_stream_on_gpu(module, buffer) -> None:
    """bound.update rewrites one argument between relaunches (the kernel sees each value); bound(stream=s)
    runs on another stream; a TensorMap-like by-value argument is echoed byte for byte throughout."""
    from tmakit import Stream

    kernel = module.kernel("echo")
    desc = bytes(range(128))
    bound = kernel.bind(buffer, 1, 0.5, FakeDescriptor(desc), 3, 2.0, 7, grid=1, block=32)
    with Stream(0) as other:
        for step, value in enumerate((11, -4, 123456)):
            buffer.upload(b"\xcd" * buffer.nbytes)
            bound.update(1, value)
            bound(stream=other) if step == 1 else bound()
            other.sync()
            got = buffer.download()[:ECHO_BYTES]
            assert got == struct.pack("<if", value, 0.5) + desc + struct.pack("<b", 3) + struct.pack("<dQ", 2.0, 7)


@pytest.mark.requires_gpu
def test_launch_on_cuda_core_stream(module, buffer) -> None:
    from cuda.core import Device

    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    module.kernel("block_ids")(buffer, grid=(7,), block=(32, 1, 1), stream=stream)
    stream.sync()
    got = np.frombuffer(buffer.download(), dtype=np.uint32)
    assert list(got[:7]) == list(range(1, 8)) and got[7] == 0xCDCDCDCD


@pytest.mark.requires_gpu
@pytest.mark.parametrize("which", ["above_48k", "all_optin"])
def test_dynamic_shared_memory_above_48k(module, buffer, which: str) -> None:
    kernel = module.kernel("smem_fill")
    optin = tmakit.device_limits(0).smem_per_block_optin
    nbytes = 64 * 1024 if which == "above_48k" else optin - kernel.attribute("SHARED_SIZE_BYTES")
    buffer.upload(b"\0" * 4)
    kernel(buffer, nbytes, grid=1, block=256, shared_mem=nbytes)
    got = np.frombuffer(buffer.download()[:4], dtype=np.uint32)[0]
    expected = int(((np.arange(nbytes, dtype=np.uint64) * 7 + 1) % 256).sum() % 2**32)
    assert got == expected


@pytest.mark.requires_gpu
def test_too_much_shared_memory_is_refused(module, buffer) -> None:
    optin = tmakit.device_limits(0).smem_per_block_optin
    with pytest.raises(LaunchError, match=f"shared_mem={optin + 1}.*more than the {optin} bytes"):
        module.kernel("smem_fill")(buffer, 0, grid=1, block=32, shared_mem=optin + 1)
    with pytest.raises(InvalidArgumentError, match="shared_mem=-1"):
        module.kernel("smem_fill")(buffer, 0, grid=1, block=32, shared_mem=-1)


@pytest.mark.requires_gpu
def test_wrong_arguments_raise_on_gpu(module, buffer) -> None:
    kernel = module.kernel("echo")
    with pytest.raises(LaunchError, match=r"takes 7 argument\(s\), got 2"):
        kernel(buffer, 1, grid=1, block=1)
    with pytest.raises(LaunchError, match=r"argument 3 .*gives 64 bytes, the parameter has 128"):
        kernel(buffer, 1, 1.0, FakeDescriptor(b"\0" * 64), 0, 0.0, 0, grid=1, block=1)
    with pytest.raises(LaunchError, match=r"argument 3 .*belongs to device 5"):
        kernel(buffer, 1, 1.0, FakeDescriptor(b"\0" * 128, device=5), 0, 0.0, 0, grid=1, block=1)
    with pytest.raises(LaunchError, match="block=.*1025 threads"):
        module.kernel("block_ids")(buffer, grid=1, block=1025)


@pytest.mark.requires_gpu
def test_unknown_kernel_lists_names(module) -> None:
    with pytest.raises(LaunchError, match=r"no kernel 'missing'.*'echo'.*'smem_fill'"):
        module.kernel("missing")


@pytest.mark.requires_sm90
def test_cluster_launch(module, buffer) -> None:
    module.kernel("block_ids")(buffer, grid=8, block=32, cluster=2)
    got = np.frombuffer(buffer.download(), dtype=np.uint32)
    assert list(got[:8]) == list(range(1, 9)) and got[8] == 0xCDCDCDCD
    with pytest.raises(LaunchError, match="not a multiple of cluster"):
        module.kernel("block_ids")(buffer, grid=3, block=32, cluster=2)


@pytest.mark.requires_sm80
def test_sm80_code_runs_on_newer_gpu_through_its_ptx(buffer) -> None:
    from tmakit import _driver
    from tmakit.build import compile_cuda

    code = compile_cuda(ECHO, arch="sm_80", name="echo80.cu")
    with code.load(0) as mod:
        assert mod.image == ("cubin" if _driver.device_arch(0).major == 8 else "ptx")
        mod.kernel("block_ids")(buffer, grid=3, block=32)
        got = np.frombuffer(buffer.download(), dtype=np.uint32)
        assert list(got[:4]) == [1, 2, 3, 0xCDCDCDCD]


@pytest.mark.requires_gpu
def test_kernel_for_another_gpu_is_refused() -> None:
    from tmakit import _driver
    from tmakit.build import compile_cuda

    here = _driver.device_arch(0)
    other = "sm_100a" if here.major < 10 else "sm_90a"
    with pytest.raises(UnsupportedDeviceError, match=f"{other}.*{here.sm}"):
        compile_cuda(ECHO, arch=other, name="other.cu").load(0)


@pytest.mark.requires_gpu
def test_closed_module_refuses_launch(buffer) -> None:
    from tmakit.build import load_module

    mod = load_module(ECHO)
    kernel = mod.kernel("block_ids")
    mod.close()
    mod.close()  # idempotent
    with pytest.raises(LaunchError, match="module was closed"):
        kernel(buffer, grid=1, block=32)


# ------------------------------------------------- CPU tests of Kernel against a recording stand-in driver


@pytest.fixture()
def fake_kernel(monkeypatch: pytest.MonkeyPatch):
    return fake_kernel_of(monkeypatch, parse_ptx_entries(HAND_PTX)["first"])


def test_kernel_launch_passes_params_by_pointer(fake_kernel) -> None:
    kernel, drv, _ = fake_kernel
    payload = bytes(range(128))
    kernel(0xABC0, 7, FakeDescriptor(payload), -0.5, 3, grid=(4, 2), block=128, stream=0x55)
    config, args = drv.launches[-1]
    assert args == [struct.pack("<Q", 0xABC0), b"\x07", payload, struct.pack("<d", -0.5), b"\x03\x00"]
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (4, 2, 1)
    assert (config.blockDimX, config.sharedMemBytes, int(config.hStream)) == (128, 0, 0x55)
    kernel(1, 8, FakeDescriptor(payload), 1.0, 4, grid=(4, 2), block=128, stream=0x55)
    assert drv.launches[-1][1][1] == b"\x08"


def test_kernel_shared_memory_opt_in(fake_kernel) -> None:
    kernel, drv, _ = fake_kernel
    args = (0, 0, b"\0" * 128, 0.0, 0)
    kernel(*args, grid=1, block=32, shared_mem=47 * 1024)
    assert drv.set_attrs == []
    kernel(*args, grid=1, block=32, shared_mem=100 * 1024)
    assert drv.set_attrs == [("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 100 * 1024)]
    kernel(*args, grid=1, block=32, shared_mem=90 * 1024)
    assert len(drv.set_attrs) == 1, "a smaller request needs no new opt-in"
    limit = 227 * 1024 - 1024
    with pytest.raises(LaunchError, match=f"shared_mem={limit + 1} .*1024 static.*{227 * 1024} bytes.*at most {limit}"):
        kernel(*args, grid=1, block=32, shared_mem=limit + 1)


def test_kernel_cluster_and_limits(fake_kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    from tmakit import Arch, _driver

    kernel, drv, _ = fake_kernel
    args = (0, 0, b"\0" * 128, 0.0, 0)
    kernel(*args, grid=(4, 2), block=64, cluster=(2, 2))
    attr = drv.launches[-1][0].attrs[0]
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (2, 2, 1)
    with pytest.raises(LaunchError, match=r"grid=\(3, 1, 1\) is not a multiple of cluster=\(2, 1, 1\)"):
        kernel(*args, grid=3, block=64, cluster=2)
    kernel(*args, grid=16, block=64, cluster=16)
    assert ("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1) in drv.set_attrs
    with pytest.raises(LaunchError, match=r"block=\(33, 32, 1\) has 1056 threads.*at most 1024"):
        kernel(*args, grid=1, block=(33, 32))
    monkeypatch.setattr(_driver, "device_arch", lambda ordinal=0: Arch(8, 0))
    with pytest.raises(LaunchError, match="cluster=.*needs sm_90.*sm_80"):
        kernel(*args, grid=4, block=64, cluster=4)


def test_kernel_pdl_attribute(fake_kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    """pdl=True adds programmatic stream serialization beside a cluster; bound launches keep it on other streams."""
    from tmakit import Arch, InvalidArgumentError, _driver

    kernel, drv, _ = fake_kernel
    args = (0, 0, b"\0" * 128, 0.0, 0)
    pdl_id = drv.real.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    kernel(*args, grid=4, block=64)
    assert drv.launches[-1][0].numAttrs == 0
    kernel(*args, grid=4, block=64, pdl=True)
    config = drv.launches[-1][0]
    assert config.numAttrs == 1 and config.attrs[0].id == pdl_id
    assert config.attrs[0].value.programmaticStreamSerializationAllowed == 1
    bound = kernel.bind(*args, grid=(4, 2), block=64, cluster=(2, 2), pdl=True)
    bound(stream=0x77)
    config = drv.launches[-1][0]
    assert int(config.hStream) == 0x77 and config.numAttrs == 2
    assert [a.id for a in config.attrs][1] == pdl_id and config.attrs[0].value.clusterDim.x == 2
    with pytest.raises(InvalidArgumentError, match="pdl.*must be True or False"):
        kernel(*args, grid=4, block=64, pdl=1)
    with pytest.raises(InvalidArgumentError, match="pdl.*must be True or False"):
        kernel.bind(*args, grid=4, block=64, pdl=1, checked=True)  # checked binds drop pdl, after its checks
    monkeypatch.setattr(_driver, "device_arch", lambda ordinal=0: Arch(8, 0))
    with pytest.raises(LaunchError, match="pdl=True .*needs sm_90.*sm_80.*pdl=False"):
        kernel(*args, grid=4, block=64, pdl=True)
    kernel(*args, grid=4, block=64)  # without it, sm_80 launches as before


def test_kernel_retries_once_without_context_and_reports_driver_errors(fake_kernel, monkeypatch) -> None:
    from tmakit import CudaDriverError, _driver

    kernel, drv, _ = fake_kernel
    made_current = []
    monkeypatch.setattr(_driver, "make_current", lambda device: made_current.append(device))
    args = (0, 0, b"\0" * 128, 0.0, 0)
    drv.fail_next = [drv.real.CUresult.CUDA_ERROR_INVALID_CONTEXT]
    kernel(*args, grid=1, block=32)
    assert made_current == [0] and len(drv.launches) == 1
    drv.fail_next = [drv.real.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES]
    with pytest.raises(CudaDriverError, match="cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        kernel(*args, grid=1, block=32)


def test_kernel_refuses_after_module_close(fake_kernel) -> None:
    kernel, drv, module = fake_kernel
    module._finalizer()
    with pytest.raises(LaunchError, match="module was closed"):
        kernel(0, 0, b"\0" * 128, 0.0, 0, grid=1, block=32)
    assert drv.launches == []


def test_bound_launch_packs_once_and_is_not_disturbed_by_other_launches(fake_kernel) -> None:
    kernel, drv, module = fake_kernel
    payload = bytes(range(128))
    bound = kernel.bind(16, 7, payload, 0.5, 3, grid=2, block=64)
    assert drv.launches == []  # binding launches nothing
    bound()
    kernel(99, 9, bytes(128), 1.5, 4, grid=3, block=32)  # repacks the kernel's own buffer
    bound()
    first, other, again = drv.launches
    assert first[1] == again[1] != other[1] and again[0].gridDimX == 2 and again[0].blockDimX == 64
    assert "grid=(2, 1, 1)" in repr(bound)
    with pytest.raises(LaunchError, match="takes 5 argument"):
        kernel.bind(16, 7, grid=1, block=32)
    module._finalizer()
    with pytest.raises(LaunchError, match="module was closed"):
        bound()
    assert len(drv.launches) == 3


def test_bound_launch_update_writes_only_that_argument(fake_kernel) -> None:
    kernel, drv, _ = fake_kernel
    payload = bytes(range(128))
    bound = kernel.bind(16, 7, payload, 0.5, 3, grid=2, block=64)
    bound()
    bound.update(1, 9)
    bound()
    bound.update(3, -2.0)
    bound()
    a, b, c = (args for _, args in drv.launches)
    assert a[1] == b"\x07" and b[1] == b"\x09" and b[0] == a[0] and b[2] == a[2] and b[3] == a[3]
    assert c[3] == struct.pack("<d", -2.0) and c[1] == b"\x09"
    assert bound.args[1] == 9 and bound.args[3] == -2.0
    with pytest.raises(LaunchError, match="argument 1 .*floats are not converted"):
        bound.update(1, 1.5)
    with pytest.raises(LaunchError, match="argument index 5 is not in 0..4"):
        bound.update(5, 1)
    kernel(99, 1, payload, 1.0, 4, grid=1, block=32)  # the kernel's own buffer: the bound one is untouched
    bound()
    assert drv.launches[-1][1] == c


def test_bound_launch_on_another_stream(fake_kernel) -> None:
    kernel, drv, _ = fake_kernel
    bound = kernel.bind(16, 7, bytes(128), 0.5, 3, grid=2, block=64, stream=0x55)
    bound()
    bound(stream=TorchLikeStream(0x77))
    bound()
    streams = [int(config.hStream) for config, _ in drv.launches]
    assert streams == [0x55, 0x77, 0x55]
    assert drv.launches[1][0].gridDimX == 2 and drv.launches[1][0].blockDimX == 64


def test_bound_launch_keeps_its_arguments_alive_or_refuses_once_gone(fake_kernel) -> None:
    import gc
    import weakref

    kernel, drv, _ = fake_kernel

    arr = FakeDeviceArray(ptr=0x10000)  # the bound launch takes its pointer
    alive = weakref.ref(arr)
    bound = kernel.bind(arr, 7, bytes(128), 0.5, 3, grid=1, block=32)
    del arr
    gc.collect()
    assert alive() is not None, "a bound launch keeps the arrays it took pointers from"
    bound()
    assert drv.launches[-1][1][0] == struct.pack("<Q", 0x10000)
    arr2 = FakeDeviceArray(ptr=0x20000)
    weak_bound = kernel.bind(arr2, 7, bytes(128), 0.5, 3, grid=1, block=32, keep_args=False)
    weak_bound()
    del arr2
    gc.collect()
    with pytest.raises(LaunchError, match="argument 0 was freed after bind\\(keep_args=False\\)"):
        weak_bound()
    assert len(drv.launches) == 2


def test_resident_blocks_is_occupancy_times_sms_and_refuses_what_cannot_fit(fake_kernel, monkeypatch) -> None:
    kernel, drv, _ = fake_kernel  # an H100 stand-in: 132 SMs, 227 KiB per block (fake_h100)
    assert kernel.resident_blocks(256, 49 * 1024 + 1024) == 132 * 4  # 4 x 50 KiB fit in 228 KiB
    assert ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 50 * 1024) in drv.set_attrs  # opted in first
    assert kernel.resident_blocks((32, 4), 0) == 132 * 16  # thread-limited
    drv.func_attrs["MAX_THREADS_PER_BLOCK"] = 2048
    monkeypatch.setattr(drv, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                        lambda func, threads, smem: (drv.real.CUresult.CUDA_SUCCESS, 0))
    with pytest.raises(LaunchError, match=r"block=\(64, 1, 1\) with shared_mem=0 bytes does not fit on one SM"):
        kernel.resident_blocks(64)
