# scheduler/: pure C tile enumeration, cost model and plan building.
SCHED_OBJS += $(BUILD)/scheduler/plan.o $(BUILD)/scheduler/cost.o
