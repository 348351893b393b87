// bb_storage: the engine's front door. It holds the CAS and the action cache (on
// sparse files under the state directory, so they survive a restart of the engine)
// and forwards Execute calls to the scheduler. Clients use grpc://127.0.0.1:<port>.
local common = import 'common.libsonnet';

local localStore(name, blockBytes, blocks) = {
  'local': {
    keyLocationMapInMemory: { entries: 1024 * 1024 },
    keyLocationMapMaximumGetAttempts: 16,
    keyLocationMapMaximumPutAttempts: 64,
    oldBlocks: 2,
    currentBlocks: blocks,
    newBlocks: 1,
    blocksOnBlockDevice: {
      source: {
        file: {
          path: common.state + '/storage/' + name + '-blocks',
          sizeBytes: blockBytes * (blocks + 3 + 2),
        },
      },
      spareBlocks: 2,
    },
    persistent: {
      stateDirectoryPath: common.state + '/storage/' + name + '-state',
      minimumEpochInterval: '5s',
    },
  },
};

{
  grpcServers: [common.server(common.storagePort)],
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  contentAddressableStorage: {
    backend: localStore('cas', 256 * 1024 * 1024, 12),
    getAuthorizer: common.allow,
    putAuthorizer: common.allow,
    findMissingAuthorizer: common.allow,
  },
  actionCache: {
    // An action result is only returned while every output it names is in the CAS.
    backend: {
      completenessChecking: {
        backend: localStore('ac', 16 * 1024 * 1024, 4),
        maximumTotalTreeSizeBytes: 16 * 1024 * 1024,
      },
    },
    getAuthorizer: common.allow,
    putAuthorizer: common.allow,
  },
  schedulers: {
    '': { endpoint: { address: '127.0.0.1:' + common.schedulerClientPort } },
  },
  executeAuthorizer: common.allow,
}
