// Ctrl-C for long commands: the first SIGINT or SIGTERM asks the command to stop where it can be
// continued (the flag it polls); the earlier (default) disposition of both is back at once, so a
// second signal ends the process as usual. A signal the process started with ignored (SIGINT in
// a shell's background job) stays ignored.
#pragma once

namespace stoker::app {

class StopSignals {
 public:
  StopSignals();   // catches SIGINT and SIGTERM (sigaction), unless ignored
  ~StopSignals();  // their earlier dispositions back
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal that asked to stop, 0 while none has; safe to poll from any thread.
  static int received();
  // The status to exit with once stopped: 128 + the signal (130 for SIGINT, 143 for SIGTERM).
  static int exit_status() { return 128 + received(); }
};

}  // namespace stoker::app
