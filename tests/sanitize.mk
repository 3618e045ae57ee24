# tests/sanitize.mk: the daemon's suites against a gemmd built with
# sanitizers (scripts/test-sanitize.sh); not part of `make test`.
#
#   make test-asan       gemmd built with AddressSanitizer, LeakSanitizer and
#                        UBSan in $(BUILD)/asan (about 15 minutes on 2 CPUs)
#   make test-tsan       gemmd built with ThreadSanitizer in $(BUILD)/tsan
#                        (about 15 minutes)
#   make test-sanitize   both
#
# The CPU backend only: the suites are the ordinary build's, and their
# daemons (and the soak program) come from the sanitized build. Any report
# fails the run and is printed.
SAN_SUITES = $(SECOND_PASS_SUITES) $(BUILD)/tests/test_e2e_cpu
SAN_BINS = $(addprefix $(BUILD)/$(1)/,gemmd gemmd-fi gemmctl soak)
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_FLAGS_tsan := -fsanitize=thread

test-asan test-tsan: test-%: deps
	$(Q)$(MAKE) --no-print-directory -s -j$(NPROC) $(SAN_SUITES)
	$(Q)$(MAKE) --no-print-directory -j$(NPROC) BUILD=$(BUILD)/$* WITH_CUDA=0 OPT=-O1 \
		CC="$(CC) $(SAN_FLAGS_$*)" $(call SAN_BINS,$*)
	$(Q)E2E_SECOND_PASS="$(E2E_SECOND_PASS)" scripts/test-sanitize.sh $* $(BUILD)/$* $(SAN_SUITES)

test-sanitize: test-asan test-tsan

.PHONY: test-asan test-tsan test-sanitize
