# tests/validate.mk: daemon/validate.c's checks that depend on what the
# devices run (struct dtype_caps), and the scalars it hands the kernels.
$(BUILD)/tests/test_validate.o: | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/tests/test_validate: $(BUILD)/tests/test_validate.o $(BUILD)/tests/fuzz/fuzz_common.o \
                              $(BUILD)/daemon/validate.o $(BUILD)/daemon/buffers.o \
                              $(BUILD)/daemon/config.o $(PROTO_OBJS) $(SCHED_OBJS) \
                              $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) $(CRITERION_LIBS) $(LDLIBS)

TESTS += $(BUILD)/tests/test_validate
