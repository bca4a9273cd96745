#pragma once
// SIGINT and SIGTERM ask the server to shut down: the handler only sets a flag (all a signal
// handler may safely do) and the serving thread polls it. SIGPIPE is ignored, because a
// client that disconnects mid-write must cost an error return, not the process.
namespace cellm::server {

void install_shutdown_signals();
bool shutdown_requested();
// Blocks until a shutdown signal arrived (polls the flag).
void wait_for_shutdown_signal();

}  // namespace cellm::server
