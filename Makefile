# Quick start: `make run` (build + main sample) and `make test` (build + whole suite).
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test asan tsan fuzz format check-format bench clean

all: build

deps:
	@./tools/install-deps.sh

$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

configure: $(BUILD)/build.ninja

build: deps configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@$(BUILD)/samples/throttle_demo

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Sanitizer builds: the suite under AddressSanitizer + UBSan, and under ThreadSanitizer. Debug
# builds with line tables only (-g1: a report still names file and line, and the objects are a
# fraction of the size); `make asan SAN_DEBUG_FLAGS=-g` for full debug information in gdb.
SAN_DEBUG_FLAGS ?= -g1
asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRC_SANITIZE=address -DRC_BUILD_BENCH=OFF \
	  "-DCMAKE_CXX_FLAGS_DEBUG=$(SAN_DEBUG_FLAGS)" >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS)

tsan: deps
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRC_SANITIZE=thread -DRC_BUILD_BENCH=OFF \
	  "-DCMAKE_CXX_FLAGS_DEBUG=$(SAN_DEBUG_FLAGS)" >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@ctest --test-dir build-tsan --output-on-failure -j $(JOBS)

# libFuzzer (clang 14): builds only the fuzz targets and what they link, then runs each for
# FUZZ_SECONDS over its corpus in tests/fuzz/corpus/; fails on the first crash (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
FUZZ_CXX ?= clang++-14
fuzz: deps
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DRC_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DRC_BUILD_TESTS=OFF -DRC_BUILD_SAMPLES=OFF -DRC_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target rc_fuzz
	@tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# Formatting (clang-format 14, .clang-format): `make format` rewrites, `make check-format` checks.
format: deps
	@tools/check-format.sh --fix

check-format: deps
	@tools/check-format.sh

bench: build
	@$(BUILD)/bench/rc-bench --scenario plain_seq

clean:
	@rm -rf $(BUILD) build-asan build-tsan build-fuzz
