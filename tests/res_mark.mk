# tests/res_mark.mk: kernels/res_mark.h, the resident kernel's slot marks
# and the rule its CTAs follow with them (plain C: no GPU, no CUDA).
$(BUILD)/tests/test_res_mark: $(BUILD)/tests/test_res_mark.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(CRITERION_LIBS)

TESTS += $(BUILD)/tests/test_res_mark
