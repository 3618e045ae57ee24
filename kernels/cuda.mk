# kernels/cuda.mk: the CUDA grouped GEMM/SYR2K kernels (kernels/cuda_gemm.h).
ifeq ($(WITH_CUDA),1)
CUDA_OBJS += $(BUILD)/kernels/grouped_gemm.o
endif
