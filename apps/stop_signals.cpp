#include "stop_signals.hpp"

#include <signal.h>

#include <atomic>

namespace stoker::app {
namespace {

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler stores into it");
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

void set_default(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
}

// Async-signal-safe: an atomic store and sigaction.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_received.compare_exchange_strong(none, sig);
  set_default(SIGINT);
  set_default(SIGTERM);
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int StopSignals::received() { return g_received.load(std::memory_order_relaxed); }

}  // namespace stoker::app
