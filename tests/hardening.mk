# tests/hardening.mk: the production-hardening suites, which run the real
# build/gemmd: users and limits, hostile input, faults (killed clients, a
# restarted daemon), the shared-memory rings (hostile ones too), systemd
# (install, units, socket activation, watchdog) and a short soak; and build/soak, the soak program (`make soak` runs the
# long version: 64 clients for 180 s).
HARD_SUITES := $(addprefix $(BUILD)/tests/,test_e2e_users test_e2e_hostile test_e2e_faults \
               test_e2e_ring test_systemd test_soak)
HARD_UTIL := $(BUILD)/tests/hard_util.o $(BUILD)/tests/e2e_util.o

$(HARD_SUITES:=.o) $(HARD_UTIL) $(BUILD)/tests/soak.o $(BUILD)/tests/soak_hostile.o: \
        | $(BUILD)/proto/gemmd.pb-c.h

# test_systemd runs `make install` in this tree.
$(BUILD)/tests/test_systemd.o: CFLAGS += -DGEMMD_SRCDIR='"$(CURDIR)"'

$(HARD_SUITES): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(HARD_UTIL) $(BUILD)/libgemmd.a \
                | $(BUILD)/gemmd $(BUILD)/gemmd-fi $(BUILD)/gemmctl $(BUILD)/soak
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(HARD_UTIL) $(BUILD)/libgemmd.a $(PBC_A) $(CRITERION_LIBS) -lm -lpthread

$(BUILD)/soak: $(BUILD)/tests/soak.o $(BUILD)/tests/soak_hostile.o $(HARD_UTIL) $(BUILD)/libgemmd.a \
               | $(BUILD)/gemmd
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) -lm -lpthread

TESTS += $(HARD_SUITES)

SOAK_CLIENTS ?= 64
SOAK_SECONDS ?= 180
soak: $(BUILD)/soak $(BUILD)/gemmd
	$(Q)$(BUILD)/soak --clients $(SOAK_CLIENTS) --seconds $(SOAK_SECONDS)

.PHONY: soak
