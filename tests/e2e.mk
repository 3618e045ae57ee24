# tests/e2e.mk: the end-to-end suites, which run the real build/gemmd (and
# build/gemmctl) on temporary sockets, and build/demo_client, the example
# client that `make demo` runs.
E2E_SUITES := $(addprefix $(BUILD)/tests/,test_e2e test_e2e_proto test_e2e_clients test_e2e_batcher)
E2E_UTIL := $(BUILD)/tests/e2e_util.o
# The suites also take hard_util's raw frames (tests/hardening.mk builds it).
E2E_LINK := $(E2E_UTIL) $(BUILD)/tests/hard_util.o

$(E2E_SUITES:=.o) $(E2E_LINK) $(BUILD)/tests/demo_client.o: | $(BUILD)/proto/gemmd.pb-c.h

# The suites exec build/gemmd and build/gemmctl, so those come first.
$(E2E_SUITES): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(E2E_LINK) $(BUILD)/libgemmd.a \
               | $(BUILD)/gemmd $(BUILD)/gemmctl
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< $(E2E_LINK) $(BUILD)/libgemmd.a $(PBC_A) $(CRITERION_LIBS) -lm -lpthread

$(BUILD)/demo_client: $(BUILD)/tests/demo_client.o $(E2E_UTIL) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(PBC_A) -lm -lpthread

TESTS += $(E2E_SUITES)
BIN += $(BUILD)/demo_client
