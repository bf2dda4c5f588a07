//! skyconf-agent's integration tests, one binary (`cargo test -p skyconf-agent --test it`; a
//! module's tests alone with a filter, e.g. `-- javaref::`): the poll loop under paused time
//! against an in-memory CDS (`common::FakeCds`), and the same scenarios (`common::scenarios`)
//! against skyconf's CDS service and against the OAP-equivalent Java reference server.

mod common;
mod identity;
mod javaref;
mod poll_loop;
mod skyconf_server;
