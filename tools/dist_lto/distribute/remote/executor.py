"""One DTLTO job as a REAPI action, held to the same strictness as a local backend.

For each job: the Command is LLD's command unchanged (`common.args + job.args`, paths
relative to the link's directory, the compiler by the absolute path the job file names,
preinstalled on the workers per the platform properties) with the job's outputs
declared; the input root holds exactly the job's inputs and the job file's common ones.
The action cache is asked first, under the job's result key (`results.py`: any link of
the same code, on any machine) and then under the real action; on a miss the inputs
are uploaded (only the blobs the CAS lacks) and the action is executed. The module must
be its index's primary module (checked before anything is sent); the result is checked
as a local backend's is (`results.py`).
"""

import os
import threading
from dataclasses import dataclass

import grpc

from dist_lto.backend import check_primary, prepare_outputs
from dist_lto.distribute.remote.cas import (
    CorruptBlob,
    MissingBlob,
    build_tree,
    key,
    message_blob,
    relative_parts,
)
from dist_lto.distribute.remote.connection import RemoteFailed
from dist_lto.distribute.remote.protos import code_pb2, error_details_pb2, re_pb2
from dist_lto.distribute.remote.results import RemoteResults, key_action, position_names
from dist_lto.distribute.remote.settings import RemoteSettings
from dist_lto.distribute.reporting import Status
from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.fsutil import remove_output

EXECUTE_TIMEOUT = 3600.0
"""Seconds one Execute call may wait for its action (queueing included): not the
per-call deadline (`--remote-timeout`), which an action that queues or runs longer
would exceed, as in Bazel; with `--remote-action-timeout`, that much longer."""

EXECUTED = Status.REMOTE_EXECUTED
REMOTE_CACHED = Status.REMOTE_CACHED


@dataclass(frozen=True)
class RemoteOutcome:
    """What happened to one job: `how` (EXECUTED or REMOTE_CACHED), the worker that ran
    it (from the ActionResult's execution metadata), the compiler's stderr."""

    how: Status
    worker: str
    stderr: bytes
    action: str
    """The action digest, `hash/size`."""
    damage: tuple[tuple[str, str], ...] = ()
    """(result, why) for each result refused on the way for a blob that failed its
    digest: the job ran again instead."""


class RemoteExecutor(RemoteResults):
    """Runs jobs of one job file on a REAPI engine; safe to call from many threads."""

    def __init__(self, files: JobFile, settings: RemoteSettings) -> None:
        identity = "\0".join(
            ["remote", files.compiler, *(f"{n}={v}" for n, v in settings.platform)]
        )
        super().__init__(files, settings, identity)
        self._lock = threading.Lock()
        self._calls: set[grpc.Future] = set()
        self._stopping = False

    def stop(self) -> None:
        """Cancel every Execute in flight (a job failed, or we were signalled)."""
        with self._lock:
            self._stopping = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    # One job ----------------------------------------------------------------------------

    def run(self, job: Job) -> RemoteOutcome:
        check_primary(job.module, job.index)
        outputs = [relative_parts(path, "output") for path in job.outputs]
        for path, parts in zip(job.outputs, outputs, strict=True):
            if parts[:1] == [".."] or not parts:
                raise BadInput(
                    f"{path}: output is outside the link's directory; remote execution"
                    " needs outputs below it"
                )
        prepare_outputs(job.output, None)  # a failure now must not leave an old one
        for extra in job.outputs[1:]:
            remove_output(extra)
        inputs = list(dict.fromkeys([*self.files.inputs, *job.inputs]))
        tree = build_tree(inputs, self.digests)
        output_paths = sorted("/".join(parts) for parts in outputs)
        command = re_pb2.Command(
            arguments=self.files.command(job),
            output_paths=output_paths,
            working_directory=tree.working_directory,
            platform=self.platform,
        )
        command_digest, command_data = message_blob(command)
        action = re_pb2.Action(
            command_digest=command_digest,
            input_root_digest=tree.root,
            platform=self.platform,
        )
        if self.settings.action_timeout:
            action.timeout.FromNanoseconds(int(self.settings.action_timeout * 1e9))
        action_digest, action_data = message_blob(action)
        action_id = f"{action_digest.hash}/{action_digest.size_bytes}"
        blobs = {**tree.blobs, key(command_digest): command_data, key(action_digest): action_data}

        real_names = {os.path.normpath(path): path for path in job.outputs}
        result_key = self.keys.key(job)
        key_digest = key_action(result_key, self.platform) if result_key else None
        damage: list[tuple[str, str]] = []
        for digest, names in ((key_digest, position_names(job)), (action_digest, real_names)):
            result = self.cached(digest, action_id) if digest is not None else None
            if result is None:
                continue
            try:
                stderr = self.finish(job, result, names, action_id)
            except MissingBlob:
                continue  # evicted from the CAS since: run it again
            except CorruptBlob as err:
                damage.append((f"remote result of {job.output}", err.message))
                continue
            if digest is action_digest and key_digest is not None:
                self.file_under_key(key_digest, result, job, action_id)
            worker = result.execution_metadata.worker
            return RemoteOutcome(REMOTE_CACHED, worker, stderr, action_id, tuple(damage))
        self.store.upload(blobs, tree.files, action_id=action_id)
        # After a corrupt cached result, the engine's own cache lookup would return it again.
        fresh = bool(damage)
        result, cached = self._execute(action_digest, action_id, blobs, tree.files, fresh)
        try:
            stderr = self.finish(job, result, real_names, action_id)
        except CorruptBlob as err:
            if fresh:
                raise
            damage.append((f"remote result of {job.output}", err.message))
            result, cached = self._execute(action_digest, action_id, blobs, tree.files, True)
            stderr = self.finish(job, result, real_names, action_id)
        if key_digest is not None:
            self.file_under_key(key_digest, result, job, action_id)
        how = REMOTE_CACHED if cached else EXECUTED
        return RemoteOutcome(
            how, result.execution_metadata.worker, stderr, action_id, tuple(damage)
        )

    def _execute(
        self,
        digest: "re_pb2.Digest",
        action_id: str,
        blobs: dict[tuple[str, int], bytes],
        files: dict[tuple[str, int], str],
        fresh: bool = False,
    ) -> tuple["re_pb2.ActionResult", bool]:
        """Execute the action until it completes; missing inputs are sent again, transient
        failures (a worker lost mid-action, the engine restarting) retried, both bounded.
        `fresh` asks the engine to run it even when its action cache holds a result."""
        request = re_pb2.ExecuteRequest(
            instance_name=self.connection.instance, action_digest=digest,
            skip_cache_lookup=fresh,
        )  # fmt: skip
        attempts = self.settings.attempts
        last = ""
        for _attempt in range(attempts):
            response = self.connection.call("Execute", lambda: self._wait(request, action_id))
            status = response.status
            if status.code == code_pb2.OK:
                return response.result, response.cached_result
            last = f"{code_pb2.Code.Name(status.code)}: {status.message}"
            if status.code == code_pb2.FAILED_PRECONDITION and _missing(status):
                self.store.upload(blobs, files, force=True, action_id=action_id)
                continue
            if status.code == code_pb2.DEADLINE_EXCEEDED and self._timed_out(response):
                raise RemoteFailed(
                    f"{self.settings.address}: action {action_id} ran longer than its"
                    f" timeout ({self.settings.action_timeout:g} s, --remote-action-timeout):"
                    f" {last}"
                )
            if status.code in _TRANSIENT_CODES:
                continue
            raise RemoteFailed(f"{self.settings.address}: Execute of action {action_id}: {last}")
        raise RemoteFailed(
            f"{self.settings.address}: Execute of action {action_id}: {last}"
            f" (after {attempts} attempts)"
        )

    def _timed_out(self, response: "re_pb2.ExecuteResponse") -> bool:
        """Whether a DEADLINE_EXCEEDED is the action's own timeout (a worker ran it that
        long) rather than a lost worker's, which is worth another try."""
        if not self.settings.action_timeout:
            return False
        meta = response.result.execution_metadata
        if not meta.HasField("execution_start_timestamp"):
            return False
        ran = meta.execution_completed_timestamp.ToNanoseconds() - (
            meta.execution_start_timestamp.ToNanoseconds()
        )
        return ran >= self.settings.action_timeout * 1e9

    def _wait(self, request: "re_pb2.ExecuteRequest", action_id: str) -> "re_pb2.ExecuteResponse":
        """One Execute call: follow its operation stream until the operation is done."""
        with self._lock:
            if self._stopping:
                raise RemoteFailed(f"{self.settings.address}: stopped")
            call = self.connection.execution.Execute(
                request,
                metadata=self.connection.metadata(action_id),
                timeout=EXECUTE_TIMEOUT + self.settings.action_timeout,
            )
            self._calls.add(call)
        try:
            for operation in call:
                if not operation.done:
                    continue
                if operation.HasField("error"):
                    return re_pb2.ExecuteResponse(status=operation.error)
                response = re_pb2.ExecuteResponse()
                if not operation.response.Unpack(response):
                    raise RemoteFailed(
                        f"{self.settings.address}: Execute: the operation's response is a"
                        f" {operation.response.type_url}, not an ExecuteResponse"
                    )
                return response
        finally:
            with self._lock:
                self._calls.discard(call)
        raise RemoteFailed(
            f"{self.settings.address}: Execute of action {action_id}: the engine closed the"
            " stream before the action completed"
        )


_TRANSIENT_CODES = frozenset({
    code_pb2.UNAVAILABLE, code_pb2.ABORTED, code_pb2.RESOURCE_EXHAUSTED,
    code_pb2.DEADLINE_EXCEEDED, code_pb2.INTERNAL,
})  # fmt: skip
"""ExecuteResponse statuses worth another Execute: BuildBarn reports an action whose
worker vanished as one of these."""


def _missing(status: "re_pb2.google_dot_rpc_dot_status__pb2.Status") -> bool:  # type: ignore[name-defined]
    """Whether a FAILED_PRECONDITION lists missing blobs (REAPI's PreconditionFailure)."""
    for detail in status.details:
        failure = error_details_pb2.PreconditionFailure()
        if detail.Unpack(failure) and any(v.type == "MISSING" for v in failure.violations):
            return True
    return False
