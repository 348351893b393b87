// Shared settings of the loopback BuildBarn engine. Every value that differs between
// engines (state directory, ports, worker name) comes from an environment variable
// that tests/support/buildbarn.py sets: BuildBarn passes the environment to Jsonnet as
// external variables (std.extVar).
{
  state: std.extVar('DIST_LTO_RE_STATE'),
  storagePort: std.extVar('DIST_LTO_RE_STORAGE_PORT'),
  schedulerClientPort: std.extVar('DIST_LTO_RE_SCHEDULER_CLIENT_PORT'),
  schedulerWorkerPort: std.extVar('DIST_LTO_RE_SCHEDULER_WORKER_PORT'),
  tlsPort: std.extVar('DIST_LTO_RE_TLS_PORT'),  // '' for no TLS listener
  tlsDir: std.extVar('DIST_LTO_RE_TLS_DIR'),

  // Loopback only: nothing here authenticates, so nothing may listen elsewhere.
  server(port): {
    listenAddresses: ['127.0.0.1:' + port],
    authenticationPolicy: { allow: {} },
  },
  allow: { allow: {} },

  // What every client of the storage process (scheduler, workers) talks to.
  storageEndpoint: { grpc: { address: '127.0.0.1:' + $.storagePort } },

  // The one platform of this engine. An action names it in Action.platform; workers
  // advertise it. `toolchain` says that LLVM 22 is preinstalled on the worker at
  // /usr/lib/llvm-22/bin (the workers run on this machine), so actions reference the
  // compiler by absolute path instead of uploading it. Keep in step with
  // dist_lto.distribute.remote.settings.DEFAULT_PLATFORM and examples/remote.buckconfig.
  platform: {
    properties: [
      { name: 'OSFamily', value: 'linux' },
      { name: 'toolchain', value: 'llvm-22' },
    ],
  },

  maximumMessageSizeBytes: 16 * 1024 * 1024,
}
