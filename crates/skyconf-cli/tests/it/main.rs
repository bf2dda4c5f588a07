//! skyconf-cli's integration tests, one binary (`cargo test -p skyconf-cli --test it`; a module's
//! tests alone with a filter, e.g. `-- fleet::`): the `skyconf` binary as a process (digest,
//! validate, fetch, serve, tokens), fleet status with independent clients, the fleet view
//! against a churning fleet of real agent processes (`churn`), and clients written by others
//! (grpc-js, the SkyWalking Python agent: `interop`).

mod admin_errors;
mod churn;
mod cli;
mod conventions;
mod deploy;
mod durable;
mod fleet;
mod gateway;
mod global;
mod held;
mod interop;
mod logging;
mod rollout;
mod security;
mod util;
