// Crashes in a named thread, for tests/support's check of the crash reporter.
#include <pthread.h>

#include <thread>

namespace {
volatile int* volatile g_nowhere = nullptr;

__attribute__((noinline)) void crashHere() { *g_nowhere = 1; }
}  // namespace

int main() {
  std::thread t([] {
    pthread_setname_np(pthread_self(), "mgs-victim");
    crashHere();
  });
  t.join();
  return 0;
}
