/* A compile server for clang's ThinLTO backends: one process that runs backend after
 * backend in itself, as a linker's in-process ThinLTO runs them on its threads.
 *
 * A compiler forked per job (forkserver.c) still pays, per job, for the page faults of
 * a fresh process: Linux gives a forked child no page table entries for the
 * compiler's code, and every heap page is new. Measured on Lua's 33 backends, that is
 * ~20 ms of system time per job, and the jobs took 1.1x the CPU of LLD's in-process
 * link; run one after another in this process, about what that link takes
 * (bench/backend_cpu.py).
 *
 * It is built from this source against the compiler's own libclang-cpp and libLLVM
 * (cc1server.py), so each job runs the code that compiler runs. Per job it builds the
 * compilation with clang's own driver, as `clang` does, and runs the job here only when
 * that is one in-process `clang -cc1` command and nothing could make it differ from a
 * fresh clang's run: the driver said nothing; no option that sets process-wide state
 * (plugins, timers, statistics) nor a response file; none of the environment
 * variables that change how clang runs. Anything else is declined (the client forks
 * a compiler for it).
 *
 * LLVM's own options (-mllvm) are process-wide. A server is started for one list of
 * them (its arguments after the compiler) and takes only jobs with exactly that list,
 * none of which keeps count across jobs or reports at exit (statistics, timers, debug
 * counters, bisection). Before each job every option is reset to its default, as
 * clang's driver does before its in-process cc1, and the job sets its own again.
 *
 * Memory a job leaves unfreed (-disable-free, as in clang) stays until the server has
 * 1 GiB resident; then it leaves, and the client starts another.
 *
 * Protocol: that of forkserver.c (socket in DIST_LTO_FORK_SERVER_FD), the job's
 * "process" being this server, plus one record:
 *   server -> "N" + int32 0                            declined: run it elsewhere
 * A job that fails or prints anything is reported as it happened; the client runs
 * such jobs again through a forked clang for the compiler's own words (cc1server.py).
 * The server leaves when its client closes the socket, even in the middle of a job.
 */
#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/DiagnosticIDs.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Driver/Compilation.h"
#include "clang/Driver/Driver.h"
#include "clang/Driver/Job.h"
#include "clang/Driver/ToolChain.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticBuffer.h"
#include "clang/FrontendTool/Utils.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <cerrno>
#include <fcntl.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "jobsocket.h"

namespace {

/* The compiler's program, as `clang` finds its own (canonical) path. */
std::string Executable;

constexpr const char *FdVariable = "DIST_LTO_FORK_SERVER_FD";
constexpr size_t MaxRequest = DIST_LTO_MAX_REQUEST;
constexpr size_t MaxResident = size_t(1) << 30;
constexpr size_t JobStack = 64 << 20; /* clang's own in-process jobs ask for 8 MiB */

/* cc1 options that change state shared by every job of a process. */
constexpr const char *ProcessWide[] = {
    "-load", "-fpass-plugin=", "-plugin", "-add-plugin", "-ftime-report",
    "-ftime-trace", "-print-stats", "-stats-file", "-fdebug-pass-manager"};

/* LLVM options (-mllvm) whose effect outlives a job: counts kept across jobs, reports
 * printed at exit, output on stdout, the process's end. By name, without the dashes. */
constexpr const char *ProcessLifetime[] = {
    "stats", "stats-json", "time-passes", "time-passes-per-run", "info-output-file",
    "track-memory", "debug-counter", "print-debug-counter", "opt-bisect-limit",
    "opt-bisect-verbose", "print-pipeline-passes", "load", "load-pass-plugin", "help",
    "help-hidden", "help-list", "help-list-hidden", "print-options", "print-all-options",
    "version"};

/* The -mllvm options of every job this server takes (its arguments after the
 * compiler's path). */
std::vector<std::string> LlvmOptions;

/* Environment variables that change what the driver or cc1 does. */
constexpr const char *Environment[] = {"CCC_OVERRIDE_OPTIONS", "CLANG_SPAWN_CC1",
                                       "CC_PRINT_OPTIONS", "CC_PRINT_HEADERS",
                                       "CC_LOG_DIAGNOSTICS", "CC_PRINT_PROC_STAT",
                                       "CC_PRINT_INTERNAL_STAT", "CLANG_CRASH_DIAGNOSTICS_DIR"};

/* Counts what the driver says; any of it declines the job (a fresh clang prints it). */
class Counting : public clang::DiagnosticConsumer {
public:
  unsigned Said = 0;
  void HandleDiagnostic(clang::DiagnosticsEngine::Level Level,
                        const clang::Diagnostic &Info) override {
    DiagnosticConsumer::HandleDiagnostic(Level, Info);
    ++Said;
  }
};

bool starts_with_any(llvm::StringRef arg) {
  for (const char *option : ProcessWide)
    if (arg.starts_with(option)) return true;
  return false;
}

/* Whether an -mllvm option's effect stays within the job that gives it. */
bool within_job(llvm::StringRef option) {
  llvm::StringRef name = option.ltrim('-').split('=').first;
  for (const char *lasting : ProcessLifetime)
    if (name == lasting) return false;
  return true;
}

int never_called(llvm::SmallVectorImpl<const char *> &) { return 1; }

/* The cc1 arguments of the job, as `clang` would run them in process, or false. */
bool cc1_arguments(const std::vector<const char *> &argv, std::vector<std::string> &out) {
  for (const char *name : Environment)
    if (getenv(name) != nullptr) return false;
  for (const char *arg : argv) {
    llvm::StringRef text(arg);
    if (text.starts_with("@") || text == "-fno-integrated-cc1" || text == "-no-canonical-prefixes")
      return false;
  }
  llvm::StringRef name = llvm::sys::path::filename(argv[0]);
  Counting counting;
  clang::DiagnosticOptions options;
  clang::DiagnosticsEngine diags(new clang::DiagnosticIDs(), options, &counting, false);
  clang::driver::Driver driver(Executable, llvm::sys::getDefaultTargetTriple(), diags);
  driver.setTargetAndMode(clang::driver::ToolChain::getTargetAndModeFromProgramName(name));
  /* Set as `clang` sets it, so the driver plans its cc1 job to run in process. */
  driver.CC1Main = never_called;
  std::unique_ptr<clang::driver::Compilation> compilation(driver.BuildCompilation(argv));
  if (!compilation || compilation->containsError() || counting.Said != 0) return false;
  const auto &jobs = compilation->getJobs();
  if (jobs.size() != 1) return false;
  const clang::driver::Command &job = *jobs.begin();
  const auto &args = job.getArguments();
  if (!job.InProcess || args.empty() || llvm::StringRef(args[0]) != "-cc1") return false;
  std::vector<std::string> llvm_options;
  for (size_t i = 0; i < args.size(); i++) {
    llvm::StringRef arg(args[i]);
    if (arg == "-mllvm" && i + 1 < args.size()) {
      if (!within_job(args[i + 1])) return false;
      llvm_options.emplace_back(args[i + 1]);
    } else if (starts_with_any(arg)) {
      return false;
    }
    out.emplace_back(arg);
  }
  return llvm_options == LlvmOptions;
}

struct Job {
  std::vector<std::string> args; /* after "-cc1" */
  std::string program;
  int status = 1;
  int done_pipe = -1;
};

/* What cc1 does for one compile. With -disable-free (the driver's default) it leaves
 * its memory unfreed, as a clang that exits next does: cheaper than freeing it (7% of
 * the CPU of Lua's backends), and the server leaves at MaxResident before that adds
 * up. */
int run_cc1(const Job &job) {
  llvm::cl::ResetAllOptionOccurrences(); /* the job's -mllvm options are set afresh */
  std::vector<const char *> args;
  for (size_t i = 1; i < job.args.size(); i++) args.push_back(job.args[i].c_str());
  auto instance = std::make_unique<clang::CompilerInstance>();
  auto *buffer = new clang::TextDiagnosticBuffer;
  clang::DiagnosticOptions options;
  clang::DiagnosticsEngine diags(new clang::DiagnosticIDs(), options, buffer);
  bool ok = clang::CompilerInvocation::CreateFromArgs(instance->getInvocation(), args, diags,
                                                      job.program.c_str());
  instance->createVirtualFileSystem();
  instance->createDiagnostics();
  if (!instance->hasDiagnostics()) return 1;
  buffer->FlushDiagnostics(instance->getDiagnostics());
  if (!ok) return 1;
  bool done = clang::ExecuteCompilerInvocation(instance.get());
  if (instance->getFrontendOpts().DisableFree) (void)instance.release();
  return done ? 0 : 1;
}

void *job_thread(void *data) {
  Job *job = static_cast<Job *>(data);
  job->status = run_cc1(*job);
  char done = 1;
  while (write(job->done_pipe, &done, 1) < 0 && errno == EINTR) {
  }
  return nullptr;
}

/* Run `job` on a thread of its own (clang's stack), its stderr on `stderr_fd`; leave
 * at once if the client goes away meanwhile. */
int run_in_process(int sock, Job &job, int stderr_fd) {
  int done[2];
  if (pipe2(done, O_CLOEXEC) != 0) return -1;
  job.done_pipe = done[1];
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(stderr_fd, STDERR_FILENO);
  close(stderr_fd);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, JobStack);
  pthread_t thread;
  int started = pthread_create(&thread, &attr, job_thread, &job);
  pthread_attr_destroy(&attr);
  if (started != 0) {
    job.status = 1;
  } else {
    struct pollfd fds[2] = {{done[0], POLLIN, 0}, {sock, POLLIN, 0}};
    for (;;) {
      int ready = poll(fds, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0 || fds[1].revents) _exit(1); /* the client is gone: so is the job */
      if (fds[0].revents) break;
    }
    pthread_join(thread, nullptr);
  }
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(done[0]);
  close(done[1]);
  return job.status;
}

/* Resident memory in bytes. */
size_t resident() {
  FILE *statm = fopen("/proc/self/statm", "re");
  if (statm == nullptr) return 0;
  unsigned long size = 0, pages = 0;
  int read = fscanf(statm, "%lu %lu", &size, &pages);
  fclose(statm);
  return read == 2 ? pages * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

int serve_one(int sock, char *buffer, ssize_t size, int stderr_fd) {
  std::vector<const char *> argv;
  for (char *arg = buffer; arg < buffer + size; arg += strlen(arg) + 1) argv.push_back(arg);
  Job job;
  job.program = Executable;
  if (argv.empty() || !cc1_arguments(argv, job.args)) {
    close(stderr_fd);
    return send_record(sock, 'N', 0);
  }
  if (send_record(sock, 'P', getpid()) != 0 || wait_for_ack(sock) != 0) return -1;
  int status = run_in_process(sock, job, stderr_fd);
  if (status < 0) return -1;
  return send_record(sock, 'S', (status & 0xff) << 8);
}

} // namespace

int main(int argc, char **argv) {
  const char *fd_text = getenv(FdVariable);
  if (fd_text == nullptr || argc < 2) return 2;
  Executable = argv[1];
  LlvmOptions.assign(argv + 2, argv + argc);
  int sock = atoi(fd_text);
  unsetenv(FdVariable);
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
  llvm::InitializeAllAsmParsers();
  std::vector<char> buffer(MaxRequest);
  if (send_record(sock, 'R', getpid()) != 0) return 1;
  for (;;) {
    int stderr_fd = -1;
    ssize_t size = receive_job(sock, buffer.data(), &stderr_fd);
    if (size <= 0) return size == 0 ? 0 : 1;
    if (serve_one(sock, buffer.data(), size, stderr_fd) != 0) return 1;
    /* What jobs left unfreed: the client starts a new server when this one has gone. */
    if (resident() > MaxResident) return 0;
  }
}
