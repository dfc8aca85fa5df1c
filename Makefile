# Thin wrapper over CMake. `make run` and `make test` are the README's two set-up commands.
BUILD      ?= build
TEST_BUILD ?= build-test
OUT        ?= out/run
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build deps deps-test deps-bench run test bench fuzz clean

all: build

deps:
	@bash scripts/deps.sh build

deps-test:
	@bash scripts/deps.sh test

deps-bench:
	@bash scripts/deps.sh bench

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The canonical experiment on the embedded engine.
run: build
	./$(BUILD)/stallscope run --preset lesson --out $(OUT) --force

# Everything CI runs: unit + integration tests under ASan + UBSan.
test: deps-test
	@cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTALLSCOPE_SANITIZE=ON -DBUILD_TESTING=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)
	cd $(TEST_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# libFuzzer targets (clang): each runs FUZZ_SECONDS; new inputs accumulate in
# $(FUZZ_BUILD)/corpus. FUZZ_TARGETS="fuzz_request ..." picks some.
# See docs/reference/reliability.md.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?=
fuzz: deps-test
	bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Benchmarks print figures; they never fail on time.
bench: deps-bench build
	@set -e; for b in $(BUILD)/bench_*; do echo "== $$b"; ./$$b; done

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(FUZZ_BUILD)
