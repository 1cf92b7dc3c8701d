# The front door. Every target bootstraps .venv itself, so a fresh clone needs only `make run`
# or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
IRIS_DATA_DIR ?= $(CURDIR)/.iris-data
PLUGIN_DIRS := $(patsubst %/setup.cfg,%,$(wildcard plugins/*/setup.cfg))
PLUGIN_TESTS := $(wildcard $(addsuffix /tests,$(PLUGIN_DIRS)))

.PHONY: run test lint bench faults apt-deps clean

$(BIN)/iris: setup.cfg pyproject.toml $(wildcard plugins/*/setup.cfg)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -e . $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

# Each plugin's own test extra too (the Web UI's browser tests need Playwright); plugins without
# one only get a warning.
$(VENV)/.dev-deps: $(BIN)/iris
	$(BIN)/python -m pip install -q -e '.[dev]' $(foreach dir,$(PLUGIN_DIRS),-e '$(dir)[test]')
	touch $@

IRIS_WEBUI_PORT ?= 8080

run: $(BIN)/iris
	@mkdir -p $(IRIS_DATA_DIR) && chmod 700 $(IRIS_DATA_DIR)
	@echo "Data folder: $(IRIS_DATA_DIR)"
	@echo "API token:   $(IRIS_DATA_DIR)/api-token (unless IRIS_API_TOKEN is set)"
	@echo "Web UI:      http://127.0.0.1:$(IRIS_WEBUI_PORT)/ (open the one-time login link printed below)"
	IRIS_DATA_DIR=$(IRIS_DATA_DIR) IRIS_REPO_DIR=$(CURDIR) IRIS_WEBUI_PORT=$(IRIS_WEBUI_PORT) \
		PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/iris serve

# System packages the suite needs (root on Debian only; elsewhere install them yourself).
apt-deps:
	@sh .ci/apt-deps.sh

test: apt-deps $(VENV)/.dev-deps lint
	$(BIN)/pytest tests $(PLUGIN_TESTS)

lint: $(VENV)/.dev-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(BIN)/iris
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# Crash trials (tests/faults): each kind TRIALS times, figures printed at the end.
TRIALS ?= 100
faults: apt-deps $(VENV)/.dev-deps
	IRIS_FAULT_TRIALS=$(TRIALS) $(BIN)/pytest tests/faults
