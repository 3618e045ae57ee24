# tests/config.mk: the daemon's defaults that depend on the host
# (daemon/config.h: config_auto_loops), and options whose default is
# auto (config_parse_args).
$(BUILD)/tests/test_config: $(BUILD)/tests/test_config.o $(BUILD)/daemon/config.o $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) $(LDLIBS)

TESTS += $(BUILD)/tests/test_config
