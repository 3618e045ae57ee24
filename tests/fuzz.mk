# tests/fuzz.mk: libFuzzer targets for frame decoding (fuzz_frame), op
# validation (fuzz_validate) and the mapping of clients' memfds as buffers
# and rings while the client truncates, punches and seals them (fuzz_shm),
# in tests/fuzz/.
#
#   make fuzz         build them with clang (-fsanitize=fuzzer,address,undefined)
#                     and run each for FUZZ_SECONDS (60) from tests/fuzz/corpus/;
#                     new inputs go to build/fuzz/corpus/, crashes to build/fuzz/artifacts/
#   make fuzz-seeds   rewrite the seed corpus in tests/fuzz/corpus/
#   make fuzz-socket  tests/fuzz/socket_fuzz.py: the frame corpus, mutated, over
#                     the socket of a running gemmd for FUZZ_SECONDS (GEMMD_BIN=DIR
#                     takes another build's, such as build/asan's from make test-asan)
#
# `make test` replays the committed corpus through both targets, built with
# the ordinary compiler and tests/fuzz/driver.c instead of libFuzzer.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_CFLAGS := -std=gnu11 -g -O1 -I. -Iinclude -I$(BUILD) -D_GNU_SOURCE \
               -DGEMMD_VERSION='"$(VERSION)"' -fsanitize=fuzzer,address,undefined \
               -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# The code under test, compiled into each target with the sanitizers
# (protobuf-c comes from its static library and the scheduler, which config.c
# names modes with, from the ordinary build: both uninstrumented).
FUZZ_SRCS := tests/fuzz/fuzz_common.c proto/frame.c $(BUILD)/proto/gemmd.pb-c.c \
             daemon/validate.c daemon/buffers.c daemon/config.c client/client.c client/cuda_ipc.c
FUZZ_TARGETS := frame validate shm

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SRCS) tests/fuzz/fuzz_common.h $(SCHED_OBJS) \
                    | $(BUILD)/proto/gemmd.pb-c.h
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq --no-install-recommends clang >/dev/null; \
		else echo "make fuzz needs clang: apt-get install clang" >&2; exit 1; fi; }
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_SRCS) $(SCHED_OBJS) $(PBC_A) -ldl -lpthread -lm

fuzz: $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))
	$(Q)for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/artifacts; \
		echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
		$(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-max_len=$$([ $$t = frame ] && echo 262144 || echo 512) -rss_limit_mb=4096 \
			-artifact_prefix=$(FUZZ_DIR)/artifacts/$$t- \
			$(FUZZ_DIR)/corpus/$$t tests/fuzz/corpus/$$t > $(FUZZ_DIR)/fuzz_$$t.log 2>&1; \
		st=$$?; \
		grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)' \
			$(FUZZ_DIR)/fuzz_$$t.log; \
		if [ $$st -ne 0 ]; then tail -n 40 $(FUZZ_DIR)/fuzz_$$t.log; \
			echo "fuzz_$$t: failed; the input is in $(FUZZ_DIR)/artifacts/"; exit 1; fi; \
	done; echo "fuzz: no crashes (logs in $(FUZZ_DIR)/)"

$(BUILD)/fuzz-seeds: tests/fuzz/seeds.c $(PROTO_OBJS) $(BUILD)/libgemmd.a | $(BUILD)/proto/gemmd.pb-c.h
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(PROTO_OBJS) $(BUILD)/libgemmd.a $(PBC_A) $(LDLIBS)

fuzz-seeds: $(BUILD)/fuzz-seeds
	$(Q)rm -rf tests/fuzz/corpus && $(BUILD)/fuzz-seeds tests/fuzz/corpus

# The replay of the corpus that `make test` runs.
FUZZ_REPLAY_OBJS := $(BUILD)/tests/fuzz/fuzz_common.o $(BUILD)/daemon/validate.o \
                    $(BUILD)/daemon/buffers.o $(BUILD)/daemon/config.o
$(FUZZ_REPLAY_OBJS) $(BUILD)/tests/fuzz/fuzz_frame.o $(BUILD)/tests/fuzz/fuzz_validate.o \
        $(BUILD)/tests/fuzz/fuzz_shm.o: \
        | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/tests/fuzz/driver_%.o: tests/fuzz/driver.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DFUZZ_CORPUS='"$(CURDIR)/tests/fuzz/corpus/$*"' -c $< -o $@

$(BUILD)/tests/fuzz_replay_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/driver_%.o \
                               $(FUZZ_REPLAY_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) $(LDLIBS)

TESTS += $(addprefix $(BUILD)/tests/fuzz_replay_,$(FUZZ_TARGETS))

fuzz-socket: $(BUILD)/gemmd $(BUILD)/gemmctl
	$(Q)tests/fuzz/socket_fuzz.py --seconds $(FUZZ_SECONDS) --bin $(or $(GEMMD_BIN),$(BUILD))

.PHONY: fuzz fuzz-seeds fuzz-socket
.SECONDARY: $(addprefix $(BUILD)/tests/fuzz/driver_,$(FUZZ_TARGETS:=.o))
