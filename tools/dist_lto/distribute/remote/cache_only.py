"""A remote cache without remote execution (`--remote-cache`, like Bazel's `--remote_cache`).

Jobs compile here; their results are shared through a REAPI service's action cache
and CAS, so a team's machines (and CI) reuse each other's backends without a worker
pool. A job is looked up under its result key (`results.py`), whose identity is the
compiler's contents as the local result cache keys it (`cache_key.command_identity`),
so only the same compiler's results are shared. A result found is checked like any
remote result before it is used; a job compiled here has its outputs uploaded to the
CAS and then its ActionResult filed, so the action cache never names a missing blob.
"""

import os
import socket

from dist_lto.backend import check_primary
from dist_lto.distribute.remote.cas import CorruptBlob, MissingBlob, key
from dist_lto.distribute.remote.connection import RemoteFailed
from dist_lto.distribute.remote.protos import re_pb2
from dist_lto.distribute.remote.results import RemoteResults, key_action, position_names
from dist_lto.formats.jobfile import Job


class RemoteCache(RemoteResults):
    """Looks jobs up in, and files them into, a REAPI action cache; thread-safe."""

    def lookup(self, job: Job) -> tuple[bytes | None, tuple[tuple[str, str], ...]]:
        """Put the job's outputs in place from the service. (the compiler's stderr, or
        None on a miss with nothing written; (result, why) for a damaged result refused)."""
        check_primary(job.module, job.index)
        result_key = self.keys.key(job)
        if result_key is None:
            return None, ()
        digest = key_action(result_key, self.platform)
        action_id = f"{digest.hash}/{digest.size_bytes}"
        result = self.cached(digest, action_id)
        if result is None:
            return None, ()
        try:
            return self.finish(job, result, position_names(job), action_id), ()
        except MissingBlob:
            return None, ()  # evicted from the CAS since: compile it
        except CorruptBlob as err:
            return None, ((f"remote result of {job.output}", err.message),)

    def upload(self, job: Job, stderr: bytes) -> bool:
        """Upload the outputs a local compile left in place, then file their result;
        whether the service took it (a refusal costs reuse, never the job)."""
        result_key = self.keys.key(job)
        if result_key is None:
            return False
        digest = key_action(result_key, self.platform)
        action_id = f"{digest.hash}/{digest.size_bytes}"
        files: dict[tuple[str, int], str] = {}
        result = re_pb2.ActionResult(exit_code=0, stderr_raw=stderr)
        result.execution_metadata.worker = f"{socket.gethostname()} (local)"
        for position, path in enumerate(job.outputs):
            if not os.path.exists(path):
                continue
            blob, executable = self.digests.digest(path)
            files[key(blob)] = path
            result.output_files.add(path=str(position), digest=blob, is_executable=executable)
        try:
            self.store.upload({}, files, action_id=action_id)
        except RemoteFailed:
            return False
        return self.file_result(digest, result, action_id)
