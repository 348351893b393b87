// bb_runner: runs the commands of its bb_worker (same DIST_LTO_RE_WORKER) in that
// worker's build directory, without a chroot: the compiler is the machine's own
// /usr/lib/llvm-22/bin/clang (see the platform in common.libsonnet).
local common = import 'common.libsonnet';
local dir = common.state + '/' + std.extVar('DIST_LTO_RE_WORKER');

{
  buildDirectoryPath: dir + '/build',
  grpcServers: [{
    listenPaths: [dir + '/runner.sock'],
    authenticationPolicy: common.allow,
  }],
}
