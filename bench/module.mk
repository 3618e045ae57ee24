# bench/: gemmbench, gemmd's kernels against cuBLAS (needs CUDA and cuBLAS),
# and gemmbench-latency (needs only libgemmd).
ifeq ($(WITH_CUDA),1)
ifneq ($(wildcard $(CUDA_HOME)/lib64/libcublas.so),)
BENCH_OBJS := $(BUILD)/bench/gemmbench.o $(BUILD)/bench/calibrate.o $(BUILD)/bench/bench_fill.o \
              $(BUILD)/bench/launch_floor.o $(BUILD)/kernels/grouped_gemm.o

$(BUILD)/gemmbench: $(BENCH_OBJS) $(SCHED_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas $(CUDA_LDLIBS) $(LDLIBS)

BIN += $(BUILD)/gemmbench
endif
endif

# `gemmbench clients` (bench/clients.c, bench/clients_loop.c): many client
# processes through libgemmd, cuBLAS, or cuBLAS under MPS.
ifeq ($(WITH_CUDA),1)
ifneq ($(wildcard $(CUDA_HOME)/lib64/libcublas.so),)
CLIENTS_OBJS := $(BUILD)/bench/clients.o $(BUILD)/bench/clients_loop.o $(BUILD)/bench/bench_util.o
$(BUILD)/gemmbench: $(CLIENTS_OBJS) $(BUILD)/libgemmd.a $(PBC_A)
endif
endif

# gemmbench-latency (bench/latency.c): the round trip of a lone small
# request through gemmd. Only libgemmd, so it is built with or without CUDA.
$(BUILD)/bench/latency.o: | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/gemmbench-latency: $(BUILD)/bench/latency.o $(BUILD)/bench/bench_util.o $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) $(LDLIBS)

BIN += $(BUILD)/gemmbench-latency

# gemmbench-blas (bench/blas_prog.c): a program that only calls the
# Fortran BLAS of whatever libblas.so.3 it is given (the system's, or the
# gemmd BLAS through LD_LIBRARY_PATH), and, built with cuBLAS, the same
# calls through cuBLAS in its own process. Linked by soname so that it
# needs only a BLAS runtime, not a -dev package.
BLAS_PROG_LIBS := -l:libblas.so.3
ifeq ($(WITH_CUDA),1)
ifneq ($(wildcard $(CUDA_HOME)/lib64/libcublas.so),)
$(BUILD)/bench/blas_prog.o: CFLAGS += -DGEMMD_BLAS_CUBLAS=1
BLAS_PROG_LIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas $(CUDA_LDLIBS)
endif
endif

$(BUILD)/gemmbench-blas: $(BUILD)/bench/blas_prog.o $(BUILD)/bench/bench_util.o
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(BLAS_PROG_LIBS) $(LDLIBS)

BIN += $(BUILD)/gemmbench-blas
