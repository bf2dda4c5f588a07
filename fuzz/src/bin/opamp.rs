//! AFL target: `skyconf_fuzz::opamp_message` (see the crate docs).

fn main() {
    afl::fuzz!(|data: &[u8]| skyconf_fuzz::opamp_message(data));
}
