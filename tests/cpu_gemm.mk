# tests/cpu_gemm.mk: the CPU tile code (kernels/cpu_gemm.c) and kernels/half.h.
$(BUILD)/tests/test_cpu_gemm: $(BUILD)/tests/test_cpu_gemm.o $(KERN_OBJS) $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CRITERION_LIBS) -lm -lpthread

TESTS += $(BUILD)/tests/test_cpu_gemm
