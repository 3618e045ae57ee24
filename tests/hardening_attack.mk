# tests/hardening_attack.mk (after hardening.mk, whose HARD_UTIL it takes): test_e2e_attack, what one hostile local user tries
# against everyone else, each attack against the real build/gemmd: memory
# made unreadable under the daemon (truncated, punched, resealed shared
# memory and rings), the node's memory mappings and descriptors taken,
# memory amplified past the limits, sessions and partial frames held, and
# what one user may see of another. One file of tests/attack/ per area, all
# in one binary; it runs in both passes of `make test`.
ATTACK_SRCS := $(sort $(wildcard tests/attack/*.c))
ATTACK_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(ATTACK_SRCS))
ATTACK_SUITE := $(BUILD)/tests/test_e2e_attack

$(ATTACK_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

$(ATTACK_SUITE): $(ATTACK_OBJS) $(HARD_UTIL) $(BUILD)/libgemmd.a \
                 | $(BUILD)/gemmd $(BUILD)/gemmd-fi $(BUILD)/gemmctl
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(ATTACK_OBJS) $(HARD_UTIL) $(BUILD)/libgemmd.a $(PBC_A) $(CRITERION_LIBS) \
		-lm -lpthread

HARD_SUITES += $(ATTACK_SUITE)
TESTS += $(ATTACK_SUITE)
