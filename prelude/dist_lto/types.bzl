# What the phases of a distributed ThinLTO link hand to each other.
#
# Objects and archives are numbered by their position in `DistLink.objects` and
# `DistLink.archives`; the meta file carries those numbers to the planner and the
# plans carry them back, which is how a dynamic callback maps a plan to artifacts
# (Starlark never sees an artifact's path).

load("//cxx:providers.bzl", "ArchiveLinkable")

# A bitcode object of the link and the files the phases produce for it.
# Invariant: `index_file`, `plan` are bound by the plan action, `opt` by the
# object's opt dynamic_output (a copy of `object` if the planner finds it native).
BitcodeObject = record(
    object = Artifact,
    index_file = Artifact,
    plan = Artifact,
    opt = Artifact,
)

# An archive that may hold bitcode, prepared into objects for the index step.
# Invariant: `objects_dir` and `manifest` are bound by the prepare action (the
# manifest's member paths are `objects/NAME` for a regular archive; a thin archive's
# point at `linkable.members`); `plan` and `index_dir` by the plan action; `opt_dir`
# (a symlink tree of the optimised members) by the archive's opt dynamic_output.
PreparedArchive = record(
    linkable = ArchiveLinkable,
    objects_dir = Artifact,
    manifest = Artifact,
    plan = Artifact,
    index_dir = Artifact,
    opt_dir = Artifact,
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
    # passed as arguments, thin archives' members.
    static_inputs = list[Artifact],
    # The link's flags for the backends (`dist-lto opt --args`), one per line.
    link_flags_file = Artifact,
    # Files the flags name that every backend reads (a sample profile).
    backend_inputs = list[Artifact],
    # The planner's final-link argument file and link plan.
    final_link_args = Artifact,
    link_plan = Artifact,
)
