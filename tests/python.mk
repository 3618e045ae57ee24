# tests/python.mk: the Python client (python/gemmd) and the metrics endpoint,
# tested with unittest against the real build/gemmd (tests/run-python.sh).
TESTS += tests/run-python.sh

tests/run-python.sh: | $(BUILD)/gemmd $(BUILD)/libgemmd.so
