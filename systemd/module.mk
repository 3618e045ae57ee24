# systemd/: units, sysusers and tmpfiles snippets (installed by make install).
