# tests/config.mk: the daemon's defaults that depend on the host
# (daemon/config.h: config_auto_loops).
$(BUILD)/tests/test_config: $(BUILD)/tests/test_config.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) $(LDLIBS)

TESTS += $(BUILD)/tests/test_config
