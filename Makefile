# aster-forge developer commands. Every target bootstraps .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: chromium venv test lint format demo bench bench-check chaos mutants docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	# dev and docs are dependency groups (PEP 735): pip >= 25.1 installs them with --group.
	$(BIN)/python -m pip install --quiet --group dev --group docs -e '.[all]'
	touch $(STAMP)

venv: $(STAMP)

# The browser test drives Debian's chromium (never a downloaded browser); install it when missing.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@test -x $(CHROMIUM) || (command -v apt-get >/dev/null && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) || echo "make: chromium unavailable; the browser test will skip outside CI"

test: $(STAMP) chromium
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src tests benchmarks

format: $(STAMP)
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

demo: $(STAMP)
	$(BIN)/aster-forge demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-check: $(STAMP)
	$(BIN)/python -m benchmarks.check

chaos: $(STAMP)
	$(BIN)/python -m pytest tests/chaos -m slow --timeout=900 -p no:cacheprovider

# Mutation check of the reliability tests (committed tree, scratch copies; see docs/reliability.md).
mutants: $(STAMP)
	$(BIN)/python -m tests.chaos.mutants

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage htmlcov dist build
