// bb_worker: one per DIST_LTO_RE_WORKER. It fetches an action's inputs from the CAS
// into its build directory (hard links from a local file cache), asks its bb_runner
// to run the command, and uploads the outputs and the ActionResult. The worker id
// lands in each ActionResult's execution_metadata.worker, which is how the tests see
// on which worker a backend ran.
local common = import 'common.libsonnet';
local name = std.extVar('DIST_LTO_RE_WORKER');
local dir = common.state + '/' + name;

{
  blobstore: {
    contentAddressableStorage: common.storageEndpoint,
    actionCache: common.storageEndpoint,
  },
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  scheduler: { address: '127.0.0.1:' + common.schedulerWorkerPort },
  buildDirectories: [{
    native: {
      buildDirectoryPath: dir + '/build',
      cacheDirectoryPath: dir + '/cache',
      maximumCacheFileCount: 100000,
      maximumCacheSizeBytes: 2 * 1024 * 1024 * 1024,
      cacheReplacementPolicy: 'LEAST_RECENTLY_USED',
    },
    runners: [{
      endpoint: { address: 'unix:' + dir + '/runner.sock' },
      concurrency: 1,
      platform: common.platform,
      workerId: { engine: 'dist-lto-loopback', worker: name },
    }],
  }],
  filePool: {
    blockDevice: { file: { path: dir + '/filepool', sizeBytes: 1024 * 1024 * 1024 } },
  },
  outputUploadConcurrency: 4,
  inputDownloadConcurrency: 8,
}
