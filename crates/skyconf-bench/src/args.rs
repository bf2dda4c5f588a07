//! How `skyconf-bench` spells a server's address and a duration: `skyconf-args`, the spellings
//! `skyconf`'s client commands take, so that a script passes the same values to both.

pub(crate) use skyconf_args::{ServerAddr, parse_duration};
