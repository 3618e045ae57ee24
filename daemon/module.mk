# daemon/: the gemmd binary.
DAEMON_OBJS += $(addprefix $(BUILD)/daemon/, main.o config.o log.o server.o session.o ring.o \
               dispatch.o reply.o devmem.o unixsock.o validate.o buffers.o worker.o backend_cpu.o stats.o notify.o \
               metrics.o users.o watchdog.o backend_proc.o devhost.o cpuacct.o pcount.o)

ifeq ($(WITH_CUDA),1)
DAEMON_OBJS += $(addprefix $(BUILD)/daemon/, backend_cuda.o cuda_launch.o cuda_completion.o \
               cuda_memory.o cuda_resident.o)
endif

$(DAEMON_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

# gemmd_strerror and gemmd_dtype_size come from the client library's errors.
$(BUILD)/gemmd: $(DAEMON_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(DAEMON_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) \
		$(BUILD)/libgemmd.a $(UV_A) $(PBC_A) $(if $(CUDA_OBJS),$(CUDA_LDLIBS)) $(LDLIBS)

BIN += $(BUILD)/gemmd

# build/gemmd-fi: gemmd with fault injection compiled in, for the tests of
# recovery from a broken device (a CUDA context with a sticky error; on the
# CPU backend, a device process that dies) and from the worker's allocations
# failing (GEMMD_FAULT_ALLOC, worker.c); never installed. Only the files
# that look at GEMMD_FAULT_INJECTION are compiled a second time.
FI_SRCS := validate backend_cpu worker $(if $(filter 1,$(WITH_CUDA)),cuda_launch)
FI_OBJS := $(FI_SRCS:%=$(BUILD)/fi/daemon/%.o) $(if $(filter 1,$(WITH_CUDA)),$(BUILD)/daemon/fault_cuda.o)
FI_BASE := $(filter-out $(FI_SRCS:%=$(BUILD)/daemon/%.o),$(DAEMON_OBJS))

$(BUILD)/fi/daemon/%.o: daemon/%.c | $(BUILD)/proto/gemmd.pb-c.h
	$(call say,CC,$< [fault injection])
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DGEMMD_FAULT_INJECTION=1 -c $< -o $@

$(BUILD)/gemmd-fi: $(FI_BASE) $(FI_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(FI_BASE) $(FI_OBJS) $(PROTO_OBJS) $(SCHED_OBJS) $(KERN_OBJS) $(CUDA_OBJS) \
		$(BUILD)/libgemmd.a $(UV_A) $(PBC_A) $(if $(CUDA_OBJS),$(CUDA_LDLIBS)) $(LDLIBS)
