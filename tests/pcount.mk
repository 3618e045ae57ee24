# tests/pcount.mk: daemon/pcount.c, the counters each thread adds to in a
# block of its own and a reader sums.
$(BUILD)/tests/test_pcount: $(BUILD)/tests/test_pcount.o $(BUILD)/daemon/pcount.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) -lpthread

TESTS += $(BUILD)/tests/test_pcount
