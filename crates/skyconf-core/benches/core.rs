//! Micro-benchmarks of the core's hot spots: the YAML reader (what a reload costs), the digest, and
//! the response encoding (once per reload: `PreEncoded::new`; once per call: the serial patch).
//!
//! `cargo bench -p skyconf-core --bench core`. Wall-clock numbers on a shared machine are noisy; for
//! repeatable counts run the binary under `valgrind --tool=callgrind` (see BENCHMARKS.md).

use divan::{Bencher, black_box};
use skyconf_core::Digest;
use skyconf_core::codec::PreEncoded;
use skyconf_core::fixtures;
use uuid::Uuid;

fn main() {
    divan::main();
}

/// The settings the stock agents read, as `skyconf-bench document` writes them.
const ENTRIES: [(&str, &str); 6] = fixtures::ENTRIES;

/// Parsing, typing, stringifying and digesting a whole document: the CPU part of a reload.
#[divan::bench(args = [1, 1_000, 10_000], sample_count = 10)]
fn read(bencher: Bencher<'_, '_>, services: usize) {
    let text = fixtures::document(services, ENTRIES.len());
    bencher.counter(divan::counter::BytesCount::of_str(&text)).bench(|| skyconf_core::read(black_box(&text)).unwrap());
}

/// One service's digest (SHA-512 over `key:value` pairs).
#[divan::bench]
fn digest() -> Digest {
    Digest::of_entries(black_box(ENTRIES))
}

/// Encoding one service's answer, once per reload.
#[divan::bench]
fn pre_encode() -> PreEncoded {
    let digest = Digest::of_entries(ENTRIES);
    PreEncoded::new(black_box(&digest), ENTRIES)
}

/// What every "changed" call costs: copy the answer and patch in a fresh random serial.
#[divan::bench]
fn with_fresh_serial(bencher: Bencher<'_, '_>) {
    let pre = PreEncoded::new(&Digest::of_entries(ENTRIES), ENTRIES);
    bencher.bench(|| black_box(&pre).with_fresh_serial());
}

/// The same with a fixed serial: the copy and patch alone, without the random number generator.
#[divan::bench]
fn with_serial(bencher: Bencher<'_, '_>) {
    let pre = PreEncoded::new(&Digest::of_entries(ENTRIES), ENTRIES);
    let serial = Uuid::new_v4();
    bencher.bench(|| black_box(&pre).with_serial(black_box(serial)));
}

/// The random number generator alone.
#[divan::bench]
fn uuid_v4() -> Uuid {
    Uuid::new_v4()
}
