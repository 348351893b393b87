# What the phases of a distributed ThinLTO link hand to each other.
#
# Objects and archives are numbered by their position in `DistLink.objects` and
# `DistLink.archives`; the meta file carries those numbers to the planner and the
# plans carry them back, which is how a dynamic callback maps a plan to artifacts
# (Starlark never sees an artifact's path).

load(":linkables.bzl", "ArchiveLinkable")

# Where each backend puts the debug information of a module compiled with
# -gsplit-dwarf (`dist-lto opt --split-dwarf`, docs/opt.md):
SPLIT_DWARF_MODES = [
    "none",  # no split DWARF: the backends get no split-DWARF option
    "single",  # kept in the optimised object, whose skeleton unit names that object
    "split",  # one .dwo file per module beside its optimised object
]

# A bitcode object of the link and the files the phases produce for it.
# Invariant: `index_file`, `plan` are bound by the plan action, `opt` by the
# object's opt dynamic_output (a copy of `object` if the planner finds it native);
# `dwo` exists exactly when the link's split DWARF mode is `split`, bound with `opt`
# (empty for a native object).
BitcodeObject = record(
    object = Artifact,
    index_file = Artifact,
    plan = Artifact,
    opt = Artifact,
    dwo = Artifact | None,
)

# An archive that may hold bitcode, as the index step sees it: the objects it was made
# of where the rules know them (`known_objects`), else prepared into objects.
# Invariant: `objects_dir` and `manifest` are None for known objects, else bound by
# the prepare action (the manifest's member paths are `objects/NAME`); `plan` and
# `index_dir` by the plan action; `opt_dir` (a symlink tree of the optimised members)
# and, in `split` mode, `dwo_dir` (their .dwo files) by the archive's opt
# dynamic_output.
PreparedArchive = record(
    linkable = ArchiveLinkable,
    objects_dir = Artifact | None,
    manifest = Artifact | None,
    plan = Artifact,
    index_dir = Artifact,
    opt_dir = Artifact,
    dwo_dir = Artifact | None,
)

# Everything the dynamic phases need, frozen once analysis ends.
DistLink = record(
    # The link's name, unique within its target: every output it declares lies under
    # `dist_lto/<name>/` and every action identifier starts with `<name>/`, so one
    # target (or one package) may hold several distributed links.
    name = str,
    objects = list[BitcodeObject],
    archives = list[PreparedArchive],
    # Files the link reads that no plan mentions: native objects and archives
    # passed as arguments (or cmd_args naming them), thin archives' members.
    static_inputs = list[Artifact | cmd_args],
    # The link's flags for the backends (`dist-lto opt --args`), one per line.
    link_flags_file = Artifact,
    # Files the flags name that every backend reads (a sample profile).
    backend_inputs = list[Artifact],
    # One of SPLIT_DWARF_MODES.
    split_dwarf = str,
    # The planner's final-link argument file and link plan.
    final_link_args = Artifact,
    link_plan = Artifact,
)

# What a distributed link gives the rule that asked for it.
LinkedBinary = record(
    binary = Artifact,
    # The .dwo files the binary's skeleton units name (`split` mode; else empty): the
    # rule makes them outputs so that a debugger finds them.
    debug_files = list[Artifact],
)
