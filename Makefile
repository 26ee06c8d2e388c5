# ancsd — build, test, benchmark and fuzz. Every target installs what it needs first
# (Debian packages through scripts/install-deps), so a fresh Debian 12 machine with only
# the Swift toolchain can run `make demo` and `make test` straight away.

SWIFT       ?= swift
SWIFTC      ?= swiftc
STRICT      := -Xswiftc -warnings-as-errors
BUILD_DEPS  := libdbus-1-dev libbluetooth-dev libmosquitto-dev pkg-config
# The desktop companion's tests run a real dunst under Xvfb, with fonts, icons (SVG) and a screenshot tool;
# its MPRIS players are checked with playerctl.
DESKTOP_TEST_DEPS := dunst xvfb imagemagick librsvg2-common adwaita-icon-theme fonts-dejavu-core fonts-noto-color-emoji playerctl
# It also runs on GNOME Shell headless (gnome-shell, and gjs for its notification helper) and on KDE
# Plasma's plasmashell under Xvfb (plasma-desktop holds the shell package it loads), whose popups and
# media controller are found and clicked with xdotool and read back by OCR (tesseract; docs/desktop.md).
DESKTOP_SHELL_DEPS := gnome-shell gjs plasma-workspace plasma-desktop xdotool tesseract-ocr tesseract-ocr-eng
# The MQTT tests run a real mosquitto broker, with TLS certificates made by openssl; one runs
# ancsd in a mount namespace (unshare, mount) with a hosts file of its own.
MQTT_TEST_DEPS := mosquitto mosquitto-clients openssl mount
TEST_DEPS   := $(BUILD_DEPS) python3 dbus-daemon dbus-bin systemd bluez wireshark-common tshark socat util-linux $(DESKTOP_TEST_DEPS) $(DESKTOP_SHELL_DEPS) $(MQTT_TEST_DEPS)
BENCH_DEPS  := $(TEST_DEPS) python3-dbus valgrind
# make demo: a private bus and python3 to join its two scenarios, nothing of the tests' desktops.
DEMO_DEPS   := $(BUILD_DEPS) python3 dbus-daemon dbus-bin
SYSTEM_TEST_DEPS := $(BUILD_DEPS) qemu-system-x86 linux-image-amd64 kmod busybox-static xz-utils bluez bluez-test-tools \
	dbus-daemon dbus-bin systemd python3 mmdebstrap e2fsprogs binutils debhelper dpkg-dev fakeroot lintian
# The Debian releases whose clean roots get the package and boot it with systemd.
BOOT_SUITES ?= bookworm trixie
FUZZ_SECONDS ?= 60
FUZZ_DIR    := .build/fuzz
# ancs-bench counts heap allocations by defining malloc/calloc/realloc (Benchmarks/ancs-bench/AllocationCounter.swift).
BENCH_LINK  := $(foreach f,malloc calloc realloc,-Xlinker --defsym=$(f)=ancs_bench_$(f))

# Code layout of the release binary (docs/performance.md, "Code layout"): linked by lld with each
# function in a section of its own, the functions the daemon runs placed together in the order of
# linker/ancsd.order (scripts/make-order-file writes it). Other names there are ignored. These
# builds have a build directory of their own: SwiftPM does not recompile when only -Xfrontend
# flags change, so objects of a plain release build would be linked without function sections.
LAYOUT      := --scratch-path .build/layout -Xswiftc -use-ld=lld -Xswiftc -Xfrontend -Xswiftc -function-sections \
	-Xlinker --symbol-ordering-file=$(CURDIR)/linker/ancsd.order -Xlinker --no-warn-symbol-ordering \
	-Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now
LAYOUT_BIN   = $$($(SWIFT) build -c release $(LAYOUT) --show-bin-path)

PREFIX      ?= /usr/local
DESTDIR     ?=
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions

.PHONY: all print-test-deps print-layout build release release-static deb check-deb demo test soak system-test check-install unit bench fuzz deps install uninstall clean
DEB_DEPS    := $(BUILD_DEPS) debhelper dpkg-dev fakeroot lintian
# What building or testing in a Debian root of another architecture needs (scripts/trixie-root).
CROSS_DEPS  := mmdebstrap qemu-user-static binfmt-support arch-test
HOST_ARCH   := $(shell dpkg --print-architecture)
# The architecture of make deb and check-deb.
ARCH        ?= $(HOST_ARCH)
# How make deb builds for another ARCH (docs/arm64.md): cross (swiftlang running natively,
# cross-compiling) or emulated (in a root of ARCH under qemu-user, as on a Pi; much slower).
FOREIGN_BUILD ?= cross

all: build

# The Debian packages make test needs, for scripts that set up another root (scripts/test-swiftlang).
print-test-deps:
	@echo $(TEST_DEPS)

# The code-layout flags of release builds, for scripts/make-order-file.
print-layout:
	@echo $(LAYOUT)

deps:
	@scripts/install-deps $(BUILD_DEPS)

build: deps
	$(SWIFT) build $(STRICT)

release: deps
	$(SWIFT) build -c release $(STRICT) --product ancsd

## release-static: ancsd with the Swift runtime linked in, for machines without Swift.
release-static: deps
	$(SWIFT) build -c release $(STRICT) --static-swift-stdlib $(LAYOUT) --product ancsd

## install: the binary, the systemd unit and sysusers entry, the user unit of "ancsd desktop" and
## its desktop entry (ancsd.desktop: the name desktops file its notifications under), the
## configuration (kept if it exists), the man page and bash completion. PREFIX and DESTDIR
## are respected.
install: release-static
	install -Dm755 -s $(LAYOUT_BIN)/ancsd $(DESTDIR)$(BINDIR)/ancsd
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/ancsd.service > $(DESTDIR)$(UNITDIR)/ancsd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/ancsd.service
	install -Dm644 systemd/ancsd.sysusers $(DESTDIR)$(SYSUSERSDIR)/ancsd.conf
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/ancsd-desktop.service | install -Dm644 /dev/stdin $(DESTDIR)$(PREFIX)/lib/systemd/user/ancsd-desktop.service
	install -Dm644 desktop/ancsd.desktop $(DESTDIR)$(PREFIX)/share/applications/ancsd.desktop
	test -e $(DESTDIR)$(SYSCONFDIR)/ancsd/ancsd.conf || install -Dm644 systemd/ancsd.conf $(DESTDIR)$(SYSCONFDIR)/ancsd/ancsd.conf
	install -Dm644 docs/ancsd.8 $(DESTDIR)$(MANDIR)/man8/ancsd.8
	install -Dm644 completions/ancsd.bash $(DESTDIR)$(BASHCOMPDIR)/ancsd

## deb: the Debian package, built by dpkg-buildpackage from debian/ under .build/deb
## (scripts/build-deb); lintian must report no error. The last line printed is the .deb's path.
## ARCH=arm64 (on another machine): built by Debian 13's swiftlang, cross-compiling in this
## machine's trixie root (FOREIGN_BUILD=cross, CI's way) or in an arm64 trixie root under
## qemu-user emulation (FOREIGN_BUILD=emulated); docs/arm64.md.
deb:
	@scripts/install-deps $(DEB_DEPS) $(if $(filter $(HOST_ARCH),$(ARCH)),,$(CROSS_DEPS))
	@FOREIGN_BUILD=$(FOREIGN_BUILD) scripts/build-deb $(ARCH)

## check-deb: the package into a clean bookworm minbase root with apt: runs without Swift,
## ancsd --version, decode and doctor work, remove and purge leave nothing (SystemTest/root-checks).
## ARCH=arm64: a trixie root under emulation, and decode must print what the native build prints
## (scripts/check-deb).
check-deb: deb
	scripts/check-deb $(ARCH)

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/ancsd $(DESTDIR)$(UNITDIR)/ancsd.service $(DESTDIR)$(SYSUSERSDIR)/ancsd.conf \
		$(DESTDIR)$(PREFIX)/lib/systemd/user/ancsd-desktop.service $(DESTDIR)$(PREFIX)/share/applications/ancsd.desktop \
		$(DESTDIR)$(SYSCONFDIR)/ancsd/ancsd.conf $(DESTDIR)$(MANDIR)/man8/ancsd.8 $(DESTDIR)$(BASHCOMPDIR)/ancsd
	-rmdir $(DESTDIR)$(SYSCONFDIR)/ancsd 2>/dev/null

## demo: a private D-Bus bus, the simulated iPhone (scenarios/demo.jsonl, then its music:
## scenarios/music.jsonl) and ancsd run against it, printing the notifications and the player's
## track; presses play-pause from Linux (ancsd media toggle); ends by itself.
demo:
	@scripts/install-deps $(DEMO_DEPS)
	$(SWIFT) build -c release $(STRICT) --product ancsd
	$(SWIFT) build -c release $(STRICT) --product ancs-phone-sim
	@scripts/demo

## test: installs the test dependencies, builds everything with warnings as errors, runs every test
## (ancsd desktop on a real dunst under Xvfb and on GNOME Shell headless among them: their
## screenshots land in .build/artifacts/desktop-dunst.png and desktop-gnome-VERSION[-banner].png).
## unit: the tests that need nothing installed beyond the Swift toolchain and the -dev packages,
## in parallel (a warm run takes well under 3 minutes). Under ANCSD_UNIT=1 a test that starts an
## installed program (dbus-daemon, mosquitto, btmon, ...) fails and names it: its suite goes in
## UNIT_SKIP, and make test runs it.
UNIT_SKIP := EndToEndTests|GattPhoneTests|PhoneSimulatorTests|DBusTests|MQTTTests|MQTTMediaTests|AccessoryExportTests|GattClientTests|CaptureLoopTests|DaemonOnVirtualTimeTests|MPRISBusTests
unit: deps
	$(SWIFT) build --build-tests $(STRICT)
	ANCSD_UNIT=1 $(SWIFT) test --skip-build --parallel --skip '$(UNIT_SKIP)'

test:
	@scripts/install-deps $(TEST_DEPS)
	scripts/check-concurrency
	$(SWIFT) build --build-tests $(STRICT)
	$(SWIFT) test --skip-build --no-parallel

## soak: a seeded chaos run of the release ancsd (the static binary make install ships) for
## SOAK_SECONDS (default 600) against two or three simulated iPhones: notifications, bursts,
## disconnects, bluetoothd restarts, Control Point errors and timeouts, FIFO readers and control
## clients that misbehave, actions, reloads and kill -9, all checked as they happen by an oracle
## built from the simulator's own log; RSS, descriptors and threads must stay bounded.
## SOAK_OUTPUTS=1: ancsd also runs an --exec command and publishes to a private mosquitto broker
## (restarted now and then, the command reloaded and slowed): at each quiet point what the
## command and an MQTT subscriber got is checked against standard output, losses against
## ancsd's dropped counts (not yet by default: ancsd's threads then pass the bound at times).
## Prints its seed; SOAK_SEED=N replays that run (docs/soak.md). Every run prints RSS's trend
## after warm-up in kB an hour. SOAK_HEAP=malloc: glibc's malloc_stats of ancsd at both marks;
## SOAK_HEAP=heaptrack: also every allocation after warm-up, recorded by heaptrack (gdb, heaptrack).
SOAK_SECONDS ?= 600
soak:
	@scripts/install-deps $(TEST_DEPS) python3 $(if $(SOAK_HEAP),gdb heaptrack)
	$(SWIFT) build -c release $(STRICT) --static-swift-stdlib --product ancsd
	$(SWIFT) build -c release $(STRICT) --static-swift-stdlib --product ancs-phone-sim
	python3 Soak/test_oracle.py
	python3 Soak/test_outputs.py
	python3 Soak/test_soak.py
	python3 Soak/soak.py $$($(SWIFT) build -c release --show-bin-path) --seconds $(SOAK_SECONDS) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(if $(SOAK_OUTPUTS),--outputs)

## system-test: ancsd against the real kernel Bluetooth stack and bluetoothd, in a QEMU VM with
## two virtual LE controllers and an iPhone played by ancs-gatt-phone (docs/system-test.md).
## Then the package: built by make deb, installed with apt into clean roots of BOOT_SUITES,
## checked, and booted with systemd to play the README's admin story (SystemTest/boot-scenario).
system-test:
	@scripts/install-deps $(SYSTEM_TEST_DEPS)
	$(SWIFT) build -c release $(STRICT) --static-swift-stdlib --product ancsd
	$(SWIFT) build -c release $(STRICT) --static-swift-stdlib --product ancs-gatt-phone
	SystemTest/run
	@mkdir -p .build/system-test
	scripts/build-deb > .build/system-test/deb.out || { cat .build/system-test/deb.out; exit 1; }
	@cat .build/system-test/deb.out
	SystemTest/boot-scenario "$$(tail -n 1 .build/system-test/deb.out)" $(BOOT_SUITES)

## check-install: make install / uninstall into a scratch DESTDIR, checked (scripts/check-install).
check-install:
	@scripts/install-deps $(TEST_DEPS)
	scripts/check-install

## bench: release-build benchmarks of the static binary make install ships (code layout
## included); each figure of docs/performance.md is printed with its target and PASS or FAIL, as a
## ratio to a reference measured in the same run where there is one: ancsd decode against a
## Python decoder, btsnoop MB/s, the daemon end to end on the simulator (latency against
## Benchmarks/hop-floor, the same process chain doing nothing else; burst, RSS after the burst,
## idle wakeups), instructions per burst notification (callgrind). Also the reassembler
## (ancs-bench) and D-Bus round trips (dbus-bench). The figures are listed again at the end. A
## FAIL does not stop make: wall-clock figures move with whatever else the machine runs.
# Every product with the same flags (--static-swift-stdlib), so one build serves them all.
BENCH_BUILD := $(SWIFT) build -c release $(STRICT) --static-swift-stdlib $(LAYOUT)
BENCH_FIGURES := $(CURDIR)/.build/bench-figures.txt
bench:
	@scripts/install-deps $(BENCH_DEPS)
	@mkdir -p .build && rm -f $(BENCH_FIGURES)
	$(BENCH_BUILD) --product ancs-bench $(BENCH_LINK)
	$(LAYOUT_BIN)/ancs-bench
	$(BENCH_BUILD) --product ancsd
	BENCH_FIGURES=$(BENCH_FIGURES) python3 Benchmarks/decode/decode_bench.py $(LAYOUT_BIN)
	$(BENCH_BUILD) --product dbus-bench && $(LAYOUT_BIN)/dbus-bench
	$(BENCH_BUILD) --product ancs-phone-sim
	$(BENCH_BUILD) --product hop-floor
	BENCH_FIGURES=$(BENCH_FIGURES) python3 Benchmarks/daemon_bench.py $(LAYOUT_BIN)
	BENCH_FIGURES=$(BENCH_FIGURES) python3 Benchmarks/cg_per_notification.py $(LAYOUT_BIN) ancsd
	@echo "make bench: the figures (docs/performance.md)"; cat $(BENCH_FIGURES)

## fuzz: libFuzzer for FUZZ_SECONDS each (default 60) over the ANCS core (reassembler, NS/CP
## decoders), the JSON parser and writer, the ancs-capture/1 reader, the btsnoop reader, the
## control socket's input path and the Apple Media Service session (Fuzz/README.md). FUZZ_TARGETS
## picks some: make fuzz FUZZ_TARGETS="json capture".
FUZZ_TARGETS ?= ancs json capture btsnoop control ams
FUZZ_FLAGS  := -O -g -parse-as-library -swift-version 6 -warnings-as-errors -sanitize=fuzzer,address \
	-enable-upcoming-feature ExistentialAny -enable-upcoming-feature InternalImportsByDefault
# A module of the package as a static library for the fuzz targets: $(1) its name, $(2) its sources.
fuzz-module = $(SWIFTC) $(FUZZ_FLAGS) -parse-as-library -emit-library -static -module-name $(1) \
	-emit-module -emit-module-path $(FUZZ_DIR)/lib/$(1).swiftmodule -I $(FUZZ_DIR)/lib \
	$(2) -o $(FUZZ_DIR)/lib/lib$(1).a
fuzz:
	@mkdir -p $(FUZZ_DIR)/lib $(foreach t,$(FUZZ_TARGETS),Fuzz/corpus/$(t))
	$(SWIFTC) $(FUZZ_FLAGS) -module-name ANCSFuzz Sources/ANCS/*.swift Fuzz/*.swift -o $(FUZZ_DIR)/ancs-fuzz
	$(call fuzz-module,JSON,Sources/JSON/*.swift)
	$(call fuzz-module,ANCS,Sources/ANCS/*.swift)
	$(call fuzz-module,ANCSCapture,Sources/ANCSCapture/*.swift)
	$(call fuzz-module,BluetoothUUIDs,Sources/BluetoothUUIDs/*.swift)
	$(call fuzz-module,GattSession,Sources/GattSession/*.swift)
	$(call fuzz-module,AMS,Sources/AMS/*.swift)
	$(call fuzz-module,Btsnoop,Sources/Btsnoop/*.swift)
	$(call fuzz-module,ControlProtocol,Sources/ControlProtocol/*.swift)
	$(SWIFTC) $(FUZZ_FLAGS) -I $(FUZZ_DIR)/lib -L $(FUZZ_DIR)/lib -lJSON Fuzz/formats/JSONFuzz.swift -o $(FUZZ_DIR)/json-fuzz
	$(SWIFTC) $(FUZZ_FLAGS) -I $(FUZZ_DIR)/lib -L $(FUZZ_DIR)/lib -lANCSCapture -lANCS -lJSON \
		Fuzz/formats/CaptureFuzz.swift -o $(FUZZ_DIR)/capture-fuzz
	$(SWIFTC) $(FUZZ_FLAGS) -I $(FUZZ_DIR)/lib -L $(FUZZ_DIR)/lib -lBtsnoop -lBluetoothUUIDs -lANCSCapture -lANCS -lAMS -lGattSession -lJSON \
		Fuzz/formats/BtsnoopFuzz.swift -o $(FUZZ_DIR)/btsnoop-fuzz
	$(SWIFTC) $(FUZZ_FLAGS) -I $(FUZZ_DIR)/lib -L $(FUZZ_DIR)/lib -lControlProtocol -lJSON \
		Fuzz/formats/ControlFuzz.swift -o $(FUZZ_DIR)/control-fuzz
	$(SWIFTC) $(FUZZ_FLAGS) -I $(FUZZ_DIR)/lib -L $(FUZZ_DIR)/lib -lAMS -lGattSession \
		Fuzz/formats/AMSFuzz.swift -o $(FUZZ_DIR)/ams-fuzz
	@for t in $(FUZZ_TARGETS); do \
		seeds=Fuzz/seeds; [ $$t = ancs ] || seeds=Fuzz/seeds-$$t; \
		echo "== $$t-fuzz for $(FUZZ_SECONDS) s"; \
		SWIFT_BACKTRACE=enable=no $(FUZZ_DIR)/$$t-fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=$$( [ $$t = btsnoop ] && echo 16384 || echo 4096 ) \
			-print_final_stats=1 -artifact_prefix=Fuzz/$$t- Fuzz/corpus/$$t $$seeds || exit 1; \
	done

clean:
	rm -rf .build
