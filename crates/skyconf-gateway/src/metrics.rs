//! Gateway metrics, read at scrape time from the upstream pool (the counts live there, where
//! calls pass, and `GET /api/v1/status` reads the same): forwarded calls by OAP and outcome,
//! answers not passed on, calls never sent for want of a stream, and per OAP whether it is
//! reachable, its connections, calls in flight and waiting, and agent connections pinned to it.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::upstream::{MemberStats, Upstreams};

/// Reports the state of `upstreams` in `registry` on every scrape.
pub fn register(upstreams: &Arc<Upstreams>, registry: &mut Registry) {
    registry.register_collector(Box::new(UpstreamMetrics(Arc::clone(upstreams))));
}

#[derive(Debug)]
struct UpstreamMetrics(Arc<Upstreams>);

/// One labelled series per OAP (and outcome).
type Series<'a> = Vec<(Vec<(&'static str, &'a str)>, u64)>;

/// One label value and what it counts of an OAP's stats.
type Part = (&'static str, fn(&MemberStats) -> u64);

fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    series: Series<'_>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        let mut metric = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&value, None)?,
            _ => metric.encode_gauge(&value)?,
        }
    }
    Ok(())
}

impl Collector for UpstreamMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let upstreams = &self.0;
        let stats: Vec<(&str, MemberStats)> =
            upstreams.members().iter().map(|m| (m.addr.as_str(), m.stats())).collect();
        let per = |value: fn(&MemberStats) -> u64| -> Series<'_> {
            stats.iter().map(|(addr, s)| (vec![("upstream", *addr)], value(s))).collect()
        };
        // One series per OAP and part, OAP by OAP, each part under `label`.
        let by = |label: &'static str, parts: &[Part]| -> Series<'_> {
            stats
                .iter()
                .flat_map(|(addr, s)| {
                    parts.iter().map(move |(part, value)| (vec![("upstream", *addr), (label, *part)], value(s)))
                })
                .collect()
        };
        let mut calls = by(
            "outcome",
            &[
                ("forwarded", |s| s.forwarded),
                ("failed", |s| s.failed),
                ("no_stream", |s| s.unsent.deadline + s.unsent.full),
            ],
        );
        calls.push((vec![("upstream", ""), ("outcome", "no_upstream")], upstreams.no_upstream()));
        encode(
            &mut encoder,
            "skyconf_gateway_calls",
            "Calls forwarded to the OAPs, by OAP and outcome (forwarded: the OAP answered; failed: reset or connection lost before it answered; no_stream: ended DEADLINE_EXCEEDED waiting for a stream; no_upstream: no OAP was reachable)",
            MetricType::Counter,
            calls,
        )?;
        let refused = by("reason", &[("oversized", |s| s.answers_oversized), ("malformed", |s| s.answers_malformed)]);
        encode(
            &mut encoder,
            "skyconf_gateway_answers_refused",
            "OAP answers not passed on, the call ended INTERNAL, by reason (oversized: a header block over 8 KiB; malformed: refused by HTTP/2 for its stream)",
            MetricType::Counter,
            refused,
        )?;
        let unsent = by(
            "reason",
            &[("deadline", |s| s.unsent.deadline), ("full", |s| s.unsent.full), ("left", |s| s.unsent.left)],
        );
        encode(
            &mut encoder,
            "skyconf_gateway_unsent_calls",
            "Calls never sent to the OAP for want of a stream, by reason (deadline: waited the queue's bound; full: the queue was full; left: the call ended while waiting)",
            MetricType::Counter,
            unsent,
        )?;
        encode(
            &mut encoder,
            "skyconf_gateway_upstream_up",
            "Whether the gateway has an open connection to the OAP (1) or not (0)",
            MetricType::Gauge,
            per(|s| u64::from(s.up)),
        )?;
        encode(
            &mut encoder,
            "skyconf_gateway_upstream_connections",
            "Open HTTP/2 connections to the OAP",
            MetricType::Gauge,
            per(|s| s.connections as u64),
        )?;
        encode(
            &mut encoder,
            "skyconf_gateway_calls_in_flight",
            "Forwarded calls holding a stream to the OAP",
            MetricType::Gauge,
            per(|s| s.calls_in_flight as u64),
        )?;
        encode(
            &mut encoder,
            "skyconf_gateway_queued_calls",
            "Calls waiting for a stream to the OAP (every stream it allows is in use)",
            MetricType::Gauge,
            per(|s| s.queued_calls as u64),
        )?;
        encode(
            &mut encoder,
            "skyconf_gateway_agent_connections",
            "Agent connections whose forwarded calls go to the OAP",
            MetricType::Gauge,
            per(|s| s.agent_connections as u64),
        )
    }
}
