//! skyconf-bench's integration tests, one binary (`cargo test -p skyconf-bench --test it`): the
//! `skyconf-bench` binary as a process against a skyconf server started in the test (`bench`), and
//! its command line (`cli`).

mod bench;
mod cli;
mod util;
