# The README's two commands. Both install what is missing (Debian packages), configure and
# build; `make run` then runs plait's main job, `make test` every test.
BUILD ?= build
PRESET ?= release
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-asan fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

# A short benchmark table, then the main job: DDP training of Fashion-MNIST on 4 ranks over
# the "plait" torch.distributed backend.
run: build
	@$(BUILD)/tools/plait/plait bench -n 4 allreduce --check --min 8 --max 64M --factor 16
	@PYTHONPATH=$(BUILD)/python $(BUILD)/tools/plait/plait run -n 4 -- \
		.venv/bin/python examples/ddp_fashion_mnist.py --backend plait

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 900

# Debug + AddressSanitizer/UBSan build of the same tests (slower; not part of `make test`).
test-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS) --timeout 1800

# libFuzzer over every parser of network or disk bytes (clang 16, installed if missing), each
# target FUZZ_SECONDS; new inputs are merged into fuzz/corpus, which `make test` replays
# (docs/fuzzing.md).
FUZZ_SECONDS ?= 600
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh

clean:
	rm -rf build build-asan build-fuzz
