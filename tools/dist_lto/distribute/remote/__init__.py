"""Remote execution of ThinLTO backends over the Remote Execution API (REAPI).

`dist-lto distribute --remote grpc://HOST:PORT` runs each DTLTO job as a REAPI action
on an existing engine (BuildBarn on loopback in our tests, see docs/remote.md):

- `settings`: the command-line options (address, instance, headers, platform);
- `protos`: the REAPI messages and stubs (buildgrid-common's generated code), one place;
- `connection`: the gRPC channel, request metadata and bounded retries;
- `cas`: digests, the input tree of a job, uploads and downloads;
- `executor`: one job as an Action: action cache first, then Execute, then the same
  strict checks as a local backend.

Imported only with `--remote`: grpcio and protobuf cost more to import than a local
link's whole distribution of a small program.
"""
