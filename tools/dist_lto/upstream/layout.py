"""Where our files live inside the directories upstream's Starlark declares.

Upstream declares, per archive, `X/manifest.json` (its manifest), `X/objects` (a
directory for the members), `X/plan.json`, `X/indexes` and `X/opt_objects`, all in
one directory X. Our own manifest goes inside `X/objects` and the members below it in
`MEMBERS`, so no member name can collide with it; the planner finds it from the
archive plan's path.
"""

import posixpath

MANIFEST = "manifest.json"
"""Our manifest, in the objects directory."""
MEMBERS = "m"
"""The members' directory, in the objects directory."""


def objects_dir_for(archive_plan: str) -> str:
    """The objects directory of the archive whose upstream plan goes to `archive_plan`."""
    return posixpath.join(posixpath.dirname(archive_plan), "objects")


def opt_objects_dir_for(archive_plan: str) -> str:
    """Where upstream's Starlark binds the optimised objects of that archive."""
    return posixpath.join(posixpath.dirname(archive_plan), "opt_objects")


def manifest_for(objects_dir: str) -> str:
    return posixpath.join(objects_dir, MANIFEST)
