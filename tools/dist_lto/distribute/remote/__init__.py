"""Remote execution and remote caching of ThinLTO backends over the Remote Execution API.

`dist-lto distribute --remote URL` runs each DTLTO job as a REAPI action on an existing
engine; `--remote-cache URL` runs it here and shares its result through the service's
action cache and CAS (BuildBarn and bazel-remote on loopback in our tests, see
docs/remote.md):

- `settings`: the options (address, TLS files, instance, headers, helper, platform);
- `credentials`: headers from a credential helper (Bazel's protocol);
- `protos`: the REAPI messages and stubs (buildgrid-common's generated code), one place;
- `connection`: the gRPC channel (TLS), request metadata and bounded retries;
- `cas`: digests, the input tree of a job, uploads and downloads;
- `results`: looking results up, checking them as strictly as a local backend's, filing them;
- `executor`: one job as an Action: action cache first, then Execute;
- `cache_only`: a result looked up before a local compile, and uploaded after it.

Imported only with a remote service: grpcio and protobuf cost more to import than a
local link's whole distribution of a small program.
"""
