# txcluster — the two commands a fresh machine needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
RUN_DIR ?= run
# Bytecode is cached (in the tree's __pycache__, ignored by git) even where the environment
# turns it off: without it pytest rewrote the asserts of 370 modules on every run (a
# collection of ~70 s instead of ~9 s here, once per xdist worker) and every node a test
# starts compiled the project's modules again.
unexport PYTHONDONTWRITEBYTECODE
# Test dependencies outside PyPI's wheels, kept in the venv's folder (see their targets).
NODE_DIR := $(VENV)/node
NODE_STAMP := $(NODE_DIR)/.installed
W3C_RDFLIB := 7.1.4
W3C_DIR := $(VENV)/w3c-sparql11
W3C_STAMP := $(W3C_DIR)/.installed-rdflib-$(W3C_RDFLIB)
# Debian packages the tests need (installed when running as root; see deps-debian).
# systemd-container debootstrap nftables openssh-client: Molecule's systemd-nspawn hosts;
# openssl: the lab CA the roles make on the controller (txcluster_common_tls_lab_ca).
# openjdk-17-jre-headless: Java for Spark (the pipeline tests).
# openjdk-17-jdk-headless: javac for the JMX tests' Java client (the master's JMX bridge).
# chromium: the status page test renders the page in headless Chromium.
# iproute2 nftables: the network partition tests (tests/netlab.py: namespaces, veth, nft).
# librdf4j-java: RDF4J's Rio binary codecs (tests/test_binary_rdf*.py).
# libapache-jena-java: Apache Jena 4 as a client of the master (tests/test_clients_jena.py).
# nodejs: graphdb.js as a client of the master (tests/test_clients_graphdbjs.py); Debian's
# npm too when the machine's nodejs has none (deps-debian).
# wrk: the C load generator of bench/bench_anchor.py (make bench-anchor), so that the client
# is not what is measured (tests/test_bench_anchor.py runs its Lua script when present).
# strace: bench/bench_fsyncs.py counts each process's fsyncs per write with it.
DEBIAN_PACKAGES ?= systemd-container debootstrap nftables iproute2 openssh-client openssl openjdk-17-jre-headless openjdk-17-jdk-headless chromium librdf4j-java libapache-jena-java nodejs wrk strace

.PHONY: venv deps-debian test-deps check test test-deploy lint run stop bench bench-anchor bench-pipeline docs clean sync-soak \
	fuzz chaos

$(STAMP): setup.cfg pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,pipeline,jmx]'
	touch $(STAMP)

venv: $(STAMP)

deps-debian:
	@if [ -n "$(DEBIAN_PACKAGES)" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	    if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	    if command -v node >/dev/null && ! command -v npm >/dev/null; then \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; fi; \
	  else echo "not root: not installing Debian packages ($(DEBIAN_PACKAGES))"; fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .

# The fast tier, to run before every commit: ruff, then every test that starts no program
# (no node, JVM, Spark, Chromium, nspawn or network namespace: those are marked `processes`,
# tests/conftest.py says how, and run by `make test` only). Spread over the cores (pytest-xdist;
# worksteal: the simulator's property tests take 10-45 s each, and an idle core takes work
# from a busy one instead of waiting for its chunk: 4:26 instead of 5:09 here).
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q -p no:cacheprovider -n auto --dist worksteal -m "not processes"

# The Molecule scenario (~12 minutes alone, 18-20 beside the suite; mostly Ansible's round
# trips to the nspawn hosts) runs beside the rest of the suite, in its own pytest; its
# report is printed at the end. Its controller side (molecule, Ansible, testinfra, the
# wheel build) runs at a lower CPU priority: it has minutes of slack while the suite is
# the longer of the two, whose timed waits and CPU-bound tests then get the cores first
# (beside it at equal priority the suite took 42-44 min against ~30 alone). The nspawn
# hosts themselves run at normal priority (deploy/nspawn-hosts.sh), as real hosts would.
MOLECULE_TEST := tests/test_deploy_molecule.py
test: $(STAMP) $(VENV)/.installed-deploy deps-debian $(NODE_STAMP) $(W3C_STAMP) lint
	@mkdir -p build
	@nice -n 10 $(BIN)/pytest -q -p no:cacheprovider $(MOLECULE_TEST) > build/molecule-test.out 2>&1 & \
	  molecule=$$!; \
	  $(BIN)/pytest -q --ignore $(MOLECULE_TEST); suite=$$?; \
	  wait $$molecule; deploy=$$?; \
	  echo "== $(MOLECULE_TEST) (run beside the suite above)"; cat build/molecule-test.out; \
	  echo "== make test: the suite exited $$suite, $(MOLECULE_TEST) exited $$deploy"; \
	  exit $$(( suite || deploy ))

# graphdb.js (npm graphdb, pinned with its dependencies in tests/js/package-lock.json) for
# tests/test_clients_graphdbjs.py, in the venv's folder: npm ci once, offline afterwards.
# Without npm (not root, no Node.js) nothing is installed and those tests skip.
$(NODE_STAMP): tests/js/package.json tests/js/package-lock.json | $(STAMP)
	@if command -v npm >/dev/null; then \
	  mkdir -p $(NODE_DIR) && cp tests/js/package.json tests/js/package-lock.json $(NODE_DIR)/ && \
	  (cd $(NODE_DIR) && npm ci --no-audit --no-fund --ignore-scripts --omit=peer --loglevel=error) && \
	  touch $@; \
	else echo "no npm: not installing graphdb.js (tests/test_clients_graphdbjs.py will skip)"; fi

# The W3C SPARQL 1.1 Update tests (tests/test_w3c_update_suite.py): the update folders of
# rdflib's sdist (PyPI), unpacked once into the venv's folder.
W3C_FOLDERS := add basic-update clear copy delete delete-data delete-insert delete-where drop \
	move update-silent syntax-update-1 syntax-update-2
$(W3C_STAMP): | $(STAMP)
	rm -rf $(W3C_DIR) && mkdir -p $(W3C_DIR)/sdist
	$(BIN)/python -m pip download -q --no-binary :all: --no-deps -d $(W3C_DIR)/sdist \
	  rdflib==$(W3C_RDFLIB)
	tar -xzf $(W3C_DIR)/sdist/rdflib-$(W3C_RDFLIB).tar.gz -C $(W3C_DIR) --strip-components=6 \
	  $(addprefix rdflib-$(W3C_RDFLIB)/test/data/suites/w3c/sparql11/,$(W3C_FOLDERS))
	rm -rf $(W3C_DIR)/sdist
	touch $@

# The test dependencies outside PyPI's wheels: graphdb.js and the W3C suite.
test-deps: deps-debian $(NODE_STAMP) $(W3C_STAMP)

# The Ansible roles: ansible-lint, and Molecule's two-data-centre scenario on
# systemd-nspawn hosts (needs root; `make test` runs it too, or skips it with the reason).
$(VENV)/.installed-deploy: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,deploy]'
	touch $@

test-deploy: $(VENV)/.installed-deploy deps-debian
	TXCLUSTER_DEPLOY_TESTS=required $(BIN)/pytest -q tests/test_deploy_plugins.py \
	  tests/test_deploy_lint.py tests/test_deploy_molecule.py

# Starts a local cluster in the background on loopback, loads sample data, prints endpoints.
run: $(STAMP)
	$(BIN)/txcluster up --dir $(RUN_DIR) --sample-data

stop: $(STAMP)
	$(BIN)/txcluster down --dir $(RUN_DIR)

# Fuzzing (tests/fuzz) with the long profile: more than 10,000 generated cases against
# real processes; prints the totals per property at the end.
fuzz: $(STAMP)
	TXC_FUZZ_PROFILE=long $(BIN)/pytest -q -p no:cacheprovider tests/fuzz

# Seeded chaos rounds (tests/chaos): faults on a real local cluster, then the checker;
# prints a table. make chaos ROUNDS=200 SEED=1; TOPOLOGY=multi-dc: three peered masters
# of two data centres in network namespaces, with partitions (root only).
ROUNDS ?= 10
SEED ?= 1
TOPOLOGY ?= single-dc
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos --rounds $(ROUNDS) --seed $(SEED) --topology $(TOPOLOGY)

# The sync protocol's simulator on random seeds for SOAK_S seconds (tests/sync_sim.py):
# a failing seed prints its replay command. make sync-soak SOAK_S=3600
SOAK_S ?= 600
sync-soak: $(STAMP)
	TXCLUSTER_SYNC_SOAK=$(SOAK_S) $(BIN)/pytest -q -p no:cacheprovider -s tests/test_sync_simulator.py -k soak

# deps-debian: wrk for bench_anchor (the `oxigraph serve` anchor comes with the dev extra).
bench: $(STAMP) deps-debian
	@for b in bench/bench_*.py; do m=$$(basename $$b .py); echo "== $$m"; $(BIN)/python -m bench.$$m || exit 1; done

# Issue 18's table alone: txcluster against `oxigraph serve`, same run, wrk as the client
# (bench/README.md). ARGS passes options, e.g. make bench-anchor ARGS='--seconds 30'.
bench-anchor: $(STAMP) deps-debian
	$(BIN)/python -m bench.bench_anchor $(ARGS)

# Issue 20's two ratios (--initial and transactions against raw Store.bulk_extend):
# three rounds, each after a raw load of its own, medians printed (bench/README.md).
# ARGS adds or overrides options, e.g. make bench-pipeline ARGS='--repeat 1'.
bench-pipeline: $(STAMP)
	$(BIN)/python -m bench.bench_pipeline --repeat 3 $(ARGS)

# The generated references in docs/reference/ (tests/test_docs.py checks them).
docs: $(STAMP)
	$(BIN)/python -m txcluster.docs

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
