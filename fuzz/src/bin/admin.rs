//! AFL target: `skyconf_fuzz::admin_write` (see the crate docs).

fn main() {
    afl::fuzz!(|data: &[u8]| skyconf_fuzz::admin_write(data));
}
