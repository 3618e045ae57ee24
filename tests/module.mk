# tests/: Criterion suites. Each suite has its own tests/NAME.mk that adds
# its binary to TESTS (run by `make test`) or GPU_TESTS (`make test-gpu`).
CRITERION_LIBS := -lcriterion
include $(sort $(filter-out tests/module.mk,$(wildcard tests/*.mk)))
