# proto/: the wire protocol, compiled by protoc-c at build time, and framing.

# One protoc-c run makes both files (a grouped target).
$(BUILD)/proto/gemmd.pb-c.c $(BUILD)/proto/gemmd.pb-c.h &: proto/gemmd.proto
	$(call say,PROTOC,$<)
	@mkdir -p $(BUILD)
	$(Q)$(PROTOC_C) --c_out=$(BUILD) $<

PROTO_OBJS += $(BUILD)/proto/gemmd.pb-c.o $(BUILD)/proto/frame.o

$(BUILD)/proto/gemmd.pb-c.o: $(BUILD)/proto/gemmd.pb-c.c
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# Everything that includes the generated header waits for it.
$(BUILD)/proto/frame.o: $(BUILD)/proto/gemmd.pb-c.h
