# One entry point for newcomers and CI. Every target builds its own virtualenv from pinned requirements.
PY ?= python3.11
VENV := .venv
VENV_CUDA := .venv-cuda
BIN := $(VENV)/bin
DATA ?= .hub-data

.PHONY: venv venv-cuda demo test test-fast lint serve chromium nginx

$(VENV)/.stamp: requirements/cpu.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements/cpu.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

venv: $(VENV)/.stamp

# CUDA torch headers + nvcc toolchain helpers, for compiling the stable-ABI extension on a CPU machine.
$(VENV_CUDA)/.stamp: requirements/cuda-build.txt
	$(PY) -m venv $(VENV_CUDA)
	$(VENV_CUDA)/bin/pip install -q --upgrade pip
	$(VENV_CUDA)/bin/pip install -q -r requirements/cuda-build.txt
	touch $@

venv-cuda: $(VENV_CUDA)/.stamp

## The main job on the embedded default: local hub (SQLite + files on disk), build, publish, load.
demo: venv
	$(BIN)/kernel-hub demo --data $(DATA)

serve: venv
	$(BIN)/kernel-hub serve --host 127.0.0.1 --port 8080 --data $(DATA)

# Headless Chromium renders the hub's matrix page in tests/matrix (Debian package; root or sudo). Without
# apt the screenshot test skips and says so.
chromium:
	@command -v chromium >/dev/null || command -v google-chrome >/dev/null || \
	  { $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get update -q && \
	    $$([ "$$(id -u)" = 0 ] || echo sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } || \
	  echo "make chromium: could not install chromium; the matrix page screenshot test will be skipped"

# nginx (Debian package) is the load balancer of the fleet tests (tests/fleet) and the file server the serving
# benchmarks compare with. Without apt those tests skip and say so.
nginx:
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || \
	  { $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get update -q && \
	    $$([ "$$(id -u)" = 0 ] || echo sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx; } || \
	  echo "make nginx: could not install nginx; the fleet tests through a load balancer will be skipped"

## Style gate: one formatter, one linter, over the whole tree (what .ci/run runs first).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## The whole CPU test suite (what .ci/run runs).
test: venv venv-cuda chromium nginx lint
	KERNEL_HUB_CUDA_PYTHON=$(CURDIR)/$(VENV_CUDA)/bin/python TRITON_INTERPRET=1 $(BIN)/python -m pytest

test-fast: venv
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -x -q
