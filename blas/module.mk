# blas/: libblas.so.3, a drop-in BLAS that sends GEMM and SYR2K to gemmd and
# forwards every other routine to a fallback BLAS (man/gemmd-blas.7), and
# blasbench, which measures where gemmd starts to win.
#
# blas/symbols.list holds every function Debian's reference libblas.so.3
# (libblas3 3.11) exports; blas/own.list the ones blas/blas.c implements.
# Every other gets a generated forwarding stub (blas/gen-stubs.sh).
BLAS_OBJS := $(BUILD)/blas/blas.o $(BUILD)/blas/route.o $(BUILD)/blas/fallback.o \
             $(BUILD)/blas/stubs.o
BLAS_LIB := $(BUILD)/blas/libblas.so.3
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)

$(BUILD)/blas/stubs.S: blas/symbols.list blas/own.list blas/gen-stubs.sh
	@mkdir -p $(dir $@)
	$(Q)blas/gen-stubs.sh asm blas/symbols.list blas/own.list > $@.tmp && mv $@.tmp $@

$(BUILD)/blas/fwd_names.inc: blas/symbols.list blas/own.list blas/gen-stubs.sh
	@mkdir -p $(dir $@)
	$(Q)blas/gen-stubs.sh names blas/symbols.list blas/own.list > $@.tmp && mv $@.tmp $@

$(BUILD)/blas/stubs.o: $(BUILD)/blas/stubs.S blas/stubs.h
	$(call say,AS,$<)
	$(Q)$(CC) -I. -c $< -o $@

$(BUILD)/blas/fallback.o: $(BUILD)/blas/fwd_names.inc
$(BUILD)/blas/fallback.o: CFLAGS += $(if $(MULTIARCH),-DGEMMD_MULTIARCH='"$(MULTIARCH)"')
$(BLAS_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

# Exported: the reference's names, the CBLAS globals, gemmd_blas_*; the
# libgemmd inside stays private.
$(BUILD)/blas/libblas.map: blas/symbols.list blas/module.mk
	@mkdir -p $(dir $@)
	$(Q){ printf '{\n  global:\n'; sed 's/.*/    &;/' blas/symbols.list; \
	  printf '    RowMajorStrg;\n    CBLAS_CallFromC;\n    gemmd_blas_*;\n  local: *;\n};\n'; } > $@

$(BLAS_LIB): $(BLAS_OBJS) $(LIB_OBJS) $(PROTO_OBJS) $(BUILD)/blas/libblas.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,libblas.so.3 -Wl,--version-script=$(BUILD)/blas/libblas.map \
		-Wl,-z,defs -o $@ $(BLAS_OBJS) $(LIB_OBJS) $(PROTO_OBJS) $(PBC_A) $(LDLIBS)

# The benchmark links this libblas.so.3 by its soname, as any BLAS program.
$(BUILD)/blas/blasbench: $(BUILD)/blas/blasbench.o $(BLAS_LIB) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $< -L$(BUILD)/blas -l:libblas.so.3 -Wl,-rpath,'$$ORIGIN' \
		$(BUILD)/libgemmd.a $(PBC_A) $(LDLIBS)

BIN += $(BLAS_LIB) $(BUILD)/blas/blasbench

# Installed beside, not instead of, the system's BLAS: $(LIBDIR)/gemmd is on
# no loader path, so nothing picks this libblas.so.3 up until asked to
# (LD_LIBRARY_PATH, LD_PRELOAD, or the alternative below).
BLAS_INSTALL_PATH := $(LIBDIR)/gemmd/libblas.so.3
INSTALLED_FILES += $(BLAS_INSTALL_PATH) $(MANDIR)/man7/gemmd-blas.7

install: install-blas
install-blas: $(BLAS_LIB)
	$(Q)$(INSTALL) -D -m 0755 $(BLAS_LIB) $(DESTDIR)$(BLAS_INSTALL_PATH)
	$(Q)$(INSTALL) -D -m 0644 man/gemmd-blas.7 $(DESTDIR)$(MANDIR)/man7/gemmd-blas.7

# Makes the installed library the system's libblas.so.3 (Debian's
# alternatives; in auto mode the highest priority wins: the reference BLAS
# has 10, OpenBLAS 100). Run after `make install`, as root.
# tests/test_blas_install.sh runs both with a private --altdir/--admindir
# and link (UPDATE_ALTERNATIVES, BLAS_ALT_LINK) to leave the system alone.
BLAS_ALT_PRIORITY ?= 150
BLAS_ALT_NAME := libblas.so.3-$(MULTIARCH)
BLAS_ALT_LINK ?= /usr/lib/$(MULTIARCH)/libblas.so.3
UPDATE_ALTERNATIVES ?= update-alternatives
install-blas-alternative:
	$(UPDATE_ALTERNATIVES) --install $(BLAS_ALT_LINK) $(BLAS_ALT_NAME) \
		$(BLAS_INSTALL_PATH) $(BLAS_ALT_PRIORITY)

uninstall-blas-alternative:
	$(UPDATE_ALTERNATIVES) --remove $(BLAS_ALT_NAME) $(BLAS_INSTALL_PATH)

.PHONY: install-blas install-blas-alternative uninstall-blas-alternative
