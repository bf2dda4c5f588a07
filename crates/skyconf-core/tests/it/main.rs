//! skyconf-core's integration tests, one binary (`cargo test -p skyconf-core --test it`): the
//! reader against golden data recorded from the OAP (`tests/data/golden/`), and properties of the
//! reader over generated input.

mod global;
mod golden;
mod properties;
mod targeting;
