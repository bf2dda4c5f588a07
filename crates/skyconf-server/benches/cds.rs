//! Micro-benchmarks of the CDS hot path without the network: `CdsService::answer` for an agent that
//! holds the configuration (empty answer), the same recorded in the fleet table as the server
//! records it, one that does not (the pre-encoded command with a fresh serial) and an unknown
//! service; and installing a 10,000-service table (digests and pre-encoded
//! answers), which is what a reload adds to parsing.
//!
//! `cargo bench -p skyconf-server --bench cds`.

use std::sync::Arc;

use divan::{Bencher, black_box};
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_server::fleet::Caller;
use skyconf_server::socket::ConnectionState;
use skyconf_server::{CdsOptions, CdsService, Fleet, FleetOptions, ServedTable};
use skyconf_testkit::fixtures;

fn main() {
    divan::main();
}

fn service(services: usize) -> (CdsService, String) {
    let table = skyconf_core::read(&fixtures::document(services, fixtures::ENTRIES.len())).unwrap();
    let digest = table.get("bench-svc-0").unwrap().digest().as_str().to_owned();
    let served = Arc::new(ServedTable::new(table));
    (CdsService::new(served, CdsOptions::default()), digest)
}

fn request(service: &str, uuid: &str) -> ConfigurationSyncRequest {
    ConfigurationSyncRequest { service: service.to_owned(), uuid: uuid.to_owned() }
}

/// The agent echoes the current digest: lookup, compare, empty answer.
#[divan::bench]
fn answer_unchanged(bencher: Bencher<'_, '_>) {
    let (svc, digest) = service(1_000);
    let req = request("bench-svc-0", &digest);
    bencher.bench(|| svc.answer(black_box(&req)));
}

/// As [`answer_unchanged`], recorded in the fleet table as a poll on an agent connection, as the
/// server answers it: the row's update under one shard lock.
#[divan::bench]
fn answer_unchanged_recorded(bencher: Bencher<'_, '_>) {
    let table = skyconf_core::read(&fixtures::document(1_000, fixtures::ENTRIES.len())).unwrap();
    let digest = table.get("bench-svc-0").unwrap().digest().as_str().to_owned();
    let fleet = Arc::new(Fleet::new(FleetOptions::default()));
    let svc = CdsService::new(Arc::new(ServedTable::new(table)), CdsOptions::default()).with_fleet(fleet);
    let peer = std::net::SocketAddr::from(([10, 0, 0, 1], 40_000));
    let caller = Caller::Connection(Arc::new(ConnectionState::new(Some(peer))));
    let req = request("bench-svc-0", &digest);
    bencher.bench(|| svc.answer_from(black_box(&req), Some(&caller)));
}

/// The agent has no configuration yet: lookup, then the pre-encoded command with a fresh serial.
#[divan::bench]
fn answer_changed(bencher: Bencher<'_, '_>) {
    let (svc, _) = service(1_000);
    let req = request("bench-svc-0", "");
    bencher.bench(|| svc.answer(black_box(&req)));
}

/// A service with no entry: the EMPTY command.
#[divan::bench]
fn answer_unknown_service(bencher: Bencher<'_, '_>) {
    let (svc, _) = service(1_000);
    let req = request("no-such-service", "");
    bencher.bench(|| svc.answer(black_box(&req)));
}

/// Installing an already parsed 10,000-service table: per-service answers encoded, old table dropped.
#[divan::bench(sample_count = 10)]
fn install_10k_services(bencher: Bencher<'_, '_>) {
    let table = skyconf_core::read(&fixtures::document(10_000, fixtures::ENTRIES.len())).unwrap();
    let served = ServedTable::new(table.clone());
    bencher.bench(|| served.install(black_box(table.clone())));
}
