# Quick start: `make demo` runs the main job on embedded defaults; `make test` runs the whole test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench bench-spark bench-spark-ccf bench-s3 bench-surface bench-engines bench-merge bench-scale bench-maintenance bench-lookup soak clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# compat mode: a path entry Spark's data source auto-discovery (top-level pyspark_* modules) can see
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m mere.demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools
	$(VENV)/bin/mypy
	# Three workers on two cores: the fault, PostgreSQL and S3 suites wait on processes they start (a mixed
	# sample left the CPUs 30% idle with two workers and ran in 365 s instead of 483 s with three).
	$(PY) -m pytest -q -n 3

# The developer loop (~15 min on a shared 2-core machine): no PostgreSQL, S3, Spark, Dask, Ray or PyTorch (tests/conftest.py
# marks them by path), 5 Hypothesis examples per test (it caps their own counts too), spread over the cores;
# `make test` runs everything.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools
	$(VENV)/bin/mypy
	HYPOTHESIS_PROFILE=fast $(PY) -m pytest -q -x -n auto -m "not postgres and not spark and not s3 and not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/bench_core.py

bench-spark: $(STAMP)
	$(PY) bench/bench_spark.py

bench-spark-ccf: $(STAMP)
	$(PY) bench/bench_spark_ccf.py

bench-s3: $(STAMP)
	$(PY) bench/bench_s3.py

bench-surface: $(STAMP)
	$(PY) bench/bench_surface.py

bench-engines: $(STAMP)
	$(PY) bench/bench_engines.py

bench-merge: $(STAMP)
	$(PY) bench/bench_merge.py

bench-scale: $(STAMP)
	$(PY) bench/bench_scale.py

bench-maintenance: $(STAMP)
	$(PY) bench/bench_maintenance.py

soak: $(STAMP)
	$(PY) bench/bench_soak.py --minutes 10

bench-lookup: $(STAMP)
	$(PY) bench/bench_lookup.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
