# Keyhole: `make run` and `make test` are the contract with every new user and with CI.

SWIFT       ?= swift
DEV_DIR     := $(CURDIR)/.keyhole
# A Unix socket path holds at most 107 bytes: fall back to /tmp for a deep checkout.
DEV_SOCKET  := $(shell p='$(DEV_DIR)/keyholed.sock'; if [ "$$(printf %s "$$p" | wc -c)" -le 107 ]; then echo "$$p"; else echo "/tmp/keyhole-dev-$$(id -u).sock"; fi)
# prometheus: its promtool checks keyholed's metrics text, and the dashboard's tests run it and
# prometheus-node-exporter (both services stopped after installing). postgresql: the PostgreSQL
# store's tests start throwaway clusters of their own (Scripts/pg_cluster.py); Debian's own cluster
# service is stopped after installing (SystemdPostgresTests runs that cluster, pg_lsclusters and
# pg_conftool under systemd in a throwaway container, whose changes vanish with it). valgrind:
# Scripts/ab_instructions.py counts keyholed's instructions per request under callgrind, and its test
# runs keyholed under valgrind.
APT_PACKAGES := libssl-dev libsystemd-dev systemd man-db groff-base procps openssl strace curl gcc prometheus \
  prometheus-node-exporter postgresql lintian valgrind
# Each language client's toolchain, test runner and (for its example app) framework, from Debian.
CLIENT_APT_PACKAGES := nodejs node-express php-cli php-mbstring php-xml phpunit php-laravel-framework \
  php-nyholm-psr7 ruby ruby-minitest ruby-rack ruby-webrick rake golang-go
# The clients' benchmarks: the same language's Redis client, and Redis.
BENCH_APT_PACKAGES := redis-server node-redis php-redis ruby-redis wrk nginx
# Reverse proxies run by the forward-auth tests (Tests/proxies); their system services are not needed.
PROXY_APT_PACKAGES := nginx caddy
GO_ENV := GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
KEYHOLED_DEBUG := $(CURDIR)/.build/debug/keyholed
# Fuzzing and sanitizers: each build has its own scratch path, so none disturbs .build.
FUZZ_SECONDS   ?= 60
FUZZ_TARGETS   ?= frame request jws jwk wal-record snapshot
FUZZ_MAX_LEN   ?= 8192
# Seconds one input may take: generous, as a debug build under AddressSanitizer on a busy machine is slow.
FUZZ_TIMEOUT   ?= 30
FUZZ_FLAGS     ?=
FUZZ_DIR       := $(CURDIR)/.build-fuzz
FUZZ_BIN       := $(FUZZ_DIR)/debug/keyhole-fuzz
# One compile job: the sanitizer builds are long, and the machine is shared.
SANITIZER_JOBS ?= -j 1
# Leak checking is off: LeakSanitizer fails a process with status 23 at exit, which fails every test
# that checks keyholed's exit status, and what it reports at exit is XCTest's runner and tasks still
# alive when keyholed exits. detect_leaks=1 shows them.
ASAN_OPTIONS_TEST ?= detect_leaks=0

.PHONY: all deps deps-clients build build-debug build-lean bench-snapshots run test test-python test-allocations test-proxies test-grafana test-clients test-node test-php test-ruby test-go test-swift deb clean fuzz fuzz-build test-asan test-tsan bench

all: build

## deps: install the system packages the build needs, when missing (apt-get, through sudo when not root).
deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	command -v python3 >/dev/null 2>&1 || missing="$$missing python3"; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "make deps: installing$$missing"; \
	  $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  case "$$missing" in *prometheus*) $$sudo systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true ;; esac; \
	  case "$$missing" in *postgresql*) $$sudo systemctl disable --now postgresql >/dev/null 2>&1 || true ;; esac; \
	fi
	@python3 -c 'import jsonschema' 2>/dev/null || { echo "make deps: installing jsonschema (Python tests only)"; python3 -m pip install --quiet jsonschema; }
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "make deps: swift not found; install Swift 6.2 or later from swift.org" >&2; exit 1; }

## deps-clients: the language clients' toolchains and frameworks (Debian packages), when missing.
deps-clients:
	@$(call apt_install,$(CLIENT_APT_PACKAGES))

# Installs the Debian packages named in $(1) that are not installed yet (apt-get, through sudo when not root).
define apt_install
missing=""; \
for p in $(1); do \
  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
done; \
if [ -n "$$missing" ]; then \
  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
  echo "make: installing$$missing"; \
  $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
fi
endef

## build: release build of keyholed, keyhole and the libraries.
build: deps
	$(SWIFT) build -c release

build-debug: deps
	$(SWIFT) build --build-tests

## run: build, then run keyholed in the foreground on a development config under ./.keyhole/.
run: build
	@mkdir -p $(DEV_DIR)
	@[ -f $(DEV_DIR)/keyholed.toml ] || cp packaging/keyholed.dev.toml $(DEV_DIR)/keyholed.toml
	@echo "keyholed: config $(DEV_DIR)/keyholed.toml"
	@echo "keyholed: socket $(DEV_SOCKET)"
	@echo "keyholed: try    KEYHOLE_SOCKET=$(DEV_SOCKET) $(CURDIR)/.build/release/keyhole ping"
	exec $(CURDIR)/.build/release/keyholed --config $(DEV_DIR)/keyholed.toml \
	  --socket $(DEV_SOCKET) --state-dir $(DEV_DIR)/state

## test: every test: each language client's suite with its own runner against a real keyholed
## (Python, Node.js, PHP, Ruby, Go), make bench's judging (Scripts/test_bench.py), then the Swift suites.
test: build-debug test-python test-allocations test-proxies test-grafana test-clients test-swift

test-python: build-debug build-lean
	KEYHOLED=$(KEYHOLED_DEBUG) python3 -m unittest discover -s Protocol/clients/python -v
	python3 -m unittest discover -s Scripts -v

## build-lean: the lean load generator, the churning client, the allocation counter and the shim that lets
## valgrind run keyholed (Scripts/lean/), C with gcc.
LEAN_DIR := $(CURDIR)/.build/lean
build-lean: deps $(LEAN_DIR)/lean-load $(LEAN_DIR)/churn $(LEAN_DIR)/malloc_count.so $(LEAN_DIR)/dispatch_main_shim.so
$(LEAN_DIR)/lean-load: Scripts/lean/lean_load.c
	@mkdir -p $(LEAN_DIR)
	gcc -O2 -Wall -Wextra -Werror -o $@ $<
$(LEAN_DIR)/churn: Scripts/lean/churn.c
	@mkdir -p $(LEAN_DIR)
	gcc -O2 -Wall -Wextra -Werror -pthread -o $@ $<
$(LEAN_DIR)/malloc_count.so: Scripts/lean/malloc_count.c
	@mkdir -p $(LEAN_DIR)
	gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $<
$(LEAN_DIR)/dispatch_main_shim.so: Scripts/lean/dispatch_main_shim.c
	@mkdir -p $(LEAN_DIR)
	gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $<

## test-allocations: a release keyholed's heap allocations per request against Tests/allocations/budgets.json
## (a release build of keyholed, as it ships: a debug build allocates differently).
test-allocations: deps build-lean
	$(SWIFT) build -c release --product keyholed
	@python3 -c 'import cryptography' 2>/dev/null || { echo "make test: installing cryptography"; python3 -m pip install --quiet cryptography; }
	python3 -m unittest discover -s Tests/allocations -v

## test-clients: the Node.js, PHP, Ruby and Go clients' suites (installs their toolchains when missing).
## test-grafana: the Grafana dashboard (packaging/grafana) against METRICS.md, promtool, a real keyholed,
## Prometheus, node_exporter and the README's units under systemd.
test-grafana: build-debug
	KEYHOLED=$(KEYHOLED_DEBUG) python3 -m unittest discover -s Tests/grafana -v

## test-proxies: keyholed's forward-auth behind a real nginx and Caddy with the snippets in
## packaging/proxies/ (installs nginx and caddy from Debian when missing).
test-proxies: build-debug
	@command -v nginx >/dev/null 2>&1 && command -v caddy >/dev/null 2>&1 || { \
	  $(call apt_install,$(PROXY_APT_PACKAGES)); \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo systemctl disable --now nginx caddy >/dev/null 2>&1 || true; }
	KEYHOLED=$(KEYHOLED_DEBUG) python3 -m unittest discover -s Tests/proxies -v

test-clients: test-node test-php test-ruby test-go

test-node: build-debug deps-clients
	KEYHOLED=$(KEYHOLED_DEBUG) NODE_PATH=/usr/share/nodejs node --test Protocol/clients/node/test/*.test.js

test-php: build-debug deps-clients
	KEYHOLED=$(KEYHOLED_DEBUG) phpunit -c Protocol/clients/php/phpunit.xml

test-ruby: build-debug deps-clients
	KEYHOLED=$(KEYHOLED_DEBUG) ruby Protocol/clients/ruby/run_tests.rb

# Twice: as users build it, and under the race detector (the client is shared between goroutines).
test-go: build-debug deps-clients
	cd Protocol/clients/go && KEYHOLED=$(KEYHOLED_DEBUG) $(GO_ENV) go vet ./...
	cd Protocol/clients/go && KEYHOLED=$(KEYHOLED_DEBUG) $(GO_ENV) go test -count=1 ./...
	cd Protocol/clients/go && KEYHOLED=$(KEYHOLED_DEBUG) $(GO_ENV) go test -count=1 -race ./...

# In two runs: the client's suites (deadlines of a few seconds, restart loops) apart from the rest,
# some of whose end-to-end tests block Swift's cooperative threads (two on a 2-core machine) for
# seconds at a time, which stalls every async test running beside them.
# Then keyholed's end-to-end suites and the client's once more on SwiftNIO's loop, the fallback
# (`[server] loop = "nio"`, Sources/KeyholeServer/REQUEST_LOOP.md): every behaviour is the same on both.
test-swift: build-debug
	$(SWIFT) test --skip-build --skip '^KeyholeClientTests\.'
	$(SWIFT) test --skip-build --filter '^KeyholeClientTests\.'
	KEYHOLE_TEST_LOOP=nio $(SWIFT) test --skip-build --filter '^KeyholedTests\.'
	KEYHOLE_TEST_LOOP=nio $(SWIFT) test --skip-build --filter '^KeyholeClientTests\.'

## bench: release build, then keyholed next to Redis (appendfsync always), PyJWT and OpenSSL through one
## client, in one run (Scripts/bench.py); writes BENCHMARKS.md and BENCHMARKS.json. Then each language
## client's session.get next to its Redis client's GET (Scripts/client_bench.py), appended to both.
## Installs redis-server, the Redis clients, PyJWT and cryptography when missing. BENCH_ARGS passes
## options to bench.py (--seconds 5, --rounds 5, --skip-million), CLIENT_BENCH_ARGS to client_bench.py,
## HTTP_BENCH_ARGS to http_bench.py (/authz and the metrics: --seconds 3, --rounds 5), LEAN_BENCH_ARGS to
## lean_bench.py (keyholed's CPU per request against Redis's with the lean C client, and allocations per
## request: --seconds 2, --rounds 3), PG_BENCH_ARGS to pg_bench.py (the PostgreSQL backend against the local
## one and against pgbench on the same throwaway cluster, and revoked-to-refused across two keyholed:
## --seconds 3, --rounds 5, --fanout-samples 1000).
BENCH_ARGS ?=
CLIENT_BENCH_ARGS ?=
PG_BENCH_ARGS ?=
bench: build build-lean deps-clients
	@command -v redis-server >/dev/null 2>&1 || { \
	  $(call apt_install,$(BENCH_APT_PACKAGES)); \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo systemctl disable --now redis-server nginx >/dev/null 2>&1 || true; }
	@$(call apt_install,$(BENCH_APT_PACKAGES))
	@python3 -c 'import jwt, cryptography' 2>/dev/null || { echo "make bench: installing PyJWT and cryptography"; python3 -m pip install --quiet pyjwt cryptography; }
	@python3 -c 'import redis' 2>/dev/null || { echo "make bench: installing redis-py"; python3 -m pip install --quiet redis; }
	python3 Scripts/bench.py $(BENCH_ARGS)
	python3 Scripts/client_bench.py $(CLIENT_BENCH_ARGS)
	python3 Scripts/http_bench.py $(HTTP_BENCH_ARGS)
	python3 Scripts/lean_bench.py $(LEAN_BENCH_ARGS)
	python3 Scripts/pg_bench.py $(PG_BENCH_ARGS)
	$(CURDIR)/.build/release/keyhole-bench refresh-checks

## bench-snapshots: bytes written per session.create on a store of 5 000 000 sessions, snapshots at a
## fixed size of log against in proportion to the last one (Scripts/snapshot_bench.py, about 10 minutes,
## 4 GB of memory and 10 GB of disk; not part of bench). SNAPSHOT_BENCH_ARGS: --sessions, --creates.
SNAPSHOT_BENCH_ARGS ?=
bench-snapshots: build build-lean
	python3 Scripts/snapshot_bench.py $(SNAPSHOT_BENCH_ARGS)

## deb: the Debian package (keyhole_<version>_<arch>.deb here), from a release build with the Swift
## runtime linked in, so that it needs only Debian's own packages; lintian must find no error and no
## warning (packaging/deb/lintian-overrides says why each override is there). DEB_MAINTAINER="NAME
## <ADDRESS>" names who builds it for a site (the project has no mail domain: a placeholder otherwise).
DEB_MAINTAINER ?=
# Hardening: every symbol bound at start and the relocations read-only after (RELRO, BIND_NOW).
DEB_LINK_FLAGS := -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now
DEB_FILE = $(CURDIR)/keyhole_$(shell sed -n 's/.*static let current = "\(.*\)".*/\1/p' Sources/KeyholeProtocol/KeyholeVersion.swift)-1_$(shell dpkg --print-architecture 2>/dev/null).deb
deb: deps
	$(SWIFT) build -c release --static-swift-stdlib $(DEB_LINK_FLAGS) --scratch-path .build-deb --product keyholed
	$(SWIFT) build -c release --static-swift-stdlib $(DEB_LINK_FLAGS) --scratch-path .build-deb --product keyhole
	packaging/deb/build-deb.sh --bin $(CURDIR)/.build-deb/release --strip \
	  $(if $(DEB_MAINTAINER),--maintainer "$(DEB_MAINTAINER)") --out $(DEB_FILE)
	lintian --fail-on error,warning --tag-display-limit 0 $(DEB_FILE)
	@dpkg-deb -c $(DEB_FILE) | grep ' ./usr/bin/'; ls -l $(DEB_FILE)

## fuzz: builds keyhole-fuzz with libFuzzer and AddressSanitizer, then runs each target for FUZZ_SECONDS
## (default 60) on a copy of its seed corpus in Tests/Fuzz; fails when any target crashes. FUZZ_TARGETS
## picks targets; a crash's input is left in .build-fuzz/artifacts/<target>/.
fuzz: fuzz-build
	@failed=""; \
	for t in $(FUZZ_TARGETS); do \
	  work=$$(mktemp -d /tmp/keyhole-fuzz-$$t.XXXXXX); cp Tests/Fuzz/$$t/* $$work/ 2>/dev/null; \
	  mkdir -p $(FUZZ_DIR)/artifacts/$$t; \
	  echo "make fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  if KEYHOLE_FUZZ_TARGET=$$t SWIFT_BACKTRACE=enable=no nice -n 10 $(FUZZ_BIN) $$work \
	       -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAX_LEN) -timeout=$(FUZZ_TIMEOUT) -rss_limit_mb=2048 \
	       -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t/ -print_final_stats=1 $(FUZZ_FLAGS) \
	       > $(FUZZ_DIR)/artifacts/$$t/log.txt 2>&1; then \
	    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb)' $(FUZZ_DIR)/artifacts/$$t/log.txt | tr '\n' ' '; echo; \
	  else \
	    tail -n 40 $(FUZZ_DIR)/artifacts/$$t/log.txt; failed="$$failed $$t"; \
	  fi; \
	  rm -rf $$work; \
	done; \
	if [ -n "$$failed" ]; then echo "make fuzz: crashed:$$failed (inputs in $(FUZZ_DIR)/artifacts/)" >&2; exit 1; fi

## fuzz-build: only the fuzzing build (.build-fuzz/debug/keyhole-fuzz).
fuzz-build: deps
	nice -n 10 $(SWIFT) build --scratch-path $(FUZZ_DIR) --product keyhole-fuzz $(SANITIZER_JOBS) \
	  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DKEYHOLE_FUZZ \
	  -Xswiftc -enable-experimental-feature -Xswiftc Extern

## test-asan: the Swift test suites under AddressSanitizer (own build in .build-asan). Reports from
## every process, keyholed children included, are kept in .build-asan/reports/ and summed up at the end.
test-asan: deps
	@rm -rf $(CURDIR)/.build-asan/reports; mkdir -p $(CURDIR)/.build-asan/reports
	KEYHOLE_SANITIZER=address ASAN_OPTIONS="$(ASAN_OPTIONS_TEST) log_path=$(CURDIR)/.build-asan/reports/asan" SWIFT_BACKTRACE=enable=no nice -n 10 \
	  $(SWIFT) test --sanitize=address --scratch-path $(CURDIR)/.build-asan $(SANITIZER_JOBS); \
	status=$$?; $(call sanitizer_reports,$(CURDIR)/.build-asan/reports)

## test-tsan: the Swift test suites under ThreadSanitizer (own build in .build-tsan), with the
## suppressions in .ci/tsan.supp (each says why); reports kept in .build-tsan/reports/ as for test-asan.
test-tsan: deps
	@rm -rf $(CURDIR)/.build-tsan/reports; mkdir -p $(CURDIR)/.build-tsan/reports
	KEYHOLE_SANITIZER=thread TSAN_OPTIONS="suppressions=$(CURDIR)/.ci/tsan.supp log_path=$(CURDIR)/.build-tsan/reports/tsan" SWIFT_BACKTRACE=enable=no \
	  nice -n 10 $(SWIFT) test --sanitize=thread --scratch-path $(CURDIR)/.build-tsan $(SANITIZER_JOBS); \
	status=$$?; $(call sanitizer_reports,$(CURDIR)/.build-tsan/reports)

# After a sanitizer run (its status in $$status): the reports' summary lines, counted; fails on any report.
define sanitizer_reports
if ls $(1)/* >/dev/null 2>&1; then \
  echo "sanitizer reports in $(1):"; grep -h '^SUMMARY' $(1)/* | sort | uniq -c | sort -rn; exit 1; \
fi; exit $$status
endef

clean:
	rm -rf .build .build-deb .build-fuzz .build-asan .build-tsan .keyhole keyhole_*.deb
