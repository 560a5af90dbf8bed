# rankscope: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release
DEMO_JOB ?= demo-$(shell date +%s)

.PHONY: deps build demo up down status test lint fmt clean-state bench bench-sdk py chdb producers objstore-servers fuzz soak gpu-kit gpu-replay

## The Python environment of the rank SDK: a venv (RANKSCOPE_VENV, default .venv)
## with PyPI torch (CPU is enough), pytest, maturin and the `rankscope` package
## built from python/ (pyo3 + maturin): deploy/dev/venv.sh. Created once; later
## runs rebuild the package only when its sources changed, and never under
## another run's tests.
VENV ?= $(or $(RANKSCOPE_VENV),$(CURDIR)/.venv)

## Install what a fresh Debian/Ubuntu machine lacks: python3 and its venv module
## (Debian ships `venv` without ensurepip), ClickHouse server, curl,
## iproute2 and util-linux (the tests' private network namespace, flock),
## openssl (deploy/tls/gen-certs.sh; the TLS tests make their certificates with it),
## systemd (systemd-analyze checks the units in deploy/systemd),
## ZooKeeper (the cluster-mode tests start a private one under a 2-shard ClickHouse) and
## Chromium (testkit/tests/ui.rs drives the web UI in headless Chromium) and
## faketime (libfaketime: testkit/tests/clocks_torch.rs runs one node 3 ms ahead).
deps:
	@command -v python3 >/dev/null || deploy/dev/clickhouse.sh apt python3
	@python3 -c 'import ensurepip, venv' 2>/dev/null || deploy/dev/clickhouse.sh apt python3-venv
	@command -v curl >/dev/null || deploy/dev/clickhouse.sh apt curl
	@command -v openssl >/dev/null || deploy/dev/clickhouse.sh apt openssl
	@command -v systemd-analyze >/dev/null || deploy/dev/clickhouse.sh apt systemd
	@command -v ip >/dev/null || deploy/dev/clickhouse.sh apt iproute2
	@command -v unshare >/dev/null || deploy/dev/clickhouse.sh apt util-linux
	@command -v flock >/dev/null || deploy/dev/clickhouse.sh apt util-linux
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || deploy/dev/clickhouse.sh apt chromium
	@command -v faketime >/dev/null || deploy/dev/clickhouse.sh apt faketime
	@deploy/dev/clickhouse.sh install
	@deploy/dev/clickhouse.sh install-zookeeper

## Build the three binaries (release).
build:
	$(CARGO) build --release --locked --bins

## Start ClickHouse, collector and agent in the background; print the URLs.
up: deps build
	@deploy/dev/stack.sh up

## Stop the local stack.
down:
	@deploy/dev/stack.sh down

status:
	@deploy/dev/stack.sh status

## The main job: local stack + an 8-rank simulated job with a straggler, then the step table.
demo: up
	$(BIN)/rankscope simulate --job $(DEMO_JOB) --ranks 8 --steps 50 --straggler 5:1.3 --wait
	$(BIN)/rankscope steps --job $(DEMO_JOB) --last 10
	$(BIN)/rankscope stragglers --job $(DEMO_JOB)

py:
	@VENV=$(VENV) deploy/dev/venv.sh

## ClickHouse 26.x for the tests: PyPI chDB (the engine in-process) in its own venv
## (RANKSCOPE_CHDB_VENV, default .venv-chdb), served by testkit/chdb_front.py.
CHDB_VENV ?= $(or $(RANKSCOPE_CHDB_VENV),$(CURDIR)/.venv-chdb)
chdb:
	@mkdir -p $(dir $(CHDB_VENV)); exec 9>"$(CHDB_VENV).lock"; \
	if ! flock -n 9; then echo "another run is building $(CHDB_VENV); waiting for it"; flock 9; fi; \
	set -e; \
	test -x $(CHDB_VENV)/bin/python || python3 -m venv $(CHDB_VENV); \
	$(CHDB_VENV)/bin/python -c 'import chdb' 2>/dev/null || \
		{ echo "installing chdb (ClickHouse 26.x) into $(CHDB_VENV) (once)"; \
		  $(CHDB_VENV)/bin/pip install -q --disable-pip-version-check --no-cache-dir 'chdb>=4.4,<5'; }

## The trace producers the import tests run (kineto/tests/producers.rs): PyPI
## paddlepaddle (CPU), onnxruntime and onnx in their own venv
## (RANKSCOPE_PRODUCERS_VENV, default .venv-producers); torch is `make py`'s, made
## visible through a .pth file (read-only, not installed twice).
PRODUCERS_VENV ?= $(or $(RANKSCOPE_PRODUCERS_VENV),$(CURDIR)/.venv-producers)
producers: py
	@mkdir -p $(dir $(PRODUCERS_VENV)); exec 9>"$(PRODUCERS_VENV).lock"; \
	if ! flock -n 9; then echo "another run is building $(PRODUCERS_VENV); waiting for it"; flock 9; fi; \
	set -e; \
	test -x $(PRODUCERS_VENV)/bin/python || python3 -m venv $(PRODUCERS_VENV); \
	$(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > \
		"$$($(PRODUCERS_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_rankscope_torch.pth"; \
	$(PRODUCERS_VENV)/bin/python -c 'import paddle, onnxruntime, onnx, torch' 2>/dev/null || \
		{ echo "installing paddlepaddle onnxruntime onnx into $(PRODUCERS_VENV) (once)"; \
		  $(PRODUCERS_VENV)/bin/pip install -q --disable-pip-version-check --no-cache-dir 'paddlepaddle>=3,<4' onnxruntime onnx; }

## Object storage servers for the tests (testkit/tests/objstore.rs): PyPI moto[server]
## (S3) and azure-storage-blob (the seeding client) in their own venv
## (RANKSCOPE_OBJSTORE_VENV, default .venv-objstore), npm azurite (Azure Blob) in
## RANKSCOPE_AZURITE (default .tools/azurite; npm from Debian when missing). Once.
OBJSTORE_VENV ?= $(or $(RANKSCOPE_OBJSTORE_VENV),$(CURDIR)/.venv-objstore)
AZURITE_DIR ?= $(or $(RANKSCOPE_AZURITE),$(CURDIR)/.tools/azurite)
objstore-servers:
	@mkdir -p $(dir $(OBJSTORE_VENV)); exec 9>"$(OBJSTORE_VENV).lock"; \
	if ! flock -n 9; then echo "another run is installing the object storage servers; waiting for it"; flock 9; fi; \
	set -e; \
	test -x $(OBJSTORE_VENV)/bin/python || python3 -m venv $(OBJSTORE_VENV); \
	test -x $(OBJSTORE_VENV)/bin/moto_server && $(OBJSTORE_VENV)/bin/python -c 'import boto3, azure.storage.blob' 2>/dev/null || \
		{ echo "installing moto[server], azure-storage-blob into $(OBJSTORE_VENV) (once)"; \
		  $(OBJSTORE_VENV)/bin/pip install -q --disable-pip-version-check --no-cache-dir 'moto[server]>=5,<6' 'azure-storage-blob>=12,<13'; }; \
	command -v npm >/dev/null || deploy/dev/clickhouse.sh apt npm; \
	test -x $(AZURITE_DIR)/node_modules/.bin/azurite-blob || \
		{ echo "installing azurite into $(AZURITE_DIR) (once)"; mkdir -p $(AZURITE_DIR); \
		  cd $(AZURITE_DIR) && npm install --no-audit --no-fund --silent 'azurite@3'; }

## Every test, against real ClickHouse servers the suite starts itself (Debian's
## 18.16, and 26.x through chDB: modern_clickhouse.rs, and the store tests again),
## real PyTorch processes (the venv of `make py`) and a C program over the C ABI.
## deploy/dev/test.sh runs them in a private network namespace, runs every
## binary and the Python tests whatever fails, then prints the time of each
## phase, the slowest binaries and every failure (exit non-zero).
test: deps py chdb producers objstore-servers
	RANKSCOPE_OBJSTORE_VENV=$(OBJSTORE_VENV) RANKSCOPE_AZURITE=$(AZURITE_DIR) \
	CARGO=$(CARGO) VENV=$(VENV) CHDB_VENV=$(CHDB_VENV) PRODUCERS_VENV=$(PRODUCERS_VENV) deploy/dev/test.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

clean-state: down
	rm -rf .rankscope

## Benchmarks (issue 6): release build, every section (~10 min on 2 cores); prints a table,
## writes bench/results.json and bench/RESULTS.md. Not part of `make test`.
bench: deps build
	@command -v clickhouse-client >/dev/null || deploy/dev/clickhouse.sh apt clickhouse-client
	$(BIN)/rankscope-bench --out-dir bench
	$(MAKE) bench-sdk

## Rank SDK: caller cost per event (Rust, Python) and DDP overhead of
## `rankscope run` (4 gloo ranks, interleaved runs); writes bench/RESULTS-sdk.md.
bench-sdk: build py
	$(VENV)/bin/python bench/sdk/run.py --bin-dir $(BIN) --out-dir bench

## Fuzzing (issue 14): every target of rankscope-fuzz (kineto, ingest, rank,
## config, query) for 1,000,000 generated inputs each (~8 min on 2 cores); fails on a
## panic, a hang or runaway memory. `make test` runs a 2,000-input smoke of each.
fuzz:
	$(CARGO) run --release --locked -p rankscope-fuzz -- --target all --inputs 1000000

## Soak (issue 14): 512 simulated agents x 8 ranks against one release collector
## and a private ClickHouse for 10 minutes; writes bench/soak.json and
## bench/SOAK.md, fails when an acknowledged event was not stored. Not in `make test`.
soak: deps build
	$(CARGO) build --release --locked -p rankscope-bench --bin rankscope-soak
	$(BIN)/rankscope-soak --out-dir bench

## GPU capture kit (issue 33, README "GPU capture kit"): the release rankscope-agent and
## rankscope (stripped), the abi3 wheel, the workload and capture.sh in target/gpu-kit/
## and target/gpu-kit.tar.gz; fails over 64 MiB. On the GPU node: capture.sh OUT_DIR.
gpu-kit: py
	CARGO=$(CARGO) deploy/gpu-kit/build.sh target/gpu-kit $(VENV)

## Replay a capture (DIR = capture.sh's OUT_DIR) through a real collector into a private
## ClickHouse and print each check (testkit/tests/gpu_replay.rs; `make test` replays the
## committed ones under testkit/fixtures/gpu-capture/).
gpu-replay: deps
	@test -n "$(DIR)" || { echo "usage: make gpu-replay DIR=<capture.sh output folder>" >&2; exit 2; }
	RANKSCOPE_GPU_CAPTURE=$(abspath $(DIR)) $(CARGO) test --locked -p rankscope-testkit --test e2e -- gpu_replay:: --nocapture
