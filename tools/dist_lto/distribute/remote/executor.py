"""One DTLTO job as a REAPI action, held to the same strictness as a local backend.

For each job: the Command is LLD's command unchanged (`common.args + job.args`, paths
relative to the link's directory, the compiler by the absolute path the job file names,
preinstalled on the workers per the platform properties) with the job's outputs
declared; the input root holds exactly the job's inputs and the job file's common ones.
The action cache is asked first, so a result computed by any machine is reused; on a
miss the inputs are uploaded (only the blobs the CAS lacks) and the action is executed.

LLD names a job's index and object after its process id, and archive members after it
too (inside the indexes), so the same backend is a different action in every link. So
each result is also filed in the action cache under a *result key*: a stand-in action
whose command names the job's spelling-free key (`result_cache.KeyMaker`: arguments
with paths as placeholders, input contents, indexes without module paths) and the
platform, whose compiler it promises. Any link of the same code, on any machine, finds
its backends there first; outputs are listed by position (`0`, `1`, ...).
Then, as for a local backend (`dist_lto.backend`): the module must be its index's
primary module (checked before anything is sent), the compiler's status passes through,
an exit 0 without a complete ELF object fails, and outputs are written under temporary
names and renamed only after the checks, so nothing partial is ever left at an output.
"""

import contextlib
import os
import threading
from dataclasses import dataclass

import grpc

from dist_lto.backend import (
    BackendFailed,
    check_primary,
    describe_status,
    object_problem,
    prepare_outputs,
)
from dist_lto.distribute.remote.cas import (
    CorruptBlob,
    FileDigests,
    MissingBlob,
    Store,
    build_tree,
    check_blob,
    key,
    message_blob,
    relative_parts,
)
from dist_lto.distribute.remote.connection import Connection, RemoteFailed
from dist_lto.distribute.remote.protos import code_pb2, error_details_pb2, re_pb2
from dist_lto.distribute.remote.settings import RemoteSettings
from dist_lto.distribute.reporting import Status
from dist_lto.errors import EXIT_INTERNAL, BadInput
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.fsutil import remove_quietly, temp_path_for

EXECUTE_TIMEOUT = 3600.0
"""Seconds one Execute call may wait for its action (queueing included)."""

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


class RemoteExecutor:
    """Runs jobs of one job file on a REAPI engine; safe to call from many threads."""

    def __init__(self, files: JobFile, settings: RemoteSettings) -> None:
        from dist_lto.distribute.result_cache import KeyMaker

        self.files = files
        self.settings = settings
        identity = "\0".join(
            ["remote", files.compiler, *(f"{n}={v}" for n, v in settings.platform)]
        )
        self.keys = KeyMaker(files, identity)
        self.connection = Connection(settings)
        capabilities = self.connection.server_capabilities()
        limit = capabilities.cache_capabilities.max_batch_total_size_bytes
        self.store = Store(self.connection, limit)
        self.digests = FileDigests()
        self.platform = re_pb2.Platform(
            properties=[re_pb2.Platform.Property(name=n, value=v) for n, v in settings.platform]
        )
        self._lock = threading.Lock()
        self._calls: set[grpc.Future] = set()
        self._stopping = False

    def close(self) -> None:
        self.connection.close()

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
            remove_quietly(extra)
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
        action_digest, action_data = message_blob(action)
        action_id = f"{action_digest.hash}/{action_digest.size_bytes}"
        blobs = {**tree.blobs, key(command_digest): command_data, key(action_digest): action_data}

        real_names = {os.path.normpath(path): path for path in job.outputs}
        result_key = self.keys.key(job)
        key_digest = _key_action(result_key, self.platform) if result_key else None
        damage: list[tuple[str, str]] = []
        for digest, names in ((key_digest, _position_names(job)), (action_digest, real_names)):
            result = self._cached(digest, action_id) if digest is not None else None
            if result is None:
                continue
            try:
                stderr = self._finish(job, result, names, action_id)
            except MissingBlob:
                continue  # evicted from the CAS since: run it again
            except CorruptBlob as err:
                damage.append((f"remote result of {job.output}", err.message))
                continue
            if digest is action_digest and key_digest is not None:
                self._file_under_key(key_digest, result, job, action_id)
            worker = result.execution_metadata.worker
            return RemoteOutcome(REMOTE_CACHED, worker, stderr, action_id, tuple(damage))
        self.store.upload(blobs, tree.files, action_id=action_id)
        # After a corrupt cached result, the engine's own cache lookup would return it again.
        fresh = bool(damage)
        result, cached = self._execute(action_digest, action_id, blobs, tree.files, fresh)
        try:
            stderr = self._finish(job, result, real_names, action_id)
        except CorruptBlob as err:
            if fresh:
                raise
            damage.append((f"remote result of {job.output}", err.message))
            result, cached = self._execute(action_digest, action_id, blobs, tree.files, True)
            stderr = self._finish(job, result, real_names, action_id)
        if key_digest is not None:
            self._file_under_key(key_digest, result, job, action_id)
        how = REMOTE_CACHED if cached else EXECUTED
        return RemoteOutcome(
            how, result.execution_metadata.worker, stderr, action_id, tuple(damage)
        )

    def _file_under_key(
        self, digest: "re_pb2.Digest", result: "re_pb2.ActionResult", job: Job, action_id: str
    ) -> None:
        """File a checked result under the job's result key, outputs named by position.
        An engine that refuses costs only reuse across links: never fail the job for it."""
        keyed = re_pb2.ActionResult()
        keyed.CopyFrom(result)
        del keyed.output_files[:]
        position = {os.path.normpath(path): str(i) for i, path in enumerate(job.outputs)}
        for entry in result.output_files:
            name = position.get(os.path.normpath(entry.path))
            if name is not None:
                keyed.output_files.add(
                    path=name, digest=entry.digest, is_executable=entry.is_executable
                )
        request = re_pb2.UpdateActionResultRequest(
            instance_name=self.connection.instance, action_digest=digest, action_result=keyed
        )
        with contextlib.suppress(RemoteFailed):
            self.connection.call(
                "UpdateActionResult",
                lambda: self.connection.ac.UpdateActionResult(
                    request, metadata=self.connection.metadata(action_id), timeout=60
                ),
            )

    def _cached(self, digest: "re_pb2.Digest", action_id: str) -> "re_pb2.ActionResult | None":
        request = re_pb2.GetActionResultRequest(
            instance_name=self.connection.instance, action_digest=digest, inline_stderr=True,
        )  # fmt: skip

        def get() -> "re_pb2.ActionResult | None":
            try:
                return self.connection.ac.GetActionResult(
                    request, metadata=self.connection.metadata(action_id), timeout=60
                )
            except grpc.RpcError as err:
                if err.code() is grpc.StatusCode.NOT_FOUND:
                    return None
                raise

        result = self.connection.call("GetActionResult", get)
        if result is not None and result.exit_code != 0:
            return None  # never reuse a failure
        return result

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
            if status.code in _TRANSIENT_CODES:
                continue
            raise RemoteFailed(f"{self.settings.address}: Execute of action {action_id}: {last}")
        raise RemoteFailed(
            f"{self.settings.address}: Execute of action {action_id}: {last}"
            f" (after {attempts} attempts)"
        )

    def _wait(self, request: "re_pb2.ExecuteRequest", action_id: str) -> "re_pb2.ExecuteResponse":
        """One Execute call: follow its operation stream until the operation is done."""
        with self._lock:
            if self._stopping:
                raise RemoteFailed(f"{self.settings.address}: stopped")
            call = self.connection.execution.Execute(
                request, metadata=self.connection.metadata(action_id), timeout=EXECUTE_TIMEOUT
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

    # Results ----------------------------------------------------------------------------

    def _finish(
        self, job: Job, result: "re_pb2.ActionResult", names: dict[str, str], action_id: str
    ) -> bytes:
        """Check `result` like a local backend's run and put its outputs in place;
        `names` maps the result's output paths to the job's."""
        stderr = result.stderr_raw
        if not stderr and result.HasField("stderr_digest") and result.stderr_digest.size_bytes:
            stderr = self.store.fetch([result.stderr_digest], action_id)[key(result.stderr_digest)]
        worker = result.execution_metadata.worker or "an unnamed worker"
        compiler = self.files.compiler
        if result.exit_code != 0:
            raise BackendFailed(
                f"{job.module}: {compiler} {describe_status(result.exit_code)} on {worker}",
                status=result.exit_code, detail=stderr.decode(errors="replace"),
            )  # fmt: skip
        by_path = {names[f.path]: f for f in result.output_files if f.path in names}
        produced = []
        for path in job.outputs:
            entry = by_path.get(path)
            if entry is not None:
                produced.append((path, entry))
            elif path == job.output:
                raise BackendFailed(
                    f"{job.module}: {compiler} exited 0 on {worker} but its output is missing",
                    status=EXIT_INTERNAL, detail=stderr.decode(errors="replace"),
                )  # fmt: skip
        needed = [e.digest for _, e in produced if not e.contents and e.digest.size_bytes]
        data = self.store.fetch(needed, action_id) if needed else {}  # checked there
        for _, entry in produced:
            if entry.contents:  # inlined by the engine: checked here
                check_blob(self.settings.address, entry.digest, entry.contents)
        temps: list[tuple[str, str]] = []
        try:
            for path, entry in produced:
                directory = os.path.dirname(path)
                if directory and not os.path.isdir(directory):
                    raise BadInput(f"{path}: its directory does not exist")
                tmp = temp_path_for(path)
                temps.append((tmp, path))
                with open(tmp, "wb") as f:
                    f.write(entry.contents or data.get(key(entry.digest), b""))
                if entry.is_executable:
                    os.chmod(tmp, 0o755)
            problem = object_problem(temps[0][0])
            if problem:
                raise BackendFailed(
                    f"{job.module}: {compiler} exited 0 on {worker} but its output {problem}",
                    status=EXIT_INTERNAL, detail=stderr.decode(errors="replace"),
                )  # fmt: skip
            for tmp, path in temps[1:]:
                os.replace(tmp, path)
            os.replace(*temps[0])  # the object last: it is what says the job is done
        except BaseException:
            for tmp, _ in temps:
                remove_quietly(tmp)
            raise
        return stderr


KEY_SALT = b"dist-lto backend result key 1"
"""Salt of result-key actions: they are never executed, only looked up and filed."""


def _key_action(result_key: str, platform: "re_pb2.Platform") -> "re_pb2.Digest":
    command = re_pb2.Command(arguments=["dist-lto-result-key", result_key], platform=platform)
    empty_root, _ = message_blob(re_pb2.Directory())
    action = re_pb2.Action(
        command_digest=message_blob(command)[0],
        input_root_digest=empty_root,
        platform=platform,
        salt=KEY_SALT,
    )
    return message_blob(action)[0]


def _position_names(job: Job) -> dict[str, str]:
    return {str(i): path for i, path in enumerate(job.outputs)}


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
