# systemd/: units, sysusers and tmpfiles snippets, and the install rules of
# everything gemmd puts on a system.
#
#   make install   [PREFIX=/usr/local] [DESTDIR=]   build, then install
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]   remove exactly what install put
#
# Every directory follows PREFIX and can be overridden on its own (the
# pkg-config file assumes LIBDIR and INCLUDEDIR under PREFIX). systemd looks
# for units, sysusers and tmpfiles snippets under /usr/local/lib as well as
# /usr/lib, so the default PREFIX works; packagers use PREFIX=/usr. The
# units are written with @BINDIR@ replaced by SBINDIR, where gemmd goes.
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
MANDIR ?= $(PREFIX)/share/man
INSTALL ?= install
# Run after a real install as root, so the new soname is found at once.
LDCONFIG ?= ldconfig

LIB_REAL := libgemmd.so.$(SOVERSION).0.0
LIB_SONAME := libgemmd.so.$(SOVERSION)
# Written by another part of the tree; installed when present.
MAN8 := $(wildcard man/gemmd.8)
MAN1 := $(wildcard man/gemmctl.1)

# Everything install creates, for uninstall (the directories stay).
INSTALLED_FILES := $(SBINDIR)/gemmd $(BINDIR)/gemmctl $(LIBDIR)/$(LIB_REAL) \
        $(LIBDIR)/$(LIB_SONAME) $(LIBDIR)/libgemmd.so $(LIBDIR)/libgemmd.a \
        $(INCLUDEDIR)/gemmd.h $(PKGCONFIGDIR)/gemmd.pc $(UNITDIR)/gemmd.service \
        $(UNITDIR)/gemmd.socket $(SYSUSERSDIR)/gemmd.conf $(TMPFILESDIR)/gemmd.conf \
        $(MANDIR)/man8/gemmd.8 $(MANDIR)/man1/gemmctl.1

install: bins
	$(call say,INSTALL,$(DESTDIR)$(PREFIX))
	$(Q)$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR)
	$(Q)$(INSTALL) -m 0755 $(BUILD)/gemmd $(DESTDIR)$(SBINDIR)/gemmd
	$(Q)$(INSTALL) -m 0755 $(BUILD)/gemmctl $(DESTDIR)$(BINDIR)/gemmctl
	$(Q)$(INSTALL) -m 0755 $(BUILD)/libgemmd.so $(DESTDIR)$(LIBDIR)/$(LIB_REAL)
	$(Q)ln -sfn $(LIB_REAL) $(DESTDIR)$(LIBDIR)/$(LIB_SONAME)
	$(Q)ln -sfn $(LIB_SONAME) $(DESTDIR)$(LIBDIR)/libgemmd.so
	$(Q)$(INSTALL) -m 0644 $(BUILD)/libgemmd.a $(DESTDIR)$(LIBDIR)/libgemmd.a
	$(Q)$(INSTALL) -m 0644 include/gemmd.h $(DESTDIR)$(INCLUDEDIR)/gemmd.h
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' client/gemmd.pc.in \
		> $(DESTDIR)$(PKGCONFIGDIR)/gemmd.pc && chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/gemmd.pc
	$(Q)for u in gemmd.service gemmd.socket; do \
		sed -e 's|@BINDIR@|$(SBINDIR)|g' systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	$(Q)$(INSTALL) -m 0644 systemd/gemmd.sysusers $(DESTDIR)$(SYSUSERSDIR)/gemmd.conf
	$(Q)$(INSTALL) -m 0644 systemd/gemmd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/gemmd.conf
	$(Q)$(if $(MAN8),$(INSTALL) -D -m 0644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/gemmd.8,:)
	$(Q)$(if $(MAN1),$(INSTALL) -D -m 0644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/gemmctl.1,:)
	$(Q)if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v $(LDCONFIG) >/dev/null; then \
		$(LDCONFIG) || true; fi

uninstall:
	$(call say,RM,$(DESTDIR)$(PREFIX))
	$(Q)rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
