"""Same input, same output bytes: kernels and blobs do not depend on hash seeds or process state.

Each compilation runs in a fresh interpreter with a different PYTHONHASHSEED (set iteration order
changes with it), and the machine code / blob bytes must come out identical."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from snippets_core.plugins.targets import target_names

PROBE = r"""
import hashlib, sys
import snippets_core as sc
from snippets_core.frontends import builder as sb

x = sb.parameter([2, 8, 37], "f32", name="x")
y = sb.parameter([1, 8, 1], "f32", name="y")
a = sb.sigmoid(sb.multiply(sb.add(x, y), 0.5))
b = sb.softmax(sb.tanh(a), axis=-1)
m = sb.model([b, sb.relu(a)], name="det")
target = sys.argv[1]
config = {"snippets_mode": "IgnoreCallback"}
cm = sc.compile_model(m, target=target, config=config)
h = hashlib.sha256()
if target == "shave":
    h.update(cm.target_artifact)
else:
    for sg in cm.subgraphs:
        h.update(cm.target.obj.generate_subgraph(sg, cm.config, cm.target.host).kernel.code)
h.update(repr([(sg.name, [op.type_name for op in sg.body_ops]) for sg in cm.subgraphs]).encode())
print(len(cm.subgraphs), h.hexdigest())
"""


def _compile_in_fresh_process(target: str, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    done = subprocess.run([sys.executable, "-c", PROBE, target], check=False, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("target", ["x86_64_avx512", "shave"])
def test_same_model_same_bytes(target: str) -> None:
    if target not in target_names():
        pytest.skip(f"target {target} is not installed")
    if target == "x86_64_avx512":
        from snippets_core.plugins.targets import load_target

        reason = load_target(target).available()
        if reason:
            pytest.skip(reason)
    first = _compile_in_fresh_process(target, "1")
    second = _compile_in_fresh_process(target, "2")
    n_subgraphs = int(first.split()[0])
    assert n_subgraphs >= 1
    assert first == second
