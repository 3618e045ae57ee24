# tests/gpu_kernels.mk: the CUDA kernels against a CPU reference (GPU_TESTS;
# the binary skips cleanly where no GPU exists).
ifeq ($(WITH_CUDA),1)
GPU_TESTS += $(BUILD)/tests/test_gpu_kernels

$(BUILD)/tests/test_gpu_kernels: $(BUILD)/tests/test_gpu_kernels.o $(BUILD)/kernels/grouped_gemm.o $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CUDA_LDLIBS) $(LDLIBS)
endif
