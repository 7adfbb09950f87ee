# EdgePath — the two commands of the README's quick start are `make demo` and `make test`; `make help` lists the rest.
.PHONY: help setup demo test lint check proto native clean

#: The Python trees ruff checks (as tests/test_lint.py does).
PYTHON_TREES = service client-agent tests loadtest scripts proto

help: ## List the targets
	@awk -F':.*## ' '/^[a-z]+:.*## / {printf "  make %-7s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## Set up or re-check everything (scripts/setup.sh; idempotent, ~1 s when nothing changed)
	@scripts/setup.sh

# The quick targets set up only where .venv/ is missing; demo and test re-check everything first.
.venv/bin/python:
	@scripts/setup.sh

demo: setup ## Start the service, replay 5,000 situations over gRPC, print the summary
	@.venv/bin/python scripts/demo.py

test: setup ## The whole test suite (~25 min on 2 cores)
	@.venv/bin/python -m pytest

check: .venv/bin/python ## The fast checks of the suite: ruff format + lint, mypy, import contracts (under a minute)
	.venv/bin/ruff format --check $(PYTHON_TREES)
	.venv/bin/ruff check --output-format concise $(PYTHON_TREES)
	.venv/bin/mypy service/src/edgepath
	.venv/bin/mypy client-agent/src/edgepath_agent
	.venv/bin/lint-imports --config .importlinter --no-cache --no-logo
	.venv/bin/lint-imports --config .importlinter-agent --no-cache --no-logo

lint: setup ## ruff over the Python trees, and cargo fmt + clippy where cargo is found
	@.venv/bin/ruff check $(PYTHON_TREES)
	@.venv/bin/ruff format --check $(PYTHON_TREES)
	@if command -v cargo >/dev/null; then cd service/native && cargo fmt --check && cargo clippy --release --quiet -- -D warnings; fi

proto: .venv/bin/python ## Regenerate the protobuf/gRPC code from proto/ (then `make native` where cargo is found)
	.venv/bin/python proto/generate.py

native: .venv/bin/python ## Rebuild and install edgepath-native (service/native) into .venv (needs cargo)
	@command -v cargo >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || { echo "native: no Rust toolchain (cargo)" >&2; exit 1; }
	@rm -f .venv/.native.sha256
	@scripts/setup.sh

clean: ## Remove .venv/ and out/
	rm -rf .venv out
