# daemon/: the gemmd binary.
DAEMON_OBJS += $(addprefix $(BUILD)/daemon/, main.o config.o log.o server.o session.o \
               dispatch.o validate.o buffers.o worker.o backend_cpu.o stats.o notify.o \
               metrics.o users.o watchdog.o)

ifeq ($(WITH_CUDA),1)
DAEMON_OBJS += $(BUILD)/daemon/backend_cuda.o
endif

$(DAEMON_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

# gemmd_strerror and gemmd_dtype_size come from the client library's errors.
$(BUILD)/gemmd: $(DAEMON_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(DAEMON_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) \
		$(BUILD)/libgemmd.a $(UV_A) $(PBC_A) $(if $(CUDA_OBJS),$(CUDA_LDLIBS)) $(LDLIBS)

BIN += $(BUILD)/gemmd
