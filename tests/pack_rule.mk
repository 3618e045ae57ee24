# tests/pack_rule.mk: which groups get packed copies of their operands
# (cuda_gemm_pack_bytes): host code of the CUDA build, no GPU needed, so it
# runs with `make test` wherever the kernels are built.
ifeq ($(WITH_CUDA),1)
$(BUILD)/tests/test_pack_rule: $(BUILD)/tests/test_pack_rule.o $(BUILD)/kernels/grouped_gemm.o $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) $(CUDA_LDLIBS) $(LDLIBS)

TESTS += $(BUILD)/tests/test_pack_rule
endif
