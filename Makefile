PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: venv install graphviz test fuzz demo bench gpu-check docs vscode clean

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml is newer than the stamp. The extras pin
# torch==2.13.0 (the CPU build; an unpinned torch pulls a multi-GB CUDA build).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing taxcompile with its test extra into $(VENV)/"
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP) graphviz

# The demo needs only the report extra (torch and matplotlib), not the test extra: a
# stamp of its own (the test extra includes the report's packages).
DEMO_STAMP := $(VENV)/.stamp-demo

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing taxcompile with torch (CPU) and matplotlib into $(VENV)/"
	$(BIN)/pip install -e '.[report]'
	touch $(DEMO_STAMP)

# The benchmark peers (x-transformers, local-attention, entmax, torch-geometric) and
# matplotlib: a stamp of their own, so `make test` installs only the test extra.
BENCH_STAMP := $(VENV)/.stamp-bench

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $(BENCH_STAMP)

# Diagrams need graphviz's `dot` (Debian's graphviz package); install it when missing.
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing graphviz (for diagrams)"; \
	    apt-get update -qq >/dev/null && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; \
	  else \
	    echo "graphviz's dot is missing: install it with 'sudo apt-get install -y graphviz'"; \
	  fi; }

# One pytest worker per core (pytest-xdist, in the test extra): the suite takes about half
# the time on CI's 2 cores (12.5 -> 6.8 min on this 2-core machine).
# --durations: CI's log names the slowest tests (the suite must stay under 10 minutes idle);
# worksteal: an idle worker takes tests queued for the other (a minute-long report fixture
# near the end no longer leaves one core idle). One torch thread per worker (unless the
# environment sets one): two threads in each of two workers fight over two cores.
test: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -n auto --dist worksteal \
	  --durations=30

# The spec property's long profile (issue 23), for a nightly run: FUZZ_EXAMPLES generated
# and mutated specs (tests/specgen.py) must each be refused with a located error or compile
# and run forward and backward, and pass the oracles of tests/spec_oracles.py (a position
# term's one query, generate() with and without its cache); FUZZ_SEED=N draws other specs
# than CI's derandomized ones. A failure found goes to tests/data/regressions/ (see
# tests/test_spec_property.py); specgen.KNOWN_DEFECTS lists those not fixed yet. Then the
# torch round trip's expected failures (tests/test_torchread_roundtrip.py), minutes of capture.
FUZZ_EXAMPLES ?= 10000
fuzz: install
	TAXCOMPILE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(if $(FUZZ_SEED),TAXCOMPILE_FUZZ_SEED=$(FUZZ_SEED)) \
	  $(BIN)/python -m pytest tests/test_spec_property.py -p no:xdist -q \
	  -k "check_then_run" --hypothesis-show-statistics
	TAXCOMPILE_TORCHREAD_ALL=1 LSP_MUTANTS=1000 TAXCOMPILE_COMBOS_ALL=1 $(BIN)/python -m pytest \
	  tests/test_torchread_roundtrip.py tests/test_lsp_mutations.py -p no:xdist -q \
	  tests/test_combinations.py

demo: $(DEMO_STAMP) graphviz
	$(BIN)/taxcompile check specs/
	@echo
	@echo "Table III, derived from the specs' structure:"
	@$(BIN)/taxcompile table specs/
	@mkdir -p diagrams
	@for f in specs/*.attn; do \
	  $(BIN)/taxcompile diagram $$f -o diagrams/$$(basename $$f .attn).svg >/dev/null || exit 1; \
	done
	@echo
	@echo "PyTorch modules, one per model variant:"
	@$(BIN)/taxcompile compile specs/ -o generated
	@echo
	@echo "Running each generated model once (Config.tiny(), example_inputs()):"
	@$(BIN)/python -m taxcompile.run generated/*.py
	@echo
	@echo "Writing the HTML report of specs/ (its attention heatmaps train each model"
	@echo "briefly, one process per core the machine's load leaves free, at most 8; add"
	@echo "examples/ for the other models):"
	@$(BIN)/taxcompile report specs/ -o site --jobs auto
	@echo
	@echo "Where to look:"
	@echo "  generated/*.py   a standalone PyTorch module per model variant"
	@echo "  diagrams/*.svg   a diagram of every model"
	@echo "  site/index.html  Table III with every cell linked to its rationale, diagrams,"
	@echo "                   attention heatmaps and the generated code"

# Generated code against PyTorch baselines measured in the same run (see README).
bench: install $(BENCH_STAMP)
	$(BIN)/python -m benchmarks --json bench.json --plot docs

# The GPU proof kit (docs/gpu.md): correctness, kernels, speed and memory on one CUDA device,
# each stage under a time budget; writes gpu-report.json and gpu-report.md. DEVICE=cpu runs
# it at small sizes on a machine without one (as CI does); empty: cuda where there is one.
DEVICE ?=
gpu-check: $(STAMP) $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.gpu $(if $(DEVICE),--device $(DEVICE))

# The generated docs (tests fail when a committed one differs): the table of mechanisms from
# the registry, the combinations' validity matrix, the JSON Schemas of the JSON outputs.
docs: $(STAMP)
	$(BIN)/python -m taxcompile.docs_table -o docs/mechanisms.md
	$(BIN)/python -m taxcompile.combinations > docs/combinations.md
	$(BIN)/taxcompile schema classify -o docs/schema/classify.json
	$(BIN)/taxcompile schema study -o docs/schema/study.json
	$(BIN)/python -m taxcompile.vocabulary --textmate > editors/vscode/syntaxes/attn.tmLanguage.json

# The VS Code extension (editors/vscode/): its node modules from the committed lock file,
# then a .vsix by the pinned vsce. Needs node and npm (https://nodejs.org, or the
# distribution's `nodejs npm` packages).
vscode:
	@command -v npm >/dev/null || { echo "make vscode needs node and npm: install Node.js 18 or later (https://nodejs.org/ or apt-get install nodejs npm)"; exit 2; }
	cd editors/vscode && npm ci --no-audit --no-fund && npx vsce package --allow-missing-repository --skip-license
	@ls -l editors/vscode/*.vsix

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
