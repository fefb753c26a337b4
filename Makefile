# Quick start: `make run` (build + main sample) and `make test` (build + whole suite).
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test asan tsan bench clean

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

# Sanitizer builds: the suite under AddressSanitizer + UBSan, and under ThreadSanitizer.
asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRC_SANITIZE=address -DRC_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS)

tsan: deps
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRC_SANITIZE=thread -DRC_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@ctest --test-dir build-tsan --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bench/rc-bench --scenario plain_seq

clean:
	@rm -rf $(BUILD) build-asan build-tsan
