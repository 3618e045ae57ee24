# deploy/: the Debian package, the OCI image (Dockerfile,
# scripts/build-image.sh), the Kubernetes DaemonSet and the systemd drop-in
# for metrics over TCP.
#
#   make deb    build/deb/gemmd_VERSION_ARCH.deb: what `make install PREFIX=/usr`
#               installs, with maintainer scripts (deploy/deb/) that create the
#               user and /run/gemmd and enable gemmd.socket
DEB_STAGE := $(BUILD)/deb/root

deb: bins
	$(call say,DEB,$(BUILD)/deb)
	$(Q)rm -rf $(DEB_STAGE)
	$(Q)$(MAKE) --no-print-directory install PREFIX=/usr DESTDIR=$(abspath $(DEB_STAGE))
	$(Q)scripts/build-deb.sh $(DEB_STAGE) $(VERSION) $(BUILD)/deb

.PHONY: deb
