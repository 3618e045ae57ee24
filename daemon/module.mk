# daemon/: the gemmd binary.
DAEMON_OBJS += $(BUILD)/daemon/main.o

$(DAEMON_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/gemmd: $(DAEMON_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(UV_A) $(PBC_A) $(if $(CUDA_OBJS),$(CUDA_LDLIBS)) $(LDLIBS)

BIN += $(BUILD)/gemmd
