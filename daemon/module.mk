# daemon/: the gemmd binary.
DAEMON_OBJS += $(addprefix $(BUILD)/daemon/, main.o config.o log.o server.o session.o \
               dispatch.o devmem.o unixsock.o validate.o buffers.o worker.o backend_cpu.o stats.o notify.o \
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

# build/gemmd-fi: gemmd with fault injection compiled in, for the GPU tests
# of recovery from a broken CUDA context; never installed. Only the files
# that look at GEMMD_FAULT_INJECTION are compiled a second time.
ifeq ($(WITH_CUDA),1)
FI_OBJS := $(BUILD)/fi/daemon/validate.o $(BUILD)/fi/daemon/backend_cuda.o $(BUILD)/daemon/fault_cuda.o
FI_BASE := $(filter-out $(BUILD)/daemon/validate.o $(BUILD)/daemon/backend_cuda.o,$(DAEMON_OBJS))

$(BUILD)/fi/daemon/%.o: daemon/%.c | $(BUILD)/proto/gemmd.pb-c.h
	$(call say,CC,$< [fault injection])
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DGEMMD_FAULT_INJECTION=1 -c $< -o $@

$(BUILD)/gemmd-fi: $(FI_BASE) $(FI_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(FI_BASE) $(FI_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) \
		$(BUILD)/libgemmd.a $(UV_A) $(PBC_A) $(CUDA_LDLIBS) $(LDLIBS)
endif
