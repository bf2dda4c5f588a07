//! AFL target: `skyconf_fuzz::h2_connection` (see the crate docs).

fn main() {
    afl::fuzz!(|data: &[u8]| skyconf_fuzz::h2_connection(data));
}
