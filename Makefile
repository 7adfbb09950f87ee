# EdgePath — the two commands of the README's quick start are `make demo` and `make test`.
.PHONY: setup demo test lint clean

setup:
	@scripts/setup.sh

demo: setup
	@.venv/bin/python scripts/demo.py

test: setup
	@.venv/bin/python -m pytest

lint: setup
	@.venv/bin/ruff check service client-agent tests scripts
	@.venv/bin/ruff format --check service client-agent tests scripts
	@if command -v cargo >/dev/null; then cd service/native && cargo fmt --check && cargo clippy --release --quiet -- -D warnings; fi

clean:
	rm -rf .venv out
