# tests/res_post.mk: kernels/res_post.h, how a group's post reaches the
# resident kernel: the host's writer and the device's rule for taking a
# post (plain C: no GPU, no CUDA).
$(BUILD)/tests/test_res_post: $(BUILD)/tests/test_res_post.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(CRITERION_LIBS)

TESTS += $(BUILD)/tests/test_res_post
