//! Deterministic tests of the connection state machine.
