# gemmd: top-level, non-recursive Makefile. Each directory adds its sources
# and rules in its own module.mk; everything is built under build/.
#
#   make            build gemmd, gemmctl, libgemmd (and the CUDA backend if nvcc exists)
#   make test       install missing Debian packages, build, run every test that needs no GPU
#   make test-gpu   run the GPU tests (needs an NVIDIA GPU)
#   make test-sanitize  the daemon's suites against sanitized builds of it (tests/sanitize.mk)
#   make demo       start gemmd on a temporary socket and run a few clients against it
#   make deb        build/deb/gemmd_VERSION_ARCH.deb (deploy/module.mk)
#   V=1             show full commands

V ?= 0
Q := $(if $(filter 1,$(V)),,@)
say = $(if $(filter 1,$(V)),,@printf '  %-7s %s\n' $(1) $(2);)

BUILD := build
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := 0.1.0
# libgemmd's ABI: the soname's number, bumped when a public struct changes.
SOVERSION := 1

CC ?= cc
CXX ?= c++
OPT ?= -O2
CFLAGS := -std=gnu11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fPIC -MMD -MP \
          -I. -Iinclude -I$(BUILD) -D_GNU_SOURCE -DGEMMD_VERSION='"$(VERSION)"' $(EXTRA_CFLAGS)
LDLIBS := -lpthread -lm -ldl -lrt

# libuv and protobuf-c are linked statically so the binaries run on hosts
# (such as GPU nodes) that lack the -dev packages.
UV_A := $(shell $(CC) -print-file-name=libuv_a.a)
PBC_A := $(shell $(CC) -print-file-name=libprotobuf-c.a)
PROTOC_C ?= protoc-c

# CUDA is optional: without nvcc the CUDA backend is left out.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(NVCC),)
WITH_CUDA ?= 0
else
WITH_CUDA ?= 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCC_GENCODE ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
                -gencode=arch=compute_80,code=compute_80
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo -Xcompiler -fPIC -I. -Iinclude -I$(BUILD) \
             $(NVCC_GENCODE) -MMD -MP $(EXTRA_NVCCFLAGS)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++
ifeq ($(WITH_CUDA),1)
CFLAGS += -DGEMMD_WITH_CUDA=1 -I$(CUDA_HOME)/include
endif

# Filled in by the module.mk files.
PROTO_OBJS :=
SCHED_OBJS :=
KERN_OBJS :=
CUDA_OBJS :=
LIB_OBJS :=
DAEMON_OBJS :=
CTL_OBJS :=
BIN :=
TESTS :=
GPU_TESTS :=

all: bins

include proto/module.mk
include scheduler/module.mk
include kernels/module.mk
include client/module.mk
include daemon/module.mk
include bench/module.mk
include tests/module.mk
include systemd/module.mk
include deploy/module.mk
include blas/module.mk

bins: $(BIN)

$(BUILD)/%.o: %.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	$(call say,NVCC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

deps:
	$(Q)scripts/deps.sh

NPROC := $(shell nproc 2>/dev/null || echo 2)
# The daemon's suites run once more with every daemon serving thus (also
# under the sanitizers, tests/sanitize.mk).
E2E_SECOND_PASS := E2E_LOOPS=3 E2E_DEVPROC=yes E2E_SPIN=50
SECOND_PASS_SUITES = $(filter-out %/test_systemd,$(E2E_SUITES) $(HARD_SUITES))

# The scripted suites (Python, gemmbench) take this build's binaries.
test: deps
	$(Q)$(MAKE) --no-print-directory -j$(NPROC) bins tests
	$(Q)GEMMD_BIN=$(abspath $(BUILD)) GEMMD_LIBRARY=$(abspath $(BUILD))/libgemmd.so \
		scripts/run-tests.sh $(TESTS)
	@echo "== the daemon's suites once more, each daemon serving with 3 event loops, a device process and 50 us of polling"
	$(Q)$(E2E_SECOND_PASS) GEMMD_BIN=$(abspath $(BUILD)) GEMMD_LIBRARY=$(abspath $(BUILD))/libgemmd.so \
		scripts/run-tests.sh $(SECOND_PASS_SUITES)

test-gpu: bins $(GPU_TESTS)
	$(Q)scripts/run-tests.sh --gpu $(GPU_TESTS)

demo: deps
	$(Q)$(MAKE) --no-print-directory -j$(NPROC) bins
	$(Q)scripts/demo.sh

tests: $(TESTS) $(GPU_TESTS)

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)

.PHONY: all bins deps test test-gpu demo tests format clean install uninstall

-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
