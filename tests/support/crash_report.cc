// A crash reporter loaded with LD_PRELOAD, for diagnosis only (never linked
// into libmgs): on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT it prints the
// signal, the faulting address, the crashing thread's name and id, and that
// thread's native stack as "object +offset" lines, then lets the signal
// take its usual course (core dump, exit status). Python's faulthandler
// shows Python threads only; a crash in a coordinator or MPI thread shows
// nothing there. scripts/resolve_backtrace.sh turns the lines into function,
// file and line with addr2line.
//   LD_PRELOAD=libmgs_crash_report.so mpirun ... python3 ...
// Not async-signal-safe in every call (dladdr, snprintf): acceptable for a
// process that is about to die, and the stack walk was primed at load.
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

void say(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

const char* signalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

void onFatal(int sig, siginfo_t* info, void*) {
  char line[512];
  char name[17] = {0};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  int n = std::snprintf(line, sizeof line, "[crash_report pid %d] %s (address %p) in thread '%s' (tid %ld)\n",
                        static_cast<int>(getpid()), signalName(sig), info ? info->si_addr : nullptr, name,
                        static_cast<long>(syscall(SYS_gettid)));
  say(line, static_cast<size_t>(n));
  void* frames[64];
  const int k = backtrace(frames, 64);
  for (int i = 0; i < k; ++i) {
    Dl_info d{};
    if (dladdr(frames[i], &d) && d.dli_fname) {
      const auto off = reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(d.dli_fbase);
      n = std::snprintf(line, sizeof line, "[crash_report]   #%d %s +0x%lx %s\n", i, d.dli_fname,
                        static_cast<unsigned long>(off), d.dli_sname ? d.dli_sname : "");
    } else {
      n = std::snprintf(line, sizeof line, "[crash_report]   #%d ? %p\n", i, frames[i]);
    }
    say(line, static_cast<size_t>(n));
  }
  // The usual course: the default action, raised again on return.
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) void install() {
  void* prime[2];
  backtrace(prime, 2);  // loads the unwinder now, not inside the handler
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = onFatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaction(sig, &sa, nullptr);
}

}  // namespace
