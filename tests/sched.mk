# tests/sched.mk: unit tests of the scheduler (tiles, cost model, plans).
$(BUILD)/tests/test_sched: $(BUILD)/tests/test_sched.o $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) $(LDLIBS)

TESTS += $(BUILD)/tests/test_sched
