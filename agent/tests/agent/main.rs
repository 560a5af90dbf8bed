//! Integration tests of the agent: real gRPC over real sockets, a fake
//! collector implemented with tonic, no sleeps as synchronisation (only
//! polling of conditions with a deadline).

mod attribution;
mod backpressure;
mod bad_input;
mod closed;
mod delivery;
mod listen;
mod retry;
mod runtime;
mod shutdown;
mod step_flush;
mod support;
mod workload;
