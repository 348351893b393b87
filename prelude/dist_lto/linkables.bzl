# What a distributed link links: an ordered list of link groups, each a list of
# linkables. Both front ends build these: our own rules (prelude/cxx/, whose providers
# carry them) and `dist_lto_cxx_binary` for repositories on Buck2's upstream prelude
# (upstream/cxx_binary.bzl, which reads them off upstream's link providers). Only
# Buck2 built-ins and files of this directory are loaded here, so that both cells load
# the same phases.

WHOLE_ARCHIVE = "-Wl,--whole-archive"
NO_WHOLE_ARCHIVE = "-Wl,--no-whole-archive"

# A compiled object on the link line.
ObjectLinkable = record(
    object = Artifact,
    # Compiled with -flto=thin (LLVM bitcode). The planner checks: a native object
    # wrongly marked bitcode is passed through, never optimised.
    bitcode = bool,
)

# An archive prepared for distributed ThinLTO (`dist-lto prepare`): its members as
# files, and the manifest listing them (`objects/NAME`, relative to the manifest).
PreparedFiles = record(objects_dir = Artifact, manifest = Artifact)

# An archive on the link line, or objects linked as one (loaded only when needed).
ArchiveLinkable = record(
    # The archive; None for objects the link loads lazily without one (`--start-lib`
    # ... `--end-lib`), which `objects` lists.
    archive = Artifact | None,
    # A thin archive's members, in archive order: the archive only names them, so
    # they are inputs of every action that reads it. Empty for a regular archive.
    members = list[Artifact],
    # May hold bitcode members: distributed ThinLTO prepares and indexes it. False
    # for archives known to be native, which pass through as they are.
    bitcode = bool,
    # Linked with --whole-archive (every member, not only those that resolve symbols).
    whole = bool,
    # The objects the archive was made of, in archive order, when the rule that made it
    # knows them (our own libraries, of either kind): distributed ThinLTO links them as
    # the archive's members and never prepares it. Empty: see `known_objects`.
    objects = field(list[Artifact], []),
    # The archive prepared once by the rule that made it (prepare.bzl's
    # `prepare_library_archive`), shared by every link; None: each link that needs it
    # prepares it.
    prepared = field(PreparedFiles | None, None),
)

# Plain linker arguments (-l flags, say), passed unchanged, in place: strings, or
# artifacts (a native archive).
ArgsLinkable = record(
    args = list[str | Artifact | cmd_args],
)

Linkable = ObjectLinkable | ArchiveLinkable | ArgsLinkable

# One library's contribution to a link.
LinkGroup = record(
    # The library's label: identifies it when the lists of several deps merge.
    owner = str,
    linkables = list[Linkable],
    # Needs the C++ runtime: the link uses clang++.
    cxx = bool,
)

def known_objects(linkable: ArchiveLinkable) -> list[Artifact]:
    """The objects an archive was made of, if known: its `objects`, or a thin archive's
    members. Empty for an archive distributed ThinLTO must prepare to see inside."""
    return linkable.objects or linkable.members

def linkable_args(linkable: Linkable) -> list:
    """What one linkable puts on a plain link line (strings and artifacts)."""
    if isinstance(linkable, ObjectLinkable):
        return [linkable.object]
    if isinstance(linkable, ArchiveLinkable):
        if not linkable.archive:  # objects linked lazily, or all of them when whole
            return list(linkable.objects) if linkable.whole else ["-Wl,--start-lib"] + linkable.objects + ["-Wl,--end-lib"]
        if linkable.whole:
            return [WHOLE_ARCHIVE, linkable.archive, NO_WHOLE_ARCHIVE]
        return [linkable.archive]
    if isinstance(linkable, ArgsLinkable):
        return list(linkable.args)
    fail("not a linkable: {}".format(linkable))
