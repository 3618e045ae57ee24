# tests/tmap_memo.mk: kernels/tmap_memo.h, the memo of encoded tensor maps
# that the CUDA backend's launches copy instead of encoding again (plain C:
# no GPU, no CUDA).
$(BUILD)/tests/test_tmap_memo: $(BUILD)/tests/test_tmap_memo.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(CRITERION_LIBS)

TESTS += $(BUILD)/tests/test_tmap_memo
