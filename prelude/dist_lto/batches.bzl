# Which backends of a link share an opt action (`[dist_lto] opt_batch_bytes`, off by
# default: docs/buck2.md).
#
# Every action has a fixed cost to the build system whatever it runs, which for a small
# module can be as much as its whole backend; small modules of one plan may then share
# one action, which compiles them one after another (`dist-lto opt` with its files
# repeated, docs/opt.md).
#
# A batch is the run of modules whose sizes, summed over the modules before them in plan
# order, fall in the same window of `budget` bytes. An edit that changes one module's
# size moves a module to another batch only where that sum crosses a window's edge, so
# almost every other batch keeps its members and its action is not run again. A module
# of `budget` bytes or more, and the link's largest module (which takes no slot and
# starts at once), stay alone.

# One backend of an opt action: its files, the modules it imports, its size.
OptBackend = record(
    module = Artifact,
    index_file = Artifact,
    # The optimised object and, in `split` mode, its .dwo file: bound outputs.
    out = typing.Any,
    dwo = typing.Any,
    imports = list[Artifact],
    # Bytes of the module, from its plan (`size`).
    size = int,
    # The link's largest module (`largest` in its plan).
    largest = bool,
    # The action's identifier when it runs alone.
    identifier = str,
)

def opt_batches(backends: list[OptBackend], budget: int) -> list[list[OptBackend]]:
    """`backends` (in plan order) in batches of one action each, in order of their first
    member; every backend alone when `budget` is 0."""
    if budget <= 0:
        return [[b] for b in backends]
    batches = []
    windows = {}
    before = 0
    for backend in backends:
        if backend.largest or backend.size >= budget:
            batches.append([backend])
        else:
            window = before // budget
            if window not in windows:
                windows[window] = len(batches)
                batches.append([])
            batches[windows[window]].append(backend)
        before += backend.size
    return batches
