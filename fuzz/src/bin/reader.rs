//! AFL target: `skyconf_fuzz::reader` (see the crate docs).

fn main() {
    afl::fuzz!(|data: &[u8]| skyconf_fuzz::reader(data));
}
