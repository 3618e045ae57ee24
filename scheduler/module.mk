# scheduler/: pure C tile enumeration (tiles.h, header-only, shared with the
# kernels), cost model and plan building. scheduler/examples/ holds problem
# files for `gemmctl plan`.
SCHED_OBJS += $(BUILD)/scheduler/plan.o $(BUILD)/scheduler/cost.o
