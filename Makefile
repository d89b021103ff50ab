# Two commands on a fresh machine: `make report` (the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: report examples test lint setup setup-torch system-deps clean

report: $(STAMP)
	$(BIN)/symbolic report -o reports/llama-3-8b-h100.pdf

# Rebuild every example report in reports/ and the README's page pictures (committed, so a
# visitor sees the output without installing; tests/test_report_examples.py checks they are current).
examples: $(STAMP)
	for spec in reports/*.toml; do $(BIN)/symbolic report -q "$$spec" -o "$${spec%.toml}.pdf"; done
	pdftoppm -png -r 75 -f 1 -l 1 -singlefile reports/llama-3-8b-h100.pdf docs/report-page-1
	pdftoppm -png -r 75 -f 3 -l 3 -singlefile reports/llama-3-8b-h100.pdf docs/report-page-3

# Parallel workers (pytest-xdist), one per CPU; tests that share a module fixture stay together
# (tests/conftest.py). Hypothesis is derandomized, so every run checks the same inputs.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check symbolic tests benchmarks

setup: $(STAMP)

# Optional: torch (CPU build) and transformers for the cross-checks against real PyTorch
# modules and the measurement tests; without them those tests are skipped. The pins are the
# versions the cross-checks were written against (transformers 5 counts BERT's untied MLM
# bias differently from 4.x). peft and bitsandbytes (LoRA/QLoRA cross-checks) install with
# constraints-torch.txt pinning torch and transformers, so that pip leaves those two alone; so do
# torchvision, timm and diffusers (library models by name, issue 29; the index's torchvision is a CUDA
# build whose operators do not load beside the CPU torch: networks/torch_env.py makes it importable).
TORCH_STAMP := $(VENV)/.torch
setup-torch: $(TORCH_STAMP)

$(TORCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q transformers==5.24.0
	$(BIN)/python -m pip install -q -c constraints-torch.txt peft==0.21.2 bitsandbytes==0.50.2
	$(BIN)/python -m pip install -q -c constraints-torch.txt torchvision==0.28.0 timm==1.0.31 diffusers==0.42.1 torchinfo==1.8.0
	$(BIN)/python -m pip install -q -c constraints-torch.txt torchao==0.18.0
	touch $(TORCH_STAMP)

system-deps:
	bash scripts/system-deps.sh

$(STAMP): pyproject.toml
	bash scripts/system-deps.sh
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build dist *.egg-info
