//! The soak's forwarded load: connections that each send a trace-segment report
//! (`TraceSegmentReportService/collect`, a client stream of a few segments) every
//! `--stream-every`, as agents do through a gateway, to skyconf in gateway mode, which forwards
//! them to the OAP stand-in. Every call must end OK: the stand-in answers every call, so any other
//! status is a failure (one that makes a Java agent drop its channel is counted apart).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};

use super::{CHANNEL_DROPPING, Counts, Failures};
use crate::raw::Caller;
use crate::{Target, connect_channel};

/// The path the streams call.
const TRACE_COLLECT: &str = "/skywalking.v3.TraceSegmentReportService/collect";

/// One segment-like message: a few length-delimited string fields (trace id, segment id,
/// service, instance) and padding to a typical segment's size. The gateway forwards bytes and the
/// stand-in does not parse them.
fn segment(i: usize) -> Bytes {
    let mut out = BytesMut::new();
    for (field, text) in [
        (1u8, format!("trace-{i}")),
        (2, format!("segment-{i}")),
        (5, "soak-svc-1".to_owned()),
        (6, "soak-stream".to_owned()),
    ] {
        out.put_u8(field << 3 | 2);
        out.put_u8(text.len() as u8);
        out.put_slice(text.as_bytes());
    }
    let padding = [b'x'; 96];
    out.put_u8(7 << 3 | 2);
    out.put_u8(padding.len() as u8);
    out.put_slice(&padding);
    out.freeze()
}

/// Runs `clients` stream callers, each on a connection of its own, until `end`.
pub(super) async fn run(
    target: Target,
    clients: usize,
    every: Duration,
    messages: usize,
    end: Instant,
    failures: Arc<Failures>,
    counts: Arc<Counts>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let body: Vec<Bytes> = (0..messages.max(1)).map(segment).collect();
    for i in 0..clients {
        let channel = match connect_channel(&target, 100_000 + i).await {
            Ok(channel) => channel,
            Err(error) => {
                failures.record("stream_cannot_connect", || format!("{error:#}"));
                continue;
            }
        };
        let mut caller = match Caller::new(channel, TRACE_COLLECT, body.clone()) {
            Ok(caller) => caller,
            Err(error) => {
                failures.record("stream_cannot_connect", || format!("{error:#}"));
                continue;
            }
        };
        let (failures, counts) = (Arc::clone(&failures), Arc::clone(&counts));
        tasks.spawn(async move {
            let mut at = Instant::now() + every.mul_f64((i as f64 * 0.618_034).fract());
            while at < end {
                tokio::time::sleep_until(at.into()).await;
                at += every;
                match caller.call_bytes().await {
                    Ok(_) => counts.add("stream_calls_ok"),
                    Err(status) if CHANNEL_DROPPING.contains(&status.code()) => {
                        failures.record("stream_channel_dropping_status", || status.to_string());
                    }
                    Err(status) => failures.record("stream_call_failed", || status.to_string()),
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}
