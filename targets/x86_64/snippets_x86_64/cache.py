"""The kernel cache: a second compile of the same Subgraph body with the same config reuses the kernel.

The key is a SHA-256 over a canonical text of the body (op types, attributes, element types, shapes,
constants' bytes, recorded port descriptors; node names are left out), the compile config that changes the
code (threads, disabled passes, positioned passes, the emitter classes of the jitters table, the sources of every
plugin that contributed passes or emitters, code-shaping target options, the CPU features) and the code version.
The cache lives in memory (bounded, oldest dropped first) and, when a directory is given by
``target_options["cache_dir"]`` or the environment variable ``SNIPPETS_CACHE_DIR``, on disk: per key a
``<name>.bin`` with the machine code and a ``<name>.json`` with the calling metadata, written atomically, where the
name (:func:`disk_name`) hashes the key with a fingerprint of the sources of the core and of this package (so no
stale code is ever served from disk; a process that caches in memory only never reads them).

:data:`FUNCTION_CACHE` does the same for the JIT functions made outside the LinearIR pipeline (conv, pooling and
reorder kernels), whose code depends on a small value (the geometry and the post-ops, not the weights): ResNet-50's
53 convolutions need 20-odd distinct kernels, and a second compile in another process reads them from disk.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import gc
import hashlib
import io
import json
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import ConfigError, SnippetsError
from snippets_core.runtime.gc_pause import collect_after_burst
from snippets_x86_64.kernel import Kernel, KernelInfo

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_x86_64.jit import JitFunction

#: bump when generated code or the kernel ABI changes, so stale disk entries are never loaded
CODE_VERSION = 2  # 2: runtime-parameter blocks (dynamic kernels), packed FC weights, conv primitives
ENV_CACHE_DIR = "SNIPPETS_CACHE_DIR"
MEMORY_ENTRIES = 256


def _canon(value: Any) -> str:
    """A stable text for an attribute value (no ids, no set order)."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        return f"array({arr.dtype.str},{list(arr.shape)},{hashlib.sha256(arr.tobytes()).hexdigest()})"
    if isinstance(value, np.generic):
        return f"{type(value).__name__}({value.item()!r})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_canon(k)}:{_canon(value[k])}" for k in sorted(value, key=repr)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canon(v) for v in value) + "]"
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_canon(v) for v in value)) + "}"
    return repr(value)


def body_text(model: Model) -> str:
    """The canonical text of a body Model: one line per node, inputs by position in the order."""
    from snippets_core.lowered.port_descriptor import RT_INFO_KEY
    from snippets_core.tokenization.tokenize_fc_snippets import FC_WEIGHT

    order = model.get_ordered_ops()
    index = {n.id: i for i, n in enumerate(order)}
    lines = []
    for i, n in enumerate(order):
        ins = ",".join(f"{index[inp.source.node.id]}.{inp.source.index}" for inp in n.inputs)
        attrs = ",".join(f"{a}={_canon(getattr(n, a, None))}" for a in n.ATTRS)
        outs = ",".join(f"{o.element_type}{o.shape}" for o in n.outputs)
        value = _canon(n.value) if hasattr(n, "value") and n.type_name in ("Constant", "Scalar") else ""
        ports = _canon(n.rt_info.get(RT_INFO_KEY, {}))
        # a FullyConnected weight Parameter is read packed: the same body without the mark is another kernel
        mark = " packed" if n.rt_info.get(FC_WEIGHT) else ""
        lines.append(f"{i}:{n.type_name}({ins}){{{attrs}}}{value}->{outs} {ports}{mark}")
    lines.append("params:" + ",".join(str(index[p.id]) for p in model.parameters))
    lines.append("results:" + ",".join(str(index[r.id]) for r in model.results))
    return "\n".join(lines)


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 of the sources of this package and of the core (the passes and emitters that made a kernel):
    any change to them makes new keys, so the disk cache never serves code of another version."""
    import snippets_core
    import snippets_x86_64

    h = hashlib.sha256()
    for pkg in (snippets_core, snippets_x86_64):
        root = Path(pkg.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def disk_name(key: str) -> str:
    """The file name of ``key``'s entry in a disk cache: the key with the code fingerprint, so an entry is never
    served to other code. Only here: a process that caches in memory alone never reads its sources (6 ms)."""
    return hashlib.sha256(f"{key} {code_fingerprint()}".encode()).hexdigest()


def cache_key(model: Model, config_parts: Iterable[Any]) -> str:
    """SHA-256 of the body's canonical text, the config parts and the code version (files on disk are named by
    :func:`disk_name`, which adds the code fingerprint)."""
    h = hashlib.sha256()
    h.update(f"x86_64_avx512 code v{CODE_VERSION}\n".encode())
    h.update(body_text(model).encode())
    for part in config_parts:
        h.update(b"\0" + _canon(part).encode())
    return h.hexdigest()


def _write_files(directory: Path, files: Iterable[tuple[str, bytes]]) -> None:
    """Each (name, data) written atomically (a temporary file, then a rename), in order: callers write the data
    first and the metadata last, so a reader that finds the metadata finds whole data."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files:
        path = directory / name
        tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)


class _MemoryCache:
    """The in-memory half of a cache: values by key, the oldest dropped past ``max_entries``; hit counters."""

    def __init__(self, max_entries: int = MEMORY_ENTRIES) -> None:
        self._mem: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries
        #: counters for tests and reports: memory hits, disk hits, misses
        self.stats = {"memory": 0, "disk": 0, "miss": 0}

    def _recall(self, key: str) -> Any:
        """The value kept for ``key`` (counted as a memory hit), or None."""
        with self._lock:
            value = self._mem.get(key)
            if value is not None:
                self._mem.move_to_end(key)
                self.stats["memory"] += 1
            return value

    def _remember(self, key: str, value: Any) -> None:
        with self._lock:
            self._mem[key] = value
            self._mem.move_to_end(key)
            while len(self._mem) > self.max_entries:
                self._mem.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._mem.clear()
            self.stats = {"memory": 0, "disk": 0, "miss": 0}


class KernelCache(_MemoryCache):
    """Kernels by key, in memory and optionally on disk. Thread-safe."""

    def get(self, key: str, cache_dir: str | Path | None) -> Kernel | None:
        kernel = self._recall(key)
        if kernel is not None:
            return kernel
        if cache_dir is not None:
            kernel = self._load(Path(cache_dir), key)
            if kernel is not None:
                self.stats["disk"] += 1
                self._remember(key, kernel)
                return kernel
        self.stats["miss"] += 1
        return None

    def put(self, key: str, kernel: Kernel, cache_dir: str | Path | None) -> None:
        self._remember(key, kernel)
        if cache_dir is not None:
            self._store(Path(cache_dir), key, kernel)

    @staticmethod
    def _load(directory: Path, key: str) -> Kernel | None:
        name = disk_name(key)
        meta_path, code_path = directory / f"{name}.json", directory / f"{name}.bin"
        try:
            meta = json.loads(meta_path.read_text())
            code = code_path.read_bytes()
        except (OSError, ValueError):
            return None
        if meta.get("code_version") != CODE_VERSION or meta.get("key") != key or len(code) != meta.get("code_len"):
            return None  # another version's entry, or a torn write: recompile
        return Kernel(code, int(meta["code_size"]), KernelInfo.from_json(meta["info"]), meta.get("lir"))

    @staticmethod
    def _store(directory: Path, key: str, kernel: Kernel) -> None:
        meta = {
            "key": key,
            "code_version": CODE_VERSION,
            "code_size": kernel.code_size,
            "code_len": len(kernel.code),
            "info": kernel.info.to_json(),
            "lir": kernel.lir_text,
        }
        # data first, metadata last: a reader that finds the metadata finds whole code (checked by length)
        name = disk_name(key)
        _write_files(directory, [(f"{name}.bin", kernel.code),
                                 (f"{name}.json", json.dumps(meta, sort_keys=True).encode())])


#: the process-wide kernel cache
KERNEL_CACHE = KernelCache()


def cache_dir_from(target_options: dict[str, Any]) -> str | None:
    """The disk cache directory: ``target_options["cache_dir"]``, else ``$SNIPPETS_CACHE_DIR``, else None."""
    d = target_options.get("cache_dir") or os.environ.get(ENV_CACHE_DIR)
    if not d:
        return None
    if not isinstance(d, (str, os.PathLike)):
        raise ConfigError(f"target_options.cache_dir must be a directory path, got {d!r}")
    if os.path.exists(d) and not os.path.isdir(d):
        source = "target_options.cache_dir" if target_options.get("cache_dir") else ENV_CACHE_DIR
        raise ConfigError(f"{source} {str(d)!r} is not a directory (the kernel cache keeps a file per kernel there)")
    return str(d)


#: the disk cache directory of the compile in progress (set by the target around a primitive's compile)
_FUNCTION_CACHE_DIR: contextvars.ContextVar[str | None] = contextvars.ContextVar("function_cache_dir", default=None)


@contextlib.contextmanager
def function_cache_dir(directory: str | None) -> Iterator[None]:
    """JIT functions built inside the ``with`` block are read from and written to ``directory`` (None: memory)."""
    token = _FUNCTION_CACHE_DIR.set(directory)
    try:
        yield
    finally:
        _FUNCTION_CACHE_DIR.reset(token)


class FunctionCache(_MemoryCache):
    """JIT functions by (kind, spec): ``get(kind, spec, build, argtypes)`` returns the function ``build()`` makes
    for ``spec`` (a value whose repr says everything the code depends on, e.g. a conv geometry and its post-ops),
    built once per process and, under :func:`function_cache_dir`, once per disk cache. Thread-safe."""

    @staticmethod
    def key(kind: str, spec: Any) -> str:
        text = f"x86_64_avx512 {kind} code v{CODE_VERSION}\n{spec!r}"
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, kind: str, spec: Any, build: Callable[[], JitFunction], argtypes: tuple[Any, ...]) -> JitFunction:
        from snippets_x86_64.jit import JitFunction

        key = self.key(kind, spec)
        fn = self._recall(key)
        if fn is not None:
            return fn
        directory = _FUNCTION_CACHE_DIR.get()
        loaded = self._load(Path(directory), key) if directory else None
        if loaded is not None:
            code, code_size, name = loaded
            fn = JitFunction(code, None, argtypes, name=name, code_size=code_size)
            self.stats["disk"] += 1
        else:
            fn = build()
            self.stats["miss"] += 1
            if directory:
                self._store(Path(directory), key, fn)
        self._remember(key, fn)
        return fn

    @staticmethod
    def _load(directory: Path, key: str) -> tuple[bytes, int, str] | None:
        name = disk_name(key)
        try:
            meta = json.loads((directory / f"{name}.fn.json").read_text())
            code = (directory / f"{name}.fn.bin").read_bytes()
        except (OSError, ValueError):
            return None
        if meta.get("code_version") != CODE_VERSION or meta.get("key") != key or len(code) != meta.get("code_len"):
            return None  # another version's entry, or a torn write: rebuild
        return code, int(meta["code_size"]), str(meta["name"])

    @staticmethod
    def _store(directory: Path, key: str, fn: JitFunction) -> None:
        meta = {"key": key, "code_version": CODE_VERSION, "code_size": fn.code_size, "code_len": len(fn.code),
                "name": fn.name}
        name = disk_name(key)
        _write_files(directory, [(f"{name}.fn.bin", fn.code),
                                 (f"{name}.fn.json", json.dumps(meta, sort_keys=True).encode())])


#: the process-wide cache of conv, pooling and reorder kernels
FUNCTION_CACHE = FunctionCache()


_MISSING = object()
#: input shapes whose executors (work tables) a ShapeCache keeps (least recently used dropped first)
SHAPE_CACHE = 64
#: the ShapeCache of each primitive Subgraph, by node id (ids are unique in the process), for ``ShapeCache.ahead``
_BY_NODE: weakref.WeakValueDictionary[int, ShapeCache] = weakref.WeakValueDictionary()
#: Subgraphs (element-wise, their output the shape of their first input) a chain of primitives is followed through
PASS_THROUGH_DEPTH = 2


class ShapeCache:
    """The executors of one primitive by input shape, the least recently used dropped past ``SHAPE_CACHE``: the
    first made by ``make(shape, None)``, the others by ``make(shape, first)``, which shares the first's packed
    weights and kernels. ``compiles`` counts the kernels built for shapes after the first (the process-wide
    function cache's builds while a shape's executor is made).

    A new shape's executors are made ahead along the chain of primitives (``follow``): the primitive that meets a
    new shape first makes its executor, works out the shape of its output (``output_shape``) and makes the
    executors of the primitives that read it as their first input (directly, or through an element-wise Subgraph
    such as a residual Add), and so on. A CNN's new shape then makes its tables in one burst, the table-making code
    and data warm in the caches, instead of one primitive at a time between kernels that evict
    them (measured: a make costs about twice as much between kernels)."""

    def __init__(self, make: Callable[[tuple[int, ...], Any], Any]) -> None:
        self.make = make
        self.executors: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        #: kernels built for shapes after the first
        self.compiles = 0
        self._first: Any = None
        self._lock = threading.Lock()  # calls from several Python threads: the order's moves and drops
        self._node: Any = None
        self._next: list[ShapeCache] | None = None
        #: (shape, executor) of the last call, one attribute (read and written whole by concurrent calls)
        self._last: tuple[Any, Any] = (None, None)

    def executor(self, shape: tuple[int, ...]) -> Any:
        """The executor for inputs of ``shape`` (None is one too: nothing to run): made on its first call, then
        kept."""
        last = self._last
        if last[0] == shape:  # the shape of the last call (most calls): already the most recently used
            return last[1]
        ex = self.executors.get(shape, _MISSING)
        if ex is not _MISSING:
            with self._lock:
                if shape in self.executors:
                    self.executors.move_to_end(shape)
            self._last = (shape, ex)
            return ex
        young = gc.get_count()[0]
        ex = self._made(shape)
        self._last = (shape, ex)
        if self._node is not None:
            self.ahead(shape, ex)
            # the burst's objects (kept by the caches) to the old generation now, not in a generation-1 collection of
            # ~10 shapes' objects later (``gc_pause.collect_after_burst``)
            now = gc.get_count()[0]
            collect_after_burst(now - young if now >= young else now)
        return ex

    def _made(self, shape: tuple[int, ...]) -> Any:
        """A new executor for ``shape``, kept."""
        first = self._first
        if first is None:
            ex = self._first = self.make(shape, None)
        else:
            stats = FUNCTION_CACHE.stats
            built = stats["miss"] + stats["disk"]
            ex = self.make(shape, first)
            built = stats["miss"] + stats["disk"] - built
            if built:  # (a new shape's burst: none, and no store)
                self.compiles += built
        executors = self.executors
        with self._lock:
            executors[shape] = ex
            while len(executors) > SHAPE_CACHE:
                if executors.popitem(last=False)[0] == self._last[0]:
                    self._last = (None, None)
        return ex

    def output_shape(self, shape: tuple[int, ...], ex: Any) -> tuple[int, ...] | None:
        """The shape of the output ``ex`` makes from an input of ``shape`` (None: not known before the call, and
        nothing is made ahead)."""
        return None

    def follow(self, node: Any) -> None:
        """This primitive is the Subgraph ``node``: make executors ahead for the primitives that read its output."""
        self._node = node
        _BY_NODE[node.id] = self

    def _consumers(self) -> list[ShapeCache]:
        """The primitives that read this one's output as their first input (found on the first new shape)."""
        if self._next is None:
            found: list[ShapeCache] = []
            todo = [(self._node, 0)]
            while todo:
                node, depth = todo.pop()
                if len(node.outputs) != 1:
                    continue
                for inp in node.outputs[0].targets:
                    other = _BY_NODE.get(inp.node.id)
                    if other is not None:
                        if inp.index == 0 and other not in found:
                            found.append(other)
                    elif inp.index == 0 and depth < PASS_THROUGH_DEPTH and _passes_shape(inp.node):
                        todo.append((inp.node, depth + 1))
            self._next = found
        return self._next

    def ahead(self, shape: tuple[int, ...], ex: Any) -> None:
        """Make the executors of the primitives down the chain for the shapes this new ``shape`` gives them."""
        todo = [(self, shape, ex)]
        while todo:
            cache, shape, ex = todo.pop()
            out = cache.output_shape(shape, ex)
            if out is None or 0 in out:  # (an empty tensor: some primitives hand it to their reference)
                continue
            for nxt in cache._next if cache._next is not None else cache._consumers():
                if out not in nxt.executors:
                    try:
                        made = nxt._made(out)
                    except SnippetsError:  # a shape the primitive refuses: its own call will say so, if it comes
                        continue
                    # its call comes next with this shape (the most recently used already): answered from ``_last``,
                    # no lock, no reorder of the LRU
                    nxt._last = (out, made)
                    todo.append((nxt, out, made))

    #: what the executors run, for describe()
    kind = "a table per input shape"

    def describe(self) -> str:
        """One line for ``CompiledModel.describe()``: the shapes kept and the kernels later shapes built."""
        return (f"{self.kind}: {len(self.executors)} shape(s) kept, {self.compiles} kernel(s) built after the first "
                f"shape")


def _passes_shape(node: Any) -> bool:
    """``node`` is a Subgraph whose one output has its first input's shape (as far as the model says: an element-wise
    Subgraph such as a residual Add), so a chain of primitives is followed through it."""
    from snippets_core.ir.ops.subgraph import Subgraph

    if not isinstance(node, Subgraph) or len(node.outputs) != 1 or not node.inputs:
        return False
    a, b = node.inputs[0].shape, node.outputs[0].shape
    return a.rank_is_static and b.rank_is_static and a.sym_dims == b.sym_dims


def _read_npy(path: Path) -> np.ndarray:
    """A ``.npy`` file read straight into a 64-byte-aligned array of its own (one pass: the kernels want the packed
    weights aligned, and a memory map would be paged in, then copied)."""
    from snippets_x86_64.aligned import empty_aligned

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"{path}: .npy format {version} (np.save writes 1.0 or 2.0)")
        shape, fortran, dtype = read_header(f)
        if fortran or dtype.hasobject:
            raise ValueError(f"{path}: not a C-ordered plain array")
        out = empty_aligned(shape, dtype, 0)
        view = memoryview(out.reshape(-1).view(np.uint8))
        if f.readinto(view) != out.nbytes:
            raise ValueError(f"{path}: truncated")
    return out


#: bytes of a weight from which ArrayCache.key hashes its two halves on two threads
HASH_SPLIT_BYTES = 1 << 20


def _helper_pool() -> Any:
    from snippets_x86_64.conv import helper_pool

    return helper_pool()


class ArrayCache:
    """Arrays computed at compile time from constants (packed conv weights), on disk under
    :func:`function_cache_dir` only: ``get(kind, spec, sources, build)`` returns ``build()``'s arrays, read back from
    ``<key>.<i>.npy`` (into aligned arrays of their own) when an earlier compile stored them. The key hashes
    ``spec``'s repr and the bytes of ``sources``, so other weights never match."""

    def __init__(self) -> None:
        #: disk hits, misses (built; stored when a directory is set)
        self.stats = {"disk": 0, "miss": 0}

    @staticmethod
    def key(kind: str, spec: Any, sources: Iterable[np.ndarray | None]) -> str:
        h = hashlib.sha256(f"x86_64_avx512 {kind} code v{CODE_VERSION} {code_fingerprint()}\n{spec!r}".encode())
        for a in sources:
            if a is None:
                h.update(b"\0none")
                continue
            a = np.ascontiguousarray(a)
            h.update(f"\0{a.dtype.str}{a.shape}".encode())
            data = memoryview(a).cast("B")
            pool = _helper_pool() if len(data) >= HASH_SPLIT_BYTES else None
            if pool is None:
                h.update(data)
            else:  # a large weight's halves hashed side by side (hashlib drops the GIL): ResNet-50's 94 MB, 47 ms
                half = len(data) // 2
                second = pool.submit(lambda d: hashlib.sha256(d).digest(), data[half:])
                h.update(hashlib.sha256(data[:half]).digest())
                h.update(second.result())
        return h.hexdigest()

    def get(self, kind: str, spec: Any, sources: Iterable[np.ndarray | None],
            build: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        directory = _FUNCTION_CACHE_DIR.get()
        if not directory:
            return build()
        path = Path(directory)
        key = self.key(kind, spec, sources)
        loaded = self._load(path, key)
        if loaded is not None:
            self.stats["disk"] += 1
            return loaded
        self.stats["miss"] += 1
        arrays = build()
        self._store(path, key, arrays)
        return arrays

    @staticmethod
    def _load(directory: Path, key: str) -> tuple[np.ndarray, ...] | None:
        try:
            meta = json.loads((directory / f"{key}.arrays.json").read_text())
            if meta.get("code_version") != CODE_VERSION or meta.get("key") != key:
                return None
            arrays = tuple(_read_npy(directory / f"{key}.{i}.npy") for i in range(meta["count"]))
        except (OSError, ValueError, KeyError):
            return None
        if [list(a.shape) for a in arrays] != meta.get("shapes"):
            return None  # a torn or foreign entry: rebuild
        return arrays

    @staticmethod
    def _store(directory: Path, key: str, arrays: tuple[np.ndarray, ...]) -> None:
        files = []
        for i, a in enumerate(arrays):  # the arrays first, the metadata last: a reader that finds it finds them
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(a))
            files.append((f"{key}.{i}.npy", buf.getvalue()))
        meta = {"key": key, "code_version": CODE_VERSION, "count": len(arrays),
                "shapes": [list(a.shape) for a in arrays]}
        _write_files(directory, [*files, (f"{key}.arrays.json", json.dumps(meta, sort_keys=True).encode())])


#: the process-wide cache of packed conv weights
ARRAY_CACHE = ArrayCache()


def cached_pack_weights(w: np.ndarray, geo: Any, scale: np.ndarray | None, shift: np.ndarray | None,
                        ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """:func:`snippets_x86_64.conv.pack_weights`, read from the disk cache when an earlier compile packed the same
    weight, scale and shift for the same geometry."""
    from snippets_x86_64.conv import pack_weights

    def build() -> tuple[np.ndarray, ...]:
        packed, bias, offsets = pack_weights(w, geo, scale, shift)
        return packed, bias, np.asarray(offsets, dtype=np.int64)

    packed, bias, offsets = ARRAY_CACHE.get("pack_weights", geo, (w, scale, shift), build)
    return packed, bias, [int(o) for o in offsets]
#: the signature of the native pool's harness kernels: ``f(unused, args, start, count)``
HARNESS_ARGTYPES = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
