# tests/client_unit.mk: libgemmd against a scripted stand-in for the daemon,
# the .npy reader and writer, and gemmctl top's block. Needs no daemon and no GPU.
TESTS += $(BUILD)/tests/test_client_unit

$(BUILD)/tests/test_client_unit.o: | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/tests/test_client_unit: $(BUILD)/tests/test_client_unit.o $(BUILD)/client/npy.o \
		$(BUILD)/client/gemmctl_top.o \
		$(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) $(CRITERION_LIBS) $(LDLIBS)
