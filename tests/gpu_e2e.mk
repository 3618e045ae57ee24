# tests/gpu_e2e.mk: the CUDA backend end to end (make test-gpu).
ifeq ($(WITH_CUDA),1)
GPU_E2E := $(BUILD)/tests/test_gpu_e2e

$(GPU_E2E).o: | $(BUILD)/proto/gemmd.pb-c.h

$(GPU_E2E): $(GPU_E2E).o $(BUILD)/tests/e2e_util.o $(BUILD)/libgemmd.a | $(BUILD)/gemmd $(BUILD)/gemmd-fi
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(BUILD)/tests/e2e_util.o $(BUILD)/libgemmd.a $(PBC_A) \
		$(CRITERION_LIBS) $(CUDA_LDLIBS) -lm -lpthread -ldl -lrt

GPU_TESTS += $(GPU_E2E)
endif
