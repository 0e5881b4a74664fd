"""The JIT reorders (NCHW <-> NHWC, the kernels AssignLayouts' Reorder Subgraphs run on x86_64_avx512) against
numpy's strided copy, on ResNet/Inception-sized activations, one thread, into a preallocated destination.

    python bench/reorder.py [--repeat 50]

Columns: microseconds per call (best of ``--repeat``) for the JIT kernel and for ``np.copyto(dst, x.transpose(..))``,
and the bytes moved (read + write) per second.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from snippets_core.ir.layout import NHWC, PLAIN
from snippets_x86_64.reorder import ReorderExecutor

SHAPES = [(1, 3, 224, 224), (1, 64, 112, 112), (1, 64, 56, 56), (1, 256, 56, 56), (1, 192, 28, 28), (1, 2048, 7, 7)]


def best(f: Callable[[], object], repeat: int) -> float:
    f()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    print(f"{'shape':18} {'direction':13} {'JIT us':>8} {'GB/s':>6} {'numpy us':>9} {'GB/s':>6}")
    for shape in SHAPES:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        for src, dst in ((PLAIN, NHWC), (NHWC, PLAIN)):
            a = x if src is PLAIN else np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
            out_shape = (shape[0], shape[2], shape[3], shape[1]) if dst is NHWC else shape
            buf = np.empty(out_shape, np.float32)
            ex = ReorderExecutor(src, dst, shape, np.float32, 1, alloc=lambda s, b=buf: b)
            view = a.transpose(0, 2, 3, 1) if dst is NHWC else a
            t_jit = best(lambda: ex.run(a), args.repeat)
            t_np = best(lambda: np.copyto(buf, view), args.repeat)
            moved = 2 * x.nbytes
            print(f"{'x'.join(map(str, shape)):18} {src.name + '->' + dst.name:13} {t_jit * 1e6:8.1f} "
                  f"{moved / t_jit / 1e9:6.1f} {t_np * 1e6:9.1f} {moved / t_np / 1e9:6.1f}")


if __name__ == "__main__":
    main()
