# ancsd — build, test, benchmark and fuzz. Every target installs what it needs first
# (Debian packages through scripts/install-deps), so a fresh Debian 12 machine with only
# the Swift toolchain can run `make demo` and `make test` straight away.

SWIFT       ?= swift
SWIFTC      ?= swiftc
STRICT      := -Xswiftc -warnings-as-errors
BUILD_DEPS  := libdbus-1-dev pkg-config
TEST_DEPS   := $(BUILD_DEPS) dbus-daemon dbus-bin
BENCH_DEPS  := $(TEST_DEPS) python3-dbus
FIXTURES    := Tests/ANCSCaptureTests/Fixtures/captures
DEMO_CAPTURE ?= $(FIXTURES)/real-ds-ringly-sms-uid0x14-all-eight-attributes.jsonl
FUZZ_SECONDS ?= 60
FUZZ_DIR    := .build/fuzz

.PHONY: all build release demo test bench fuzz deps clean

all: build

deps:
	@scripts/install-deps $(BUILD_DEPS)

build: deps
	$(SWIFT) build $(STRICT)

release: deps
	$(SWIFT) build -c release $(STRICT) --product ancsd

## demo: decodes the bundled sample capture and prints each record as JSON.
demo: release
	@echo "== ancsd decode $(DEMO_CAPTURE)"
	@$$($(SWIFT) build -c release --show-bin-path)/ancsd decode $(DEMO_CAPTURE)

## test: installs the test dependencies, builds everything with warnings as errors, runs every test.
test:
	@scripts/install-deps $(TEST_DEPS)
	$(SWIFT) build --build-tests $(STRICT)
	$(SWIFT) test --skip-build

## bench: release-build benchmarks that print their numbers.
bench:
	@scripts/install-deps $(BENCH_DEPS)
	$(SWIFT) build -c release $(STRICT) --product ancs-bench
	$$($(SWIFT) build -c release --show-bin-path)/ancs-bench
	$(SWIFT) build -c release $(STRICT) --product dbus-bench && $$($(SWIFT) build -c release --show-bin-path)/dbus-bench

## fuzz: libFuzzer over the reassembler and the NS/CP decoders for FUZZ_SECONDS (default 60).
fuzz:
	@mkdir -p $(FUZZ_DIR) Fuzz/corpus
	$(SWIFTC) -O -parse-as-library -sanitize=fuzzer,address -module-name ANCSFuzz \
		Sources/ANCS/*.swift Fuzz/ANCSFuzz.swift -o $(FUZZ_DIR)/ancs-fuzz
	$(FUZZ_DIR)/ancs-fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 Fuzz/corpus Fuzz/seeds

clean:
	rm -rf .build
