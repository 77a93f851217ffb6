//! Listeners, worker threads, accept, connection limits, timeouts and graceful shutdown.
