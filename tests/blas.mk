# tests/blas.mk: gemmd's libblas.so.3 (blas/): test_blas (its own unit
# tests, Criterion), and two scripts that run others' tests through it
# against a CPU-backend gemmd: the reference BLAS testers of Debian's
# libblas-test (tests/test_blas_reference.sh) and NumPy's matrix product
# tests (tests/test_blas_numpy.sh); and its install as the system's BLAS
# through Debian's alternatives, in a private database
# (tests/test_blas_install.sh). The scripts start their daemon and read its
# op counts through tests/blas_daemon.sh.
BLAS_TEST := $(BUILD)/tests/test_blas
BLAS_TEST_LINK := $(BUILD)/tests/e2e_util.o $(BUILD)/tests/hard_util.o

$(BLAS_TEST).o: | $(BUILD)/proto/gemmd.pb-c.h
$(BLAS_TEST).o: CFLAGS += $(if $(MULTIARCH),-DREFERENCE_BLAS='"/usr/lib/$(MULTIARCH)/blas/libblas.so.3"')

# -rdynamic: the suite's own xerbla_ and cblas_xerbla must be the ones the
# library's calls find, as a program's are.
$(BLAS_TEST): $(BLAS_TEST).o $(BLAS_TEST_LINK) $(BUILD)/libgemmd.a $(BLAS_LIB) | $(BUILD)/gemmd
	$(call say,LD,$@)
	$(Q)$(CC) -rdynamic -o $@ $< $(BLAS_TEST_LINK) $(BUILD)/libgemmd.a $(PBC_A) \
		-L$(BUILD)/blas -l:libblas.so.3 -Wl,-rpath,'$$ORIGIN/../blas' $(CRITERION_LIBS) -lm -lpthread

TESTS += $(BLAS_TEST) tests/test_blas_reference.sh tests/test_blas_numpy.sh tests/test_blas_install.sh
tests/test_blas_reference.sh tests/test_blas_numpy.sh tests/test_blas_install.sh: | $(BLAS_LIB) $(BUILD)/gemmd \
	$(BUILD)/gemmctl
