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

// With DIST_LTO_RE_TLS_PORT set, a second listener for clients speaks TLS with the
// certificate in DIST_LTO_RE_TLS_DIR and lets a call through only with a client
// certificate the CA in DIST_LTO_RE_TLS_CLIENT_CA signed (unexpired) AND a bearer token
// that the JSON Web Key Set there checks. Workers and the scheduler keep the plaintext
// listener.
local tlsServer = {
  listenAddresses: ['127.0.0.1:' + common.tlsPort],
  tls: {
    serverKeyPair: {
      files: {
        certificatePath: common.tlsDir + '/server.pem',
        privateKeyPath: common.tlsDir + '/server.key',
        refreshInterval: '3600s',
      },
    },
  },
  authenticationPolicy: {
    all: {
      policies: [
        {
          tlsClientCertificate: {
            clientCertificateAuthorities: std.extVar('DIST_LTO_RE_TLS_CLIENT_CA'),
            validationJmespathExpression: '`true`',
            metadataExtractionJmespathExpression: '`{}`',
          },
        },
        {
          jwt: {
            jwksFile: common.tlsDir + '/jwks.json',
            maximumCacheSize: 100,
            cacheReplacementPolicy: 'LEAST_RECENTLY_USED',
            claimsValidationJmespathExpression: '`true`',
            metadataExtractionJmespathExpression: '`{}`',
          },
        },
      ],
    },
  },
};

{
  grpcServers: [common.server(common.storagePort)]
               + (if common.tlsPort == '' then [] else [tlsServer]),
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
