# The front door.  On a fresh machine:
#   make test   installs what is missing, builds, and runs every test
#   make demo   runs the main job on generated data
# Everything else is here for developers.

BUILD ?= build
PY := .venv/bin/python
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build py-install test test-full test-c test-py sanitize tsan py-asan fuzz demo demo-npy bench clean wheel wheel-check

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

# The Python package, installed into .venv with pip (scikit-build-core).
py-install: build
	@scripts/py-install.sh

# The Python tests run on every core (pytest-xdist); the randomized kill
# loops and the remote fault-injection points are sampled (each run prints
# its STOKER_TEST_SEED, which replays it), and Dask's and Ray's tests skip
# unless test-full installed them.  test-full, sanitize and tsan run every
# case (STOKER_TEST_FULL=1).
PYTEST_JOBS ?= auto

# test_py_engines.py runs apart, in one process of its own: Ray's gRPC
# threads and fork handlers stay in the process that started it, and a
# DataLoader worker forked later from that process can hang.
PYTEST = STOKER_BUILD=$(BUILD) $(PY) -m pytest -q
ENGINE_TESTS = tests/python/test_py_engines.py

test: build py-install
	ctest --test-dir $(BUILD) --output-on-failure -j2
	$(PYTEST) -n $(PYTEST_JOBS) --ignore=$(ENGINE_TESTS) tests/python
	$(PYTEST) $(ENGINE_TESTS)

# Every case: Dask and Ray installed and tested, the kill loops at full count.
test-full: build py-install
	@ENGINES=1 scripts/deps.sh
	STOKER_TEST_FULL=1 ctest --test-dir $(BUILD) --output-on-failure -j2
	STOKER_TEST_FULL=1 $(PYTEST) -n $(PYTEST_JOBS) --ignore=$(ENGINE_TESTS) tests/python
	STOKER_TEST_FULL=1 $(PYTEST) $(ENGINE_TESTS)

test-c: build
	ctest --test-dir $(BUILD) --output-on-failure -j2

test-py: build py-install
	$(PYTEST) -n $(PYTEST_JOBS) --ignore=$(ENGINE_TESTS) tests/python
	$(PYTEST) $(ENGINE_TESTS)

# The C tests under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
		-DSTK_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan
	ASAN_OPTIONS=detect_leaks=1 STOKER_TEST_FULL=1 ctest --test-dir build-asan --output-on-failure -j2

# The C tests under ThreadSanitizer.
tsan: deps
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
		-DSTK_SANITIZE=thread >/dev/null
	@cmake --build build-tsan
	STOKER_TEST_FULL=1 ctest --test-dir build-tsan --output-on-failure -j2

# The main job: Parquet basins -> stoker pack -> an LSTM fed by stoker and
# by the user's DataLoader, side by side.
# The Python package's tests against an ASan/UBSan build of the extension.
py-asan: deps
	@scripts/py-asan.sh

# libFuzzer over every fuzz target (FUZZ_SECONDS each, default 60).
fuzz: py-install
	@scripts/fuzz.sh

demo: build py-install
	@STOKER_BUILD=$(BUILD) $(PY) scripts/demo.py

# Packing and verifying ~1.4 GiB of .npy series with the command line alone.
demo-npy: build
	@STOKER_BUILD=$(BUILD) scripts/demo.sh

# The benchmarks, quick by default (a few minutes for five users' workloads
# on top of the engine's); FULL=1 runs the users' full sizes (tens of GB, hours).
bench: build py-install
	@BENCH=1 scripts/deps.sh
	STOKER_BUILD=$(BUILD) $(PY) bench/suite.py $(if $(FULL),--full,)
	STOKER_BUILD=$(BUILD) $(PY) bench/small.py
	STOKER_BUILD=$(BUILD) $(PY) bench/pack_verify.py
	STOKER_BUILD=$(BUILD) $(PY) bench/pack_engines.py
	STOKER_BUILD=$(BUILD) $(PY) bench/mix.py
	STOKER_BUILD=$(BUILD) $(PY) bench/engine.py
	STOKER_BUILD=$(BUILD) $(PY) bench/python_vs_cli.py
	STOKER_BUILD=$(BUILD) $(PY) bench/inplace.py
	STOKER_BUILD=$(BUILD) $(PY) bench/gpu.py
	STOKER_BUILD=$(BUILD) $(PY) bench/remote.py
	STOKER_BUILD=$(BUILD) $(PY) bench/remote_link.py
	STOKER_BUILD=$(BUILD) $(PY) bench/hf.py
	STOKER_BUILD=$(BUILD) $(PY) bench/neuralhydrology.py
	STOKER_BUILD=$(BUILD) $(PY) bench/media_images.py $(if $(FULL),--full,)
	STOKER_BUILD=$(BUILD) $(PY) bench/media_audio.py $(if $(FULL),--full,) --profile
	DEMO_RECORD=1 STOKER_BUILD=$(BUILD) $(PY) scripts/demo.py

# The wheels for Linux x86_64 and aarch64 (manylinux_2_28, CPython 3.11 and
# later) into dist/: third-party libraries linked in, built by zig cc for
# glibc 2.28 (aarch64 cross-built).
wheel: deps
	@scripts/wheel.sh x86_64
	@scripts/wheel.sh aarch64

# Each wheel installed in a clean Debian root (no compiler, no libraries)
# and checked there, the aarch64 one under qemu-user; then the sdist built
# in a root with a compiler and no -dev library; needs root, says so and
# passes without it.
wheel-check: wheel
	@scripts/wheel-check.sh x86_64
	@scripts/wheel-check.sh aarch64
	@scripts/sdist-check.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan build-pyasan build-py build-wheel
