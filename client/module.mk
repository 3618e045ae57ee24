# client/: libgemmd (static and shared), gemmctl, the pkg-config file.
LIB_OBJS += $(BUILD)/client/client.o $(BUILD)/client/cuda_ipc.o
CTL_OBJS += $(BUILD)/client/gemmctl.o $(BUILD)/client/npy.o $(BUILD)/client/gemmctl_plan.o \
            $(BUILD)/client/gemmctl_top.o

$(LIB_OBJS) $(CTL_OBJS): | $(BUILD)/proto/gemmd.pb-c.h

$(BUILD)/libgemmd.a: $(LIB_OBJS) $(PROTO_OBJS)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# The shared library carries protobuf-c inside it (static archive, -fPIC)
# and exports only the public gemmd_ names, so it cannot clash with an
# application's own protobuf-c.
$(BUILD)/client/libgemmd.map: client/module.mk
	@mkdir -p $(dir $@)
	$(Q)printf '{\n  global: gemmd_[a-z]*;\n  local: *;\n};\n' > $@

$(BUILD)/libgemmd.so: $(LIB_OBJS) $(PROTO_OBJS) $(BUILD)/client/libgemmd.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,libgemmd.so.$(SOVERSION) \
		-Wl,--version-script=$(BUILD)/client/libgemmd.map \
		-o $@ $(LIB_OBJS) $(PROTO_OBJS) $(PBC_A) $(LDLIBS)

$(BUILD)/gemmctl: $(CTL_OBJS) $(SCHED_OBJS) $(BUILD)/libgemmd.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $(CTL_OBJS) $(SCHED_OBJS) $(BUILD)/libgemmd.a $(PBC_A) $(LDLIBS)

$(BUILD)/gemmd.pc: client/gemmd.pc.in
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

BIN += $(BUILD)/libgemmd.a $(BUILD)/libgemmd.so $(BUILD)/gemmctl $(BUILD)/gemmd.pc
