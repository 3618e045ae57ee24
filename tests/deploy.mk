# tests/deploy.mk: light checks of deploy/ (the DaemonSet, make deb, the
# metrics drop-in, the image's user); see tests/test_deploy.sh.
TESTS += tests/test_deploy.sh

tests/test_deploy.sh: | $(BUILD)/gemmd $(BUILD)/gemmctl $(BUILD)/libgemmd.so
