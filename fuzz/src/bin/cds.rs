//! AFL target: `skyconf_fuzz::cds_request` (see the crate docs).

fn main() {
    afl::fuzz!(|data: &[u8]| skyconf_fuzz::cds_request(data));
}
