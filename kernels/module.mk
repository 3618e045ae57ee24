# kernels/: CPU tile code, and the CUDA kernels when nvcc is present.
KERN_OBJS += $(BUILD)/kernels/cpu_gemm.o

# The CPU kernels' bits are defined with separately rounded multiplies and
# adds (cpu_gemm.h): never let the compiler fuse them.
$(BUILD)/kernels/cpu_gemm.o: CFLAGS += -ffp-contract=off
-include kernels/cuda.mk
