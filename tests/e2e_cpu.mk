# tests/e2e_cpu.mk: test_e2e_cpu, the daemon's CPU cost by thread role and
# its CPU use while idle, against the real build/gemmd.
E2E_CPU := $(BUILD)/tests/test_e2e_cpu
E2E_CPU_LINK := $(BUILD)/tests/e2e_util.o $(BUILD)/tests/hard_util.o

$(E2E_CPU).o: | $(BUILD)/proto/gemmd.pb-c.h

$(E2E_CPU): $(E2E_CPU).o $(E2E_CPU_LINK) $(BUILD)/libgemmd.a | $(BUILD)/gemmd
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(E2E_CPU_LINK) $(BUILD)/libgemmd.a $(PBC_A) $(CRITERION_LIBS) -lm -lpthread

TESTS += $(E2E_CPU)
