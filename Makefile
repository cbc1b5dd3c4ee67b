# lamina — the two commands a user needs on a fresh Debian 12 machine (CUDA toolkit at /usr/local/cuda):
#   make demo   installs missing Debian packages, builds, runs the main job on the best device
#   make test   installs missing Debian packages, builds, runs every test (GPU tests skip without a GPU)
# Other targets: make build, make deps, make bench, make fuzz (FUZZ_SECONDS per target), make sanitize, make clean.

BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Debian packages the build, the tests and the benchmarks need.
DEB_PACKAGES := build-essential cmake pkg-config libcmocka-dev zlib1g-dev libjansson-dev libpng-dev libjpeg62-turbo-dev libavformat-dev libavcodec-dev libswscale-dev libopenblas-openmp-dev python3-numpy python3-matplotlib python3-venv python3-setuptools python3-wheel dataset-fashion-mnist valgrind libopenmpi-dev openmpi-bin

.PHONY: all deps build test demo bench fuzz sanitize clean

all: build

deps:
	@scripts/install-deps $(DEB_PACKAGES)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The main jobs on the best device: the course's hidden layer at n = 100M from pageable host arrays,
# and the reference CNN trained on Fashion-MNIST for 5 epochs, saved and evaluated.
demo: build
	$(BUILD)/lamina info
	$(BUILD)/lamina hidden --n 100M --repeat 5
	$(BUILD)/lamina train --data fashion-mnist --model cnn --epochs 5 --batch 64 --opt adam --lr 1e-3 --save $(BUILD)/cnn.lamina
	$(BUILD)/lamina eval --load $(BUILD)/cnn.lamina --data fashion-mnist

bench: build
	/usr/bin/python3 bench/hidden.py

# libFuzzer on the readers (video files too), the spec parser, the checkpoint loader and the number parsing (scripts/fuzz).
fuzz: deps
	@scripts/install-deps clang libclang-rt-14-dev libomp-14-dev
	scripts/fuzz

# The CPU tests on an AddressSanitizer + UBSan build (scripts/sanitize; CI runs it after make test).
sanitize: deps
	scripts/sanitize

clean:
	rm -rf $(BUILD)
