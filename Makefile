# The two commands of the README: `make demo` and `make test`. Both install what they need.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
PYTHON     ?= python3
FUZZ_SECONDS ?= 60
LAUNCHER   := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
CMAKE_ARGS ?=

.PHONY: all deps deps-build build demo test test-unit test-peer test-asan test-fuzz test-gpu bench clean

all: build

# What `make test` needs (and `make demo`'s subset, `deps-build`): scripts/install-deps.sh.
deps:
	@bash scripts/install-deps.sh test
deps-build:
	@bash scripts/install-deps.sh build

# One configure for both commands; the log is printed only when it fails.
CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) $(CMAKE_ARGS)

build: deps
	$(CONFIGURE) -DQCONFORM_BUILD_TESTS=ON -DQCONFORM_BUILD_PYTHON=ON > $(BUILD).configure.log || (cat $(BUILD).configure.log; exit 1)
	@bash scripts/timed.sh build cmake --build $(BUILD) -j $(JOBS)

# The conformance procedure on a built-in seeded synthetic W8A8 model (or MODEL=... [TOKENIZER=...]).
# Builds the CLI alone: a newcomer does not wait for the tests, benchmarks and the Python extension.
MODEL     ?=
TOKENIZER ?= $(if $(MODEL),$(firstword $(wildcard $(dir $(MODEL))tok*.bin)))
DEMO_OUT  ?= demo-out
demo: deps-build
	$(CONFIGURE) > $(BUILD).configure.log || (cat $(BUILD).configure.log; exit 1)
	@bash scripts/timed.sh build-cli cmake --build $(BUILD) -j $(JOBS) --target qconform
	./$(BUILD)/qconform selfcheck
	./$(BUILD)/qconform conform --arms cpu:vllm-cutlass,cpu:vllm-triton --out $(DEMO_OUT) \
	  $(if $(MODEL),--model $(MODEL) --max-new 120) $(if $(TOKENIZER),--tokenizer $(TOKENIZER))

# Every test: unit (ctest, GPU tests skip without a GPU), Python peers, the sanitizer build, a bounded fuzz run.
test: test-unit test-peer test-asan test-fuzz

test-unit: build
	@cd $(BUILD) && bash $(CURDIR)/scripts/timed.sh ctest ctest --output-on-failure -j $(JOBS)

test-peer: build
	@QCONFORM_BUILD=$(abspath $(BUILD)) bash scripts/timed.sh pytest $(PYTHON) -m pytest -q tests/peer

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DQCONFORM_SANITIZE=ON -DQCONFORM_BUILD_TESTS=ON -DQCONFORM_WITH_CUDA=OFF \
	  -DQCONFORM_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-O1 $(LAUNCHER) > $(ASAN_BUILD).configure.log || (cat $(ASAN_BUILD).configure.log; exit 1)
	@bash scripts/timed.sh build-asan cmake --build $(ASAN_BUILD) -j $(JOBS) --target qconform_unit_tests
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 bash $(CURDIR)/scripts/timed.sh ctest-asan ctest --output-on-failure -j $(JOBS) -L unit

test-fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQCONFORM_FUZZ=ON \
	  -DQCONFORM_WITH_CUDA=OFF -DQCONFORM_WITH_ONEDNN=OFF -DQCONFORM_BUILD_TESTS=OFF $(LAUNCHER) > $(FUZZ_BUILD).configure.log || (cat $(FUZZ_BUILD).configure.log; exit 1)
	@bash scripts/timed.sh build-fuzz cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors
	mkdir -p $(FUZZ_BUILD)/corpus && cp -n tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/ 2>/dev/null || true
	$(abspath $(FUZZ_BUILD))/tests/fuzz/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 $(FUZZ_BUILD)/corpus
	@echo "fuzz: $(FUZZ_SECONDS) s of fuzz_safetensors: no crash, no sanitizer report"

test-gpu: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -L gpu

bench: build
	@for b in $(BUILD)/bench/bench_*; do [ -x $$b ] && $$b; done

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(BUILD).configure.log $(ASAN_BUILD).configure.log $(FUZZ_BUILD).configure.log
