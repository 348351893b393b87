"""The REAPI protocol: messages and gRPC stubs generated from the official .proto files.

They come from PyPI's buildgrid-common (maintained by the BuildGrid project; its
`buildgrid.common.protos` tree holds the generated code of remote-apis, googleapis'
bytestream, longrunning and rpc). Everything else imports them from here, so moving to
another package of generated stubs touches one file.
"""

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.bytestream import bytestream_pb2 as bs_pb2
from buildgrid.common.protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from buildgrid.common.protos.google.rpc import code_pb2, error_details_pb2, status_pb2

REQUEST_METADATA_KEY = "build.bazel.remote.execution.v2.requestmetadata-bin"

__all__ = [
    "REQUEST_METADATA_KEY",
    "bs_grpc",
    "bs_pb2",
    "code_pb2",
    "error_details_pb2",
    "re_grpc",
    "re_pb2",
    "status_pb2",
]
