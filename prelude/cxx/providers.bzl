# What C/C++ (and Rust staticlib) targets give the targets that link them.
#
# A link is an ordered list of linkables. Libraries collect their dependencies'
# linkables so that every library comes before the libraries it depends on (what a
# static link needs): each library lists itself, then its dependencies' lists, and
# a merge keeps the last occurrence of each library.

# The linkables and link groups are the distributed link's own input model
# (prelude/dist_lto/linkables.bzl), shared with dist_lto_cxx_binary.
load(
    "//dist_lto:linkables.bzl",
    _ArchiveLinkable = "ArchiveLinkable",
    _ArgsLinkable = "ArgsLinkable",
    _LinkGroup = "LinkGroup",
    _Linkable = "Linkable",
    _ObjectLinkable = "ObjectLinkable",
)

ObjectLinkable = _ObjectLinkable
ArchiveLinkable = _ArchiveLinkable
ArgsLinkable = _ArgsLinkable
Linkable = _Linkable
LinkGroup = _LinkGroup

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
