# Thin wrapper over CMake. `make run` and `make test` are the README's two set-up commands.
BUILD      ?= build
TEST_BUILD ?= build-test
OUT        ?= out
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build deps deps-test run test bench clean

all: build

deps:
	@bash scripts/deps.sh build

deps-test:
	@bash scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The canonical experiment on the embedded engine.
run: build
	./$(BUILD)/stallscope run --preset lesson --out $(OUT)

# Everything CI runs: unit + integration tests under ASan + UBSan.
test: deps-test
	@cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTALLSCOPE_SANITIZE=ON -DBUILD_TESTING=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)
	cd $(TEST_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# Benchmarks print figures; they never fail on time.
bench: build
	@set -e; for b in $(BUILD)/bench_*; do echo "== $$b"; ./$$b; done

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
