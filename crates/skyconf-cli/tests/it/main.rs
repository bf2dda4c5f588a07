//! skyconf-cli's integration tests, one binary (`cargo test -p skyconf-cli --test it`; a module's
//! tests alone with a filter, e.g. `-- fleet::`): the `skyconf` binary as a process (digest,
//! validate, fetch, serve, bench, tokens) and fleet status with independent clients.

mod bench;
mod cli;
mod conventions;
mod deploy;
mod fleet;
mod gateway;
mod held;
mod logging;
mod rollout;
mod security;
mod util;
