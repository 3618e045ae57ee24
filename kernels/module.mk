# kernels/: CPU tile code, and the CUDA kernels when nvcc is present.
KERN_OBJS += $(BUILD)/kernels/cpu_gemm.o
