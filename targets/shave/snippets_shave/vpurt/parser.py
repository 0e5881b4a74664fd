"""Parse the text of :mod:`snippets_shave.vpurt.printer` back into a VPURT :class:`~snippets_shave.vpurt.ir.Module`.

A small recursive-descent parser over a token stream; any text it does not expect is a
:class:`VpurtParseError` naming the line and what was expected. Payload bytes are not in the text: the parsed
module's kernels and constants carry only their digest and size (they compare equal to the originals').
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeVar

from snippets_shave.abi import MemRef
from snippets_shave.blob import (
    DmaDescriptor, DpuOp, DpuTask, Executor, KernelKind, Location, Target, TensorRef, Version,
)  # fmt: skip
from snippets_shave.constants import WIN_F, DType, MemLocation
from snippets_shave.errors import BlobFormatError
from snippets_shave.schedule import cmx_memref
from snippets_shave.vpurt.ir import (
    BarrierDecl,
    DmaOp,
    GraphConfig,
    KernelArg,
    KernelDecl,
    MemRefArg,
    Module,
    Payload,
    ScalarArg,
    SwKernelOp,
    TaskListOp,
    VpurtTask,
)
from snippets_shave.vpurt.printer import MEMORY, QUEUE_WORDS, SCALAR_TYPES, TYPE_NAMES
from snippets_shave.vpurt.serialize import explicit_memref


T = TypeVar("T")


class VpurtParseError(BlobFormatError):
    """VPURT text that does not parse; the message names the line and the expected token."""


_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKEN = re.compile(
    rf"""(?P<ws>\s+)|(?P<comment>//[^\n]*)|(?P<string>{_STRING})|(?P<sym>@(?:{_STRING}|[A-Za-z_][\w.$]*))
    |(?P<value>%[\w.]+)|(?P<shape>\*x[a-z]+\d*|(?:\d+x)+[a-z]+\d*)
    |(?P<num>-?(?:\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+|\d+|inf)|nan)
    |(?P<ident>[A-Za-z_][\w.]*)|(?P<punct>::|->|[{{}}()\[\]<>,=:+])""",
    re.VERBOSE,
)
_DTYPES = {v: k for k, v in TYPE_NAMES.items()}
_SCALAR_KINDS = {v: k for k, v in SCALAR_TYPES.items()}
_LOCATIONS = {v: k for k, v in MEMORY.items()}


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise VpurtParseError(f"line {line}: unexpected character {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind not in ("ws", "comment"):
                self.tokens.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    # -- token helpers -----------------------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.tokens[j][1] if j < len(self.tokens) else ""

    def fail(self, expected: str) -> VpurtParseError:
        if self.i >= len(self.tokens):
            return VpurtParseError(f"end of text: expected {expected}")
        _, text, line = self.tokens[self.i]
        return VpurtParseError(f"line {line}: expected {expected}, got {text!r}")

    def take(self, kind: str | None = None, text: str | None = None) -> str:
        if self.i >= len(self.tokens):
            raise self.fail(text or kind or "a token")
        k, t, _ = self.tokens[self.i]
        if (kind is not None and k != kind) or (text is not None and t != text):
            raise self.fail(repr(text) if text else kind or "a token")
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek() == text:
            self.i += 1
            return True
        return False

    def expect(self, *texts: str) -> None:
        for t in texts:
            self.take(text=t)

    def int(self) -> int:
        return int(self.take("num"))

    def string(self) -> str:
        return str(json.loads(self.take("string")))

    def symbol(self) -> str:
        s = self.take("sym")[1:]
        return str(json.loads(s)) if s.startswith('"') else s

    def items(self, close: str, item: Callable[[int], T]) -> tuple[T, ...]:
        """Comma-separated ``item(index)`` up to the ``close`` token (the opening one already taken)."""
        out: list[T] = []
        while not self.accept(close):
            if out:
                self.expect(",")
            out.append(item(len(out)))
        return tuple(out)

    def ints(self) -> tuple[int, ...]:
        self.expect("[")
        return self.items("]", lambda _: self.int())

    def attrs(self) -> dict[str, object]:
        """``{key = value, ...}`` with int, float, string, symbol or int-list values."""
        self.expect("{")
        out: dict[str, object] = {}
        while not self.accept("}"):
            if out:
                self.expect(",")
            key = self.take("ident")
            self.expect("=")
            kind = self.tokens[self.i][0] if self.i < len(self.tokens) else ""
            if kind == "string":
                out[key] = self.string()
            elif kind == "sym":
                out[key] = self.symbol() + ("::" + self.symbol() if self.accept("::") else "")
            elif self.peek() == "[":
                out[key] = self.ints()
            else:
                out[key] = self.int()
        return out

    def shape(self) -> tuple[tuple[int, ...], DType]:
        t = self.take()
        *dims, name = t.split("x")
        if name not in _DTYPES:
            raise VpurtParseError(f"{t!r}: unknown element type {name!r}")
        return tuple(int(d) for d in dims), _DTYPES[name]

    # -- leaves ------------------------------------------------------------------------------------------------
    def tensor(self) -> TensorRef:
        self.expect("ref", "<")
        name = self.string()
        self.expect(",")
        dims, dtype = self.shape()
        self.expect(",")
        where = "@" + self.symbol()
        if where not in _LOCATIONS:
            raise self.fail("a memory space " + ", ".join(_LOCATIONS))
        self.expect("[")
        index = self.int()
        self.expect("]", "+")
        offset = self.int()
        strides: tuple[int, ...] = ()
        order = 0
        while self.accept(","):
            key = self.take("ident")
            self.expect("=")
            if key == "strides":
                strides = self.ints()
            elif key == "order":
                order = self.int()
            else:
                raise VpurtParseError(f"ref<...>: unknown field {key!r}")
        self.expect(">")
        return TensorRef(name, dtype, dims, _LOCATIONS[where], index, offset, strides, order)

    def memref(self) -> MemRef:
        self.expect("memref", "<")
        dims, dtype = self.shape()
        self.expect(",")
        if self.take("sym") != "@CMX_NN":
            raise self.fail("@CMX_NN")
        self.expect("+")
        addr = WIN_F + self.int()
        self.expect(",", "strides", "=")
        strides = self.ints()
        self.expect(",", "order", "=")
        order = self.ints()
        static, location = True, MemLocation.NN_CMX
        while self.accept(","):
            if self.accept("dynamic"):
                static = False
            else:
                self.expect("location", "=")
                location = MemLocation[self.take("ident")]
        self.expect(">")
        return MemRef(addr, dims, dtype, order, strides, static, location)

    def kernel_arg(self, index: int) -> KernelArg:
        if self.peek() == "ref":
            ref = self.tensor()
            arg = KernelArg(explicit_memref(cmx_memref(ref)), ref)
        else:
            m = self.memref()
            arg = KernelArg(m, self.tensor() if self.accept("of") else None)
        self.expect("as")
        if self.take("value") != f"%arg{index}":
            raise VpurtParseError(f"kernel operand {index} must be bound as %arg{index}")
        return arg

    # -- structure ---------------------------------------------------------------------------------------------
    def declaration(self) -> KernelDecl | None:
        """A ``func.func private``; None for the native runtime's placeholder."""
        self.expect("func.func", "private")
        name = self.symbol()
        self.expect("(")
        memrefs: list[MemRefArg] = []
        scalars: list[ScalarArg] = []
        while not self.accept(")"):
            if memrefs or scalars:
                self.expect(",")
            arg = self.take("value")[1:]
            self.expect(":")
            if self.accept("memref"):
                self.expect("<")
                unranked = self.take("shape")
                if not unranked.startswith("*x") or unranked[2:] not in _DTYPES:
                    raise VpurtParseError(f"@{name}: argument %{arg} must be memref<*xT, ...>, got {unranked!r}")
                dtype = _DTYPES[unranked[2:]]
                self.expect(",")
                self.take("sym")
                self.expect(">")
                memrefs.append(MemRefArg(arg, dtype))
            else:
                scalars.append(ScalarArg(arg, _SCALAR_KINDS[self.take("ident")]))
        self.expect("attributes")
        a = self.attrs()
        if a.get("VPU.kernel_code") == "native":
            return None
        code = Payload(str(a["VPU.kernel_code"]), int(a["VPU.code_size"]))  # type: ignore[call-overload]
        return KernelDecl(
            name, tuple(memrefs), tuple(scalars), code, int(a["VPU.entry_offset"]),  # type: ignore[call-overload]
            int(a["VPU.abi_version"]), KernelKind[str(a["VPU.kind"])],  # type: ignore[call-overload]
        )  # fmt: skip

    def refs_list(self) -> tuple[TensorRef, ...]:
        self.expect("(")
        return self.items(")", lambda _: self.tensor())

    def barrier(self) -> int:
        v = self.take("value")
        if not v.startswith("%b"):
            raise self.fail("a barrier %bN")
        return int(v[2:])

    def barrier_ids(self, keyword: str) -> tuple[int, ...]:
        if not self.accept(keyword):
            return ()
        self.expect("(")
        return self.items(")", lambda _: self.barrier())

    def dma(self) -> DmaOp:
        self.expect("VPUIP.DMA")
        engine = int(self.attrs()["port"])  # type: ignore[call-overload]
        self.expect("inputs", "(")
        src = self.tensor()
        self.expect(")", "outputs", "(")
        dst = self.tensor()
        self.expect(")")
        descriptor = None
        if self.accept("descriptor"):
            self.expect("(", "len", "=")
            length = self.int()
            self.expect(",", "src", "=")
            src_d = self.ints()
            self.expect(",", "dst", "=")
            dst_d = self.ints()
            self.expect(",", "planes", "=")
            planes = self.int()
            self.expect(")")
            descriptor = DmaDescriptor(length, *src_d, *dst_d, planes)
        return DmaOp(src, dst, engine, descriptor)

    def dpu(self) -> DpuTask:
        self.expect("VPUIP.NCE.DPUTask")
        a = self.attrs()
        self.expect("inputs", "(")
        src = self.tensor()
        self.expect(")")
        weights = None
        if self.accept("weights"):
            self.expect("(")
            weights = self.tensor()
            self.expect(")")
        self.expect("outputs", "(")
        dst = self.tensor()
        self.expect(")")
        return DpuTask(
            DpuOp[str(a["op"])], src, dst, weights,
            *(tuple(a[k]) for k in ("kernel", "strides", "pads", "dilations")),  # type: ignore[call-overload]
            transpose_b=bool(a["transpose_b"]), exclude_pad=bool(a["exclude_pad"]), layer=str(a["layer"]),
            variant=int(a["variant"]), variants=int(a["variants"]),  # type: ignore[call-overload]
        )  # fmt: skip

    def sw_kernel(self, kernels: dict[str, KernelDecl]) -> SwKernelOp:
        self.expect("VPUIP.SW.Kernel")
        if self.symbol() != "VPU.SW":
            raise self.fail("@VPU.SW")
        self.expect("::")
        name = self.symbol()
        if name not in kernels:
            raise VpurtParseError(f"VPUIP.SW.Kernel: @VPU.SW::@{name} is not declared")
        decl = kernels[name]
        self.expect("on", "tile")
        tile = self.int()
        groups: list[tuple[KernelArg, ...]] = []
        for keyword in ("inputs", "outputs"):
            self.expect(keyword, "(")
            first = sum(map(len, groups))
            groups.append(self.items(")", lambda k, first=first: self.kernel_arg(first + k)))  # type: ignore[misc]
        self.expect("{")
        values: dict[str, float | int] = {}
        while self.peek() != "VPUIP.SW.Kernel.run":
            var = self.take("value")[1:]
            self.expect("=", "arith.constant")
            number = self.take("num")
            self.expect(":")
            kind = _SCALAR_KINDS[self.take("ident")]
            values[var] = float(number) if kind == "f" else int(number)
        self.expect("VPUIP.SW.Kernel.run", "(")
        operands = list(self.items(")", lambda _: self.take("value")[1:]))
        self.expect("}")
        n = len(groups[0]) + len(groups[1])
        want = [f"arg{i}" for i in range(n)] + [s.name for s in decl.scalars]
        if operands != want or sorted(values) != sorted(s.name for s in decl.scalars):
            raise VpurtParseError(f"VPUIP.SW.Kernel.run of @{name}: operands {operands}, expected {want}")
        scalars = tuple(values[s.name] for s in decl.scalars)
        return SwKernelOp(name, tile, groups[0], groups[1], scalars)

    def task(self, kernels: dict[str, KernelDecl]) -> VpurtTask:
        self.expect("VPURT.Task")
        a = self.attrs()
        waits = self.barrier_ids("waits")
        updates = self.barrier_ids("updates")
        self.expect("{")
        op: DmaOp | SwKernelOp | DpuTask
        if self.peek() == "VPUIP.DMA":
            op = self.dma()
        elif self.peek() == "VPUIP.NCE.DPUTask":
            op = self.dpu()
        else:
            op = self.sw_kernel(kernels)
        self.expect("}")
        return VpurtTask(int(a["id"]), str(a["name"]), op, waits, updates)  # type: ignore[call-overload]

    def module(self) -> Module:
        self.expect("module")
        name = self.symbol()
        self.expect("attributes")
        head = self.attrs()
        self.expect("{", "module")
        if self.symbol() != "VPU.SW":
            raise self.fail("@VPU.SW")
        self.expect("{")
        decls: list[KernelDecl] = []
        runtime: KernelDecl | None = None
        while not self.accept("}"):
            decl = self.declaration()
            if decl is None or decl.name == "runtime":
                runtime = decl
            else:
                decls.append(decl)
        constants: list[Payload] = []
        while self.accept("const.Declare"):
            if self.symbol() != f"cst{len(constants)}":
                raise self.fail(f"@cst{len(constants)}")
            a = self.attrs()
            constants.append(Payload(str(a["digest"]), int(a["size"])))  # type: ignore[call-overload]
        self.expect("func.func")
        if self.symbol() != "main":
            raise self.fail("@main")
        inputs = self.refs_list()
        self.expect("->")
        outputs = self.refs_list()
        self.expect("attributes")
        scratch = int(self.attrs()["VPU.scratch_bytes"])  # type: ignore[call-overload]
        self.expect("{")
        barriers: list[BarrierDecl] = []
        while self.peek().startswith("%b"):
            bid = int(self.take("value")[2:])
            self.expect("=")
            physical = -1
            if self.accept("VPURT.ConfigurePhysicalBarrier"):
                self.expect("<")
                physical = self.int()
                self.expect(">")
            else:
                self.expect("VPURT.DeclareVirtualBarrier")
            a = self.attrs()
            counts = (int(a["producers"]), int(a["consumers"]))  # type: ignore[call-overload]
            barriers.append(BarrierDecl(bid, *counts, physical))
        by_name = {d.name: d for d in decls}
        task_lists: list[TaskListOp] = []
        while self.accept("VPURT.TaskList"):
            executor = Executor[self.symbol()]
            self.expect("[")
            self.expect(QUEUE_WORDS[executor])
            queue = self.int()
            self.expect("]", "{")
            tasks: list[VpurtTask] = []
            while not self.accept("}"):
                tasks.append(self.task(by_name))
            task_lists.append(TaskListOp(executor, queue, tuple(tasks)))
        self.expect("}", "VPURT.Graph", "{", "act_shaves", ":")
        act = self.attrs()
        self.expect("target", ":")
        t = self.attrs()
        self.expect("}", "}")
        if self.i != len(self.tokens):
            raise self.fail("the end of the text")
        major, minor, patch = (int(x) for x in str(head["VPU.version"]).split("."))
        target = Target(str(head["VPU.arch"]), **{k: int(v) for k, v in t.items()})  # type: ignore[call-overload]
        stacks = tuple(act["stack_configuration"])  # type: ignore[call-overload]
        graph = GraphConfig(stacks, runtime, int(act["runtime_version"]))  # type: ignore[call-overload]
        return Module(
            name, target, inputs, outputs, tuple(decls), tuple(constants), tuple(barriers), tuple(task_lists),
            graph, scratch, Version(major, minor, patch, str(head["VPU.producer"])),
        )  # fmt: skip


def parse_module(text: str) -> Module:
    """Parse VPURT text (as printed by :func:`~snippets_shave.vpurt.printer.print_module`) into a Module."""
    try:
        return _Parser(text).module()
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, VpurtParseError):
            raise
        raise VpurtParseError(f"VPURT text: {type(exc).__name__}: {exc}") from None
