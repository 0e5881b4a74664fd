"""The VPURT IR: the compiler's last representation of a schedule, from which the blob is serialized.

It follows the Software Layers HLD's "Kernel Representation in the Compiler": ``@VPU.SW`` kernel declarations
(:class:`KernelDecl`, the arguments contract of each kernel), ``VPUIP.SW.Kernel`` tasks with their ``.run``
argument mapping and scalar constants (:class:`SwKernelOp`), ``VPUIP.DMA`` (:class:`DmaOp`), ``VPURT.Task``
with waits/updates barriers (:class:`VpurtTask`), ``VPURT.TaskList``, barrier declarations (virtual, or
configured on a physical id: :class:`BarrierDecl`) and ``VPURT.Graph`` with the stack configuration
(:class:`GraphConfig`). A DPU variant (``VPUIP.NCE.DPUTask``) is the blob's
:class:`~snippets_shave.blob.DpuTask` value itself: its fields are the IR's (docs/dpu.md). Values are frozen;
byte payloads (kernel ELFs, constants) travel beside the IR in :class:`Payload` and compare by their digest, so a module parsed from its printed text equals the original.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from snippets_shave.abi import MemRef
from snippets_shave.blob import DmaDescriptor, DpuTask, Executor, KernelKind, Target, TensorRef, Version
from snippets_shave.constants import RUNTIME_VERSION, DType


@dataclass(frozen=True)
class Payload:
    """Bytes the IR refers to (a kernel ELF, a constant): equal when their digests are equal."""

    digest: str
    size: int
    data: bytes = field(default=b"", compare=False, repr=False)

    @staticmethod
    def of(data: bytes) -> Payload:
        return Payload("sha256:" + hashlib.sha256(data).hexdigest()[:32], len(data), bytes(data))


@dataclass(frozen=True)
class MemRefArg:
    """A memref argument of a kernel declaration: ``memref<*xf16, @CMX_NN>`` (rank and dims per invocation)."""

    name: str
    dtype: DType = DType.UNDEFINED  # UNDEFINED: no invocation says which element type it takes


@dataclass(frozen=True)
class ScalarArg:
    name: str
    kind: str  # "f" | "i" | "b"


@dataclass(frozen=True)
class KernelDecl:
    """``func.func private @name(memrefs..., scalars...) attributes {VPU.kernel_code = ...}``."""

    name: str
    memrefs: tuple[MemRefArg, ...]
    scalars: tuple[ScalarArg, ...]
    code: Payload  # the kernel ELF
    entry_offset: int = 0
    abi_version: int = 1
    kind: KernelKind = KernelKind.COMPUTE

    @property
    def params_signature(self) -> str:
        return "m" * len(self.memrefs) + ":" + "".join(s.kind for s in self.scalars)


@dataclass(frozen=True)
class KernelArg:
    """One memref operand of a kernel task: the MemRefData it gets, and the CMX buffer it names (if known)."""

    memref: MemRef  # fully explicit: order and strides always given
    tensor: TensorRef | None = None


@dataclass(frozen=True)
class SwKernelOp:
    """``VPUIP.SW.Kernel @VPU.SW::@kernel on tile T inputs(...) outputs(...) { VPUIP.SW.Kernel.run(...) }``."""

    kernel: str
    tile: int
    inputs: tuple[KernelArg, ...]
    outputs: tuple[KernelArg, ...]
    scalars: tuple[float | int, ...] = ()  # the run's constants, in the declaration's scalar order


@dataclass(frozen=True)
class DmaOp:
    """``VPUIP.DMA {port = engine} inputs(src) outputs(dst)`` with an optional strided descriptor."""

    src: TensorRef
    dst: TensorRef
    engine: int = 0
    descriptor: DmaDescriptor | None = None


@dataclass(frozen=True)
class VpurtTask:
    """``VPURT.Task waits(...) updates(...) { op }``: scheduling information around one operation."""

    id: int
    name: str
    op: DmaOp | SwKernelOp | DpuTask
    waits: tuple[int, ...] = ()
    updates: tuple[int, ...] = ()


@dataclass(frozen=True)
class TaskListOp:
    """``VPURT.TaskList @DMA [engine N]``, ``@ACT_SHAVE [tile N]`` or ``@DPU [dpu N]``: one queue, in order."""

    executor: Executor
    queue: int
    tasks: tuple[VpurtTask, ...]


@dataclass(frozen=True)
class BarrierDecl:
    """``VPURT.DeclareVirtualBarrier`` (physical = -1) or ``VPURT.ConfigurePhysicalBarrier <physical>``."""

    id: int
    producers: int
    consumers: int
    physical: int = -1


@dataclass(frozen=True)
class GraphConfig:
    """``VPURT.Graph``: the Runtime Kernel (``None``: none attached; the loader rejects such a blob) and SHAVE stacks
    per tile."""

    stack_configuration: tuple[int, ...]
    runtime: KernelDecl | None = None
    runtime_version: int = RUNTIME_VERSION


@dataclass(frozen=True)
class Module:
    """``module @network``: the whole compiled model."""

    name: str
    target: Target
    inputs: tuple[TensorRef, ...]
    outputs: tuple[TensorRef, ...]
    kernels: tuple[KernelDecl, ...]
    constants: tuple[Payload, ...]
    barriers: tuple[BarrierDecl, ...]
    task_lists: tuple[TaskListOp, ...]
    graph: GraphConfig
    scratch_bytes: int = 0
    version: Version = field(default_factory=Version)

    def kernel(self, name: str) -> KernelDecl:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def tasks(self) -> list[tuple[TaskListOp, VpurtTask]]:
        return [(tl, t) for tl in self.task_lists for t in tl.tasks]
