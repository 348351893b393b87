// bb_scheduler: queues actions from the storage process and hands them to workers.
local common = import 'common.libsonnet';

{
  clientGrpcServers: [common.server(common.schedulerClientPort)],
  workerGrpcServers: [common.server(common.schedulerWorkerPort)],
  contentAddressableStorage: common.storageEndpoint,
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  executeAuthorizer: common.allow,
  modifyDrainsAuthorizer: common.allow,
  killOperationsAuthorizer: common.allow,
  synchronizeAuthorizer: common.allow,
  actionRouter: {
    simple: {
      // Action.platform, else Command.platform (what older REAPI clients fill in).
      platformKeyExtractor: { actionAndCommand: {} },
      invocationKeyExtractors: [{ toolInvocationId: {} }],
      initialSizeClassAnalyzer: {
        defaultExecutionTimeout: '600s',
        maximumExecutionTimeout: '1800s',
      },
    },
  },
  // Declared up front, so an action sent before the first worker has registered
  // waits in the queue instead of failing with "no workers".
  predeclaredPlatformQueues: [{
    instanceNamePrefix: '',
    platform: common.platform,
    sizeClasses: [0],
  }],
  platformQueueWithNoWorkersTimeout: '300s',
}
