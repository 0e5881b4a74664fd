# One obvious way to run things: `make demo` and `make test` each set up .venv on first use
# (every distribution installed editable, with its test extras), then run.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# Every distribution in the tree: the core, plugins/*, targets/* (whichever have a pyproject.toml).
PYPROJECTS := pyproject.toml $(sort $(wildcard plugins/*/pyproject.toml targets/*/pyproject.toml))
DISTS := . $(patsubst %/pyproject.toml,%,$(filter-out pyproject.toml,$(PYPROJECTS)))
# Re-install only when a pyproject changed (or a distribution was added).
STAMP := $(VENV)/.snippets-installed
PYTEST_ARGS ?=

.PHONY: demo test install bytecode examples clean-venv

demo: $(STAMP)
	$(VPY) examples/demo.py

test: $(STAMP)
	@# pytest exits 5 when it collected no test: that is a failure here, said in words.
	@$(VPY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	exit $$rc

install: $(STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VPY) $(PYPROJECTS)
	$(VPY) -m pip install --quiet --disable-pip-version-check $(foreach d,$(DISTS),-e "$(d)[test]")
	@$(MAKE) --no-print-directory bytecode
	@touch $@

# Cached bytecode of every package in the tree, as a regular (non-editable) install writes it: a fresh process then
# reads it even under PYTHONDONTWRITEBYTECODE=1 instead of compiling each module's source (a first compile of
# ResNet-50 imports ~200 modules: ~0.25 s of CPU without it). A module edited later is recompiled in memory.
bytecode:
	$(VPY) -m compileall -q snippets_core $(foreach d,$(filter-out .,$(DISTS)),$(d)) > /dev/null

# Regenerate the example ONNX models (deterministic: the committed files come out byte for byte).
examples: $(STAMP)
	$(VPY) examples/make_examples.py

clean-venv:
	rm -rf $(VENV)
