# Execution platforms for Buck2 (see examples/remote.buckconfig and docs/remote.md).
#
# `remote` runs every action on a Remote Execution API engine whose workers advertise
# the same platform properties: the loopback BuildBarn of `.ci/remote-engine`, whose
# workers have LLVM 22 preinstalled at /usr/lib/llvm-22/bin (`toolchain=llvm-22`) and
# run on this machine, so the Python named by `[dist_lto] python` exists there too.
# The opt actions need nothing else: their inputs are the module, its index, its
# imports, the link flags and the dist-lto package itself (docs/buck2.md).

# Keep in step with tests/support/buildbarn_config/common.libsonnet and dist_lto.distribute.remote.settings.
REMOTE_PROPERTIES = {
    "OSFamily": "linux",
    "toolchain": "llvm-22",
}

def _execution_platforms_impl(ctx: AnalysisContext) -> list[Provider]:
    platform = ExecutionPlatformInfo(
        label = ctx.label.raw_target(),
        configuration = ConfigurationInfo(constraints = {}, values = {}),
        executor_config = CommandExecutorConfig(
            local_enabled = ctx.attrs.local_enabled,
            remote_enabled = True,
            use_limited_hybrid = ctx.attrs.local_enabled,
            remote_execution_properties = REMOTE_PROPERTIES,
            remote_execution_use_case = "buck2-default",
            remote_output_paths = "output_paths",
        ),
    )
    return [
        DefaultInfo(),
        ExecutionPlatformRegistrationInfo(platforms = [platform]),
    ]

execution_platforms = rule(
    impl = _execution_platforms_impl,
    attrs = {
        # False: every action runs on the engine's workers. True: Buck2's limited
        # hybrid executor, which may also run an action here.
        "local_enabled": attrs.bool(default = False),
    },
    is_configuration_rule = True,
)

def _local_execution_platform_impl(ctx: AnalysisContext) -> list[Provider]:
    platform = ExecutionPlatformInfo(
        label = ctx.label.raw_target(),
        configuration = ConfigurationInfo(constraints = {}, values = {}),
        executor_config = CommandExecutorConfig(
            local_enabled = True,
            remote_enabled = False,
            use_persistent_workers = True,
        ),
    )
    return [
        DefaultInfo(),
        ExecutionPlatformRegistrationInfo(platforms = [platform]),
    ]

# Local execution with persistent workers, so that opt actions go to the opt worker
# (docs/buck2.md). Buck2's own default executor uses workers; an execution platform
# made with CommandExecutorConfig does not unless it says so, and the upstream prelude's
# `prelude//platforms:default` does not: a project on it selects this one instead
# (examples/upstream/.buckconfig).
local_execution_platform = rule(
    impl = _local_execution_platform_impl,
    attrs = {},
    is_configuration_rule = True,
)
