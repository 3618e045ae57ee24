# tests/frame_codec.mk: proto/frame.c's fast Submit decoder and Completion
# encoder checked against protobuf-c.
$(BUILD)/tests/test_frame_codec.o: | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/tests/test_frame_codec: $(BUILD)/tests/test_frame_codec.o $(PROTO_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(PROTO_OBJS) $(BUILD)/libgemmd.a $(PBC_A) $(CRITERION_LIBS) -lm -lpthread

TESTS += $(BUILD)/tests/test_frame_codec
