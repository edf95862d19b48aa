# The README's two commands. Both install what is missing (Debian packages), configure and
# build; `make run` then runs plait's main job, `make test` every test.
BUILD ?= build
PRESET ?= release
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-asan clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

run: build
	@$(BUILD)/tools/plait/plait bench -n 4 allreduce --check --min 8 --max 64M

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 900

# Debug + AddressSanitizer/UBSan build of the same tests (slower; not part of `make test`).
test-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS) --timeout 1800

clean:
	rm -rf build build-asan
