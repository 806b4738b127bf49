# Keyhole: `make run` and `make test` are the contract with every new user and with CI.

SWIFT       ?= swift
DEV_DIR     := $(CURDIR)/.keyhole
# A Unix socket path holds at most 107 bytes: fall back to /tmp for a deep checkout.
DEV_SOCKET  := $(shell p='$(DEV_DIR)/keyholed.sock'; if [ "$$(printf %s "$$p" | wc -c)" -le 107 ]; then echo "$$p"; else echo "/tmp/keyhole-dev-$$(id -u).sock"; fi)
APT_PACKAGES := libssl-dev libsystemd-dev systemd man-db groff-base procps

.PHONY: all deps build build-debug run test test-python test-swift deb clean

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
	fi
	@python3 -c 'import jsonschema' 2>/dev/null || { echo "make deps: installing jsonschema (Python tests only)"; python3 -m pip install --quiet jsonschema; }
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "make deps: swift not found; install Swift 6.2 or later from swift.org" >&2; exit 1; }

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

## test: every test: the Python client's against a real keyholed, then the Swift suites.
test: build-debug test-python test-swift

test-python: build-debug
	KEYHOLED=$(CURDIR)/.build/debug/keyholed python3 -m unittest discover -s Protocol/clients/python -v

test-swift: build-debug
	$(SWIFT) test --skip-build

## deb: the Debian package (keyhole_<version>_<arch>.deb here), from a release build with the Swift
## runtime linked in, so that it needs only Debian's own packages.
deb: deps
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build-deb --product keyholed
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build-deb --product keyhole
	packaging/deb/build-deb.sh --bin $(CURDIR)/.build-deb/release --strip \
	  --out $(CURDIR)/keyhole_$$(sed -n 's/.*static let current = "\(.*\)".*/\1/p' Sources/KeyholeProtocol/KeyholeVersion.swift)-1_$$(dpkg --print-architecture).deb

clean:
	rm -rf .build .build-deb .keyhole keyhole_*.deb
