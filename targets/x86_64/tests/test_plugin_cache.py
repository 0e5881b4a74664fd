"""The kernel cache knows the plugins: editing a plugin's pass never serves kernels compiled with the old code.

A plugin installed by entry point from a temporary directory adds a data-flow pass that scales every Scalar of a
body by FACTOR (an effect visible in the results). Each compile runs in a fresh interpreter (a process imports a
module once) with the same disk cache directory; the results against numpy say which pass made the kernel, and
the cache's own counters say whether it was generated or loaded from disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.avx512

PLUGIN_SRC = """
    from dataclasses import dataclass
    from typing import ClassVar

    import numpy as np

    from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass
    from snippets_core.plugins import hookimpl

    FACTOR = {factor}

    @dataclass(frozen=True)
    class ScaleScalars(Pass):
        name: ClassVar[str] = "scale-scalars"

        def run(self, body):
            scalars = [n for n in body.get_ordered_ops() if n.type_name == "Scalar"]
            for n in scalars:
                n.value = np.asarray(n.value * FACTOR, dtype=n.value.dtype)
            return bool(scalars) and FACTOR != 1

    @hookimpl
    def snippets_positioned_passes(target_name, config):
        return [PositionedPass(ScaleScalars(), PassPosition.pipeline_end())]
"""

SCRIPT = """
    import json, sys
    import numpy as np
    from snippets_core import compile_model
    from snippets_core.frontends import builder as sb
    from snippets_x86_64.cache import KERNEL_CACHE

    x = sb.Parameter("f32", (4, 64), name="x")
    m = sb.Model([sb.Result(sb.multiply(sb.relu(x), sb.constant(np.float32(2.0))), name="z")], [x])
    cm = compile_model(m, target="x86_64_avx512", config={"target_options": {"cache_dir": sys.argv[1]}})
    z = cm({"x": np.ones((4, 64), np.float32)})["z"]
    print(json.dumps({"z": float(z[0, 0]), "where": [w for _, op, w in cm.placement() if op == "Subgraph"],
                      "stats": KERNEL_CACHE.stats}))
"""


def compile_once(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), *sys.path])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a .pyc keyed by whole seconds could hide an edit made in the same second
    env.pop("SNIPPETS_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("SNIPPETS_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_editing_a_plugin_pass_makes_new_kernels_and_unchanged_source_hits_the_cache(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "scale_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scale-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[snippets.plugins]\nscale_plugin = scale_plugin_mod\n")
    source = site / "scale_plugin_mod.py"

    source.write_text(textwrap.dedent(PLUGIN_SRC.format(factor=1)))
    first = compile_once(tmp_path)
    assert first["z"] == 2.0 and first["where"] == ["x86_64_avx512"] and first["stats"]["miss"] == 1

    source.write_text(textwrap.dedent(PLUGIN_SRC.format(factor=3)))  # the same size: only the contents differ
    edited = compile_once(tmp_path)
    assert edited["z"] == 6.0, "the kernel of the old pass was served from the disk cache"
    assert edited["stats"]["miss"] == 1 and edited["stats"]["disk"] == 0

    again = compile_once(tmp_path)
    assert again["z"] == 6.0 and again["stats"]["disk"] == 1 and again["stats"]["miss"] == 0

    source.write_text(textwrap.dedent(PLUGIN_SRC.format(factor=1)))  # back to the first source: its kernel is on disk
    back = compile_once(tmp_path)
    assert back["z"] == 2.0 and back["stats"]["disk"] == 1 and back["stats"]["miss"] == 0
