#include "stop_signals.hpp"

#include <signal.h>

#include <atomic>

namespace stoker::app {
namespace {

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler stores into it");
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

// Async-signal-safe: an atomic store and sigaction.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_received.compare_exchange_strong(none, sig);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

// A signal the parent ignored (SIGINT for a background job of a shell) stays ignored.
void catch_unless_ignored(int sig, const struct sigaction& handler, struct sigaction& previous) {
  ::sigaction(sig, &handler, &previous);
  if (previous.sa_handler == SIG_IGN) ::sigaction(sig, &previous, nullptr);
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
  catch_unless_ignored(SIGINT, sa, g_previous_int);
  catch_unless_ignored(SIGTERM, sa, g_previous_term);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int StopSignals::received() { return g_received.load(std::memory_order_relaxed); }

}  // namespace stoker::app
