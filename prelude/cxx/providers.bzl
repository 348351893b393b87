# What C/C++ (and Rust staticlib) targets give the targets that link them.
#
# A link is an ordered list of linkables. Libraries collect their dependencies'
# linkables so that every library comes before the libraries it depends on (what a
# static link needs): each library lists itself, then its dependencies' lists, and
# a merge keeps the last occurrence of each library.

# A compiled object on the link line.
ObjectLinkable = record(
    object = Artifact,
    # Compiled with -flto=thin (LLVM bitcode). The planner checks: a native object
    # wrongly marked bitcode is passed through, never optimised.
    bitcode = bool,
)

# An archive on the link line.
ArchiveLinkable = record(
    archive = Artifact,
    # A thin archive's members, in archive order: the archive only names them, so
    # they are inputs of every action that reads it. Empty for a regular archive.
    members = list[Artifact],
    # May hold bitcode members: distributed ThinLTO prepares and indexes it. False
    # for archives known to be native, which pass through as they are.
    bitcode = bool,
    # Linked with --whole-archive (every member, not only those that resolve symbols).
    whole = bool,
)

# Plain linker arguments (-l flags, say), passed unchanged, in place.
ArgsLinkable = record(
    args = list[str],
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

CxxLinkInfo = provider(
    doc = "The link groups of a library and of everything it depends on, in link order.",
    fields = {"groups": provider_field(list[LinkGroup])},
)

CxxHeadersInfo = provider(
    doc = "Header directories (`-I`) a library exports, its dependencies' included.",
    fields = {"include_dirs": provider_field(list[Artifact])},
)

def label_key(label: Label) -> str:
    return "{}//{}:{}".format(label.cell, label.package, label.name)

def merge_groups(own: list[LinkGroup], deps: list[Dependency]) -> list[LinkGroup]:
    """`own` then every dependency's groups, each library once, after all its users."""
    chain = list(own)
    for dep in deps:
        if CxxLinkInfo in dep:
            chain.extend(dep[CxxLinkInfo].groups)
    last = {}
    for i, group in enumerate(chain):
        last[group.owner] = i
    return [group for i, group in enumerate(chain) if last[group.owner] == i]

def merge_include_dirs(own: list[Artifact], deps: list[Dependency]) -> list[Artifact]:
    dirs = list(own)
    for dep in deps:
        if CxxHeadersInfo in dep:
            for d in dep[CxxHeadersInfo].include_dirs:
                if d not in dirs:
                    dirs.append(d)
    return dirs
