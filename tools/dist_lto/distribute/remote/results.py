"""What remote execution and a remote cache share: the service's action cache and CAS.

A result is looked up by an action digest, checked exactly as a local backend's run is
(`dist_lto.backend`: the compiler's status passes through, an exit 0 without a complete
ELF object fails, every blob is checked against its digest) and only then renamed into
place, the object last, so nothing partial is ever left at an output. Results are also
filed under a *result key*: a stand-in action, never executed, whose command names the
job's spelling-free key (`cache_key.KeyMaker`) and the platform; its outputs are
named by position (`0`, `1`, ...), since LLD names the real ones after its process id.
"""

import os

import grpc

from dist_lto.backend import BackendFailed, object_problem
from dist_lto.distribute.remote.cas import FileDigests, Store, check_blob, key, message_blob
from dist_lto.distribute.remote.connection import Connection, RemoteFailed
from dist_lto.distribute.remote.protos import re_pb2
from dist_lto.distribute.remote.settings import RemoteSettings
from dist_lto.errors import EXIT_INTERNAL, BadInput
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.fsutil import install, remove_quietly, scratch_path_for
from dist_lto.process.children import describe_status


class RemoteResults:
    """A connection to the service, its CAS, and the checks every result goes through;
    safe to use from many threads."""

    def __init__(self, files: JobFile, settings: RemoteSettings, identity: str) -> None:
        from dist_lto.distribute.cache_key import KeyMaker

        self.files = files
        self.settings = settings
        self.keys = KeyMaker(files, identity)
        self.connection = Connection(settings)
        try:
            capabilities = self.connection.server_capabilities()
        except BaseException:
            self.connection.close()
            raise
        limit = capabilities.cache_capabilities.max_batch_total_size_bytes
        self.store = Store(self.connection, limit)
        self.digests = FileDigests()
        self.platform = re_pb2.Platform(
            properties=[re_pb2.Platform.Property(name=n, value=v) for n, v in settings.platform]
        )

    def close(self) -> None:
        self.connection.close()

    def cached(self, digest: "re_pb2.Digest", action_id: str) -> "re_pb2.ActionResult | None":
        request = re_pb2.GetActionResultRequest(
            instance_name=self.connection.instance, action_digest=digest, inline_stderr=True,
        )  # fmt: skip

        def get() -> "re_pb2.ActionResult | None":
            try:
                return self.connection.ac.GetActionResult(
                    request,
                    metadata=self.connection.metadata(action_id),
                    timeout=self.connection.settings.rpc_timeout,
                )
            except grpc.RpcError as err:
                if err.code() is grpc.StatusCode.NOT_FOUND:
                    return None
                raise

        result = self.connection.call("GetActionResult", get)
        if result is not None and result.exit_code != 0:
            return None  # never reuse a failure
        return result

    def file_under_key(
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
        self.file_result(digest, keyed, action_id)

    def file_result(
        self, digest: "re_pb2.Digest", result: "re_pb2.ActionResult", action_id: str
    ) -> bool:
        """File `result` in the action cache under `digest`; whether the service took it.
        One that refuses costs only reuse: never fail a job for it."""
        request = re_pb2.UpdateActionResultRequest(
            instance_name=self.connection.instance, action_digest=digest, action_result=result
        )
        try:
            self.connection.call(
                "UpdateActionResult",
                lambda: self.connection.ac.UpdateActionResult(
                    request,
                    metadata=self.connection.metadata(action_id),
                    timeout=self.connection.settings.rpc_timeout,
                ),
            )
        except RemoteFailed:
            return False
        return True

    def finish(
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
                tmp = scratch_path_for(path)
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
                install(tmp, path)
            install(*temps[0])  # the object last: it is what says the job is done
        except BaseException:
            for tmp, _ in temps:
                remove_quietly(tmp)
            raise
        return stderr


KEY_SALT = b"dist-lto backend result key 1"
"""Salt of result-key actions: they are never executed, only looked up and filed."""


def key_action(result_key: str, platform: "re_pb2.Platform") -> "re_pb2.Digest":
    command = re_pb2.Command(arguments=["dist-lto-result-key", result_key], platform=platform)
    empty_root, _ = message_blob(re_pb2.Directory())
    action = re_pb2.Action(
        command_digest=message_blob(command)[0],
        input_root_digest=empty_root,
        platform=platform,
        salt=KEY_SALT,
    )
    return message_blob(action)[0]


def position_names(job: Job) -> dict[str, str]:
    return {str(i): path for i, path in enumerate(job.outputs)}
