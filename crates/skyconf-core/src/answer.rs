//! What a poll is answered with: the per-service answer table and the reply rule.
//!
//! [`Answers`] holds, for one accepted table, every service's digest and pre-encoded command plus
//! the EMPTY answer the OAP gives services it does not know. [`reply`] is the OAP handler's rule
//! (behaviour reference §5.1): look the service up, and send its command unless the agent's uuid
//! already equals the digest (always send it when the digest check is disabled). Before any table
//! is known the answers are *waiting* and every poll is answered "no change", so an agent keeps
//! what it has rather than being reset by an EMPTY answer.
//!
//! The server and the agent library's in-memory fake both answer through [`reply`], so the two
//! cannot disagree about which bytes a request gets.

use std::collections::HashMap;

use bytes::Bytes;
use skyconf_proto::v3::ConfigurationSyncRequest;

use crate::codec::PreEncoded;
use crate::digest::{Digest, EMPTY_DIGEST};
use crate::table::AgentConfigurations;
use crate::targeting::{Group, InstanceRef, Targeting};

/// The largest answer a service may have: gRPC's default maximum message size, 4 MiB, which
/// every stock agent keeps (the Go agent and grpcio by default; the Java agent allows 50 MiB).
/// An agent refuses a larger answer with RESOURCE_EXHAUSTED and drops its channel on every
/// poll, so the reader refuses a document that would give a service one.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The size in bytes of the answer carrying `entries` under `digest`, without encoding it.
pub fn answer_len(digest: &Digest, entries: &[(String, String)]) -> usize {
    crate::codec::encoded_len(digest, entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// What a service (or an unknown service) is answered with.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The digest agents echo once they hold this configuration.
    pub digest: Digest,
    /// The whole `Commands` message, serial number to be patched in.
    pub encoded: PreEncoded,
}

impl Answer {
    /// The answer carrying `entries` under `digest`.
    pub fn new(digest: Digest, entries: &[(String, String)]) -> Self {
        let encoded = PreEncoded::new(&digest, entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Self { digest, encoded }
    }

    /// The EMPTY answer: no settings, the EMPTY digest.
    pub fn empty() -> Self {
        Self::new(Digest::empty(), &[])
    }
}

/// A map looked up by the service name of every poll: hashed with foldhash, not SipHash (a
/// SipHash of the name was about 1 % of a poll's instructions). Its keys are the document's
/// services, never a client's: a poll only looks a name up, so no client can lengthen a probe
/// sequence, and the seed is the process's own.
type ServiceMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// Every service's answer for one table, encoded once, and its targeting groups' answers.
#[derive(Debug, Clone)]
pub struct Answers {
    by_service: ServiceMap<Answer>,
    /// The answer of each group of each targeted service, in the groups' order.
    groups: ServiceMap<Vec<Answer>>,
    targeting: Targeting,
    /// What services without an entry get: the global settings, else the EMPTY answer.
    empty: Answer,
    ready: bool,
}

/// The answer an instance gets, and the group it gets it as (`None`: the service's own).
#[derive(Debug, Clone, Copy)]
pub struct Chosen<'a> {
    /// The answer.
    pub answer: &'a Answer,
    /// The targeting group that decided it.
    pub group: Option<&'a Group>,
}

impl Answers {
    /// The answers for `table`.
    pub fn new(table: &AgentConfigurations) -> Self {
        let by_service =
            table.services().map(|s| (s.name().to_owned(), Answer::new(s.digest().clone(), s.entries()))).collect();
        Self {
            by_service,
            groups: group_answers(table),
            targeting: table.targeting().clone(),
            empty: default_answer(table),
            ready: true,
        }
    }

    /// The answers for `table`, taking from `previous` (the answers for the table `before`) the
    /// answer of every service whose configuration is the same in both: a reload that changed
    /// one service encodes one answer. The result is the one [`Self::new`] gives.
    pub fn updated(table: &AgentConfigurations, before: &AgentConfigurations, previous: &Self) -> Self {
        if !previous.ready {
            return Self::new(table);
        }
        let by_service = table
            .services()
            .map(|s| {
                let kept = before
                    .get(s.name())
                    .filter(|old| *old == s)
                    .and_then(|_| previous.by_service.get(s.name()))
                    .cloned();
                let answer = kept.unwrap_or_else(|| Answer::new(s.digest().clone(), s.entries()));
                (s.name().to_owned(), answer)
            })
            .collect();
        Self {
            by_service,
            groups: group_answers(table),
            targeting: table.targeting().clone(),
            empty: match table.global() {
                Some(global) if global.digest() == &previous.empty.digest => previous.empty.clone(),
                _ => default_answer(table),
            },
            ready: true,
        }
    }

    /// No table known yet: every poll is answered "no change".
    pub fn waiting() -> Self {
        Self {
            by_service: ServiceMap::default(),
            groups: ServiceMap::default(),
            targeting: Targeting::default(),
            empty: Answer::empty(),
            ready: false,
        }
    }

    /// Whether instances of `service` may get different answers (it has targeting groups).
    pub fn is_targeted(&self, service: &str) -> bool {
        !self.groups.is_empty() && self.groups.contains_key(service)
    }

    /// The answer for `instance` of `service`: its first matching group's, else the service's
    /// own (also for a poller whose instance is unknown).
    pub fn choose(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> Chosen<'_> {
        let grouped = instance
            .filter(|_| self.is_targeted(service))
            .and_then(|instance| self.targeting.group_of(service, instance))
            .and_then(|(index, group)| Some((self.groups.get(service)?.get(index)?, group)));
        match grouped {
            Some((answer, group)) => Chosen { answer, group: Some(group) },
            None => Chosen { answer: self.answer(service), group: None },
        }
    }

    /// The index of the first group of `service` that `instance` matches (`None`: the service's
    /// own settings): the decision [`Self::choose`] makes, to be remembered and given back to
    /// [`Self::chosen`].
    pub fn group_index(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> Option<usize> {
        let instance = instance.filter(|_| self.is_targeted(service))?;
        self.targeting.group_of(service, instance).map(|(index, _)| index)
    }

    /// The answer of group `group` of `service` ([`Self::group_index`]), or the service's own for
    /// `None` (or a group it no longer has).
    pub fn chosen(&self, service: &str, group: Option<usize>) -> Chosen<'_> {
        let grouped = group.and_then(|index| {
            let answer = self.groups.get(service)?.get(index)?;
            Some((answer, self.targeting.groups(service).get(index)?))
        });
        match grouped {
            Some((answer, group)) => Chosen { answer, group: Some(group) },
            None => Chosen { answer: self.answer(service), group: None },
        }
    }

    /// False while [`Self::waiting`].
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether `service` has an entry of its own in the table these answers are for (a service
    /// answered with the global settings or the EMPTY answer has none).
    pub fn has_entry(&self, service: &str) -> bool {
        self.by_service.contains_key(service)
    }

    /// The answer for `service`: its own, or for a service without an entry the global settings
    /// (the EMPTY answer the OAP gives unknown services when the document has none).
    pub fn answer(&self, service: &str) -> &Answer {
        self.by_service.get(service).unwrap_or(&self.empty)
    }
}

/// How the reply rule is configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplyOptions {
    /// Always send the full command, as the OAP's `disableMessageDigest` does.
    pub disable_message_digest: bool,
}

/// What kind of answer a poll got (the server counts them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The service's command: its digest differs from the one the agent echoed.
    Changed,
    /// An empty `Commands`: the agent echoed the current digest.
    Unchanged,
    /// The EMPTY command: the service has no entry (or the table was deleted).
    Empty,
    /// No table known yet: "no change", whatever was asked.
    NotReady,
}

impl FetchOutcome {
    /// Every outcome, in a fixed order.
    pub const ALL: [Self; 4] = [Self::Changed, Self::Unchanged, Self::Empty, Self::NotReady];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Unchanged => "unchanged",
            Self::Empty => "empty",
            Self::NotReady => "not_ready",
        }
    }
}

/// The reply to one poll.
#[derive(Debug, Clone, Copy)]
pub enum Reply<'a> {
    /// No table known yet: an empty `Commands`.
    NotReady,
    /// The agent holds the current answer: an empty `Commands`.
    Unchanged(&'a Answer),
    /// The agent is to receive this answer.
    Send(&'a Answer),
}

impl<'a> Reply<'a> {
    /// The answer that is current for the polled service, once a table is known (whether or not
    /// it is sent): what the agent holds once it applied it.
    pub fn current(&self) -> Option<&'a Answer> {
        match self {
            Self::NotReady => None,
            Self::Unchanged(answer) | Self::Send(answer) => Some(answer),
        }
    }

    /// What kind of reply this is.
    pub fn outcome(&self) -> FetchOutcome {
        match self {
            Self::NotReady => FetchOutcome::NotReady,
            Self::Unchanged(_) => FetchOutcome::Unchanged,
            Self::Send(answer) if answer.digest == *EMPTY_DIGEST => FetchOutcome::Empty,
            Self::Send(_) => FetchOutcome::Changed,
        }
    }

    /// The encoded `Commands`: the command with a fresh serial number, or nothing (an empty
    /// `Commands` encodes to zero bytes).
    pub fn encode(&self) -> Bytes {
        match self {
            Self::Send(answer) => answer.encoded.with_fresh_serial(),
            Self::NotReady | Self::Unchanged(_) => Bytes::new(),
        }
    }
}

/// What a service without an entry is answered: the global settings, else the EMPTY answer.
fn default_answer(table: &AgentConfigurations) -> Answer {
    table.global().map_or_else(Answer::empty, |global| Answer::new(global.digest().clone(), global.entries()))
}

/// Each targeting group's answer: the service's served entries (its own over the global ones)
/// patched with the group's settings.
fn group_answers(table: &AgentConfigurations) -> ServiceMap<Vec<Answer>> {
    table
        .targeting()
        .services()
        .map(|(service, groups)| {
            let served = table.served(service);
            let base = served.as_ref().map_or(&[][..], |s| s.entries());
            let answers = groups
                .iter()
                .map(|group| {
                    let entries = group.entries(base);
                    let digest = Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    Answer::new(digest, &entries)
                })
                .collect();
            (service.to_owned(), answers)
        })
        .collect()
}

/// The OAP handler's rule: the polled service's answer unless the agent already holds it.
pub fn reply<'a>(answers: &'a Answers, request: &ConfigurationSyncRequest, options: ReplyOptions) -> Reply<'a> {
    reply_to(answers, request, None, options)
}

/// [`reply`] for a poller known to be `instance`: the answer of its targeting group, if any.
pub fn reply_to<'a>(
    answers: &'a Answers,
    request: &ConfigurationSyncRequest,
    instance: Option<&InstanceRef<'_>>,
    options: ReplyOptions,
) -> Reply<'a> {
    reply_with(answers, answers.choose(&request.service, instance).answer, request, options)
}

/// [`reply`] with the answer already chosen from `answers` (a poller's remembered targeting
/// group, [`Answers::chosen`]).
pub fn reply_with<'a>(
    answers: &'a Answers,
    answer: &'a Answer,
    request: &ConfigurationSyncRequest,
    options: ReplyOptions,
) -> Reply<'a> {
    if !answers.ready {
        return Reply::NotReady;
    }
    if !options.disable_message_digest && answer.digest == *request.uuid.as_str() {
        Reply::Unchanged(answer)
    } else {
        Reply::Send(answer)
    }
}

#[cfg(all(test, feature = "reader"))]
mod tests {
    use prost::Message;
    use skyconf_proto::v3::Commands;

    use super::*;
    use crate::codec::DiscoveryCommand;

    const V4: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n    agent.ignore_suffix: .txt,.log\n    agent.trace.ignore_path: /eureka/**,/actuator/**\n    plugin.jdbc.trace_sql_parameters: true\n";
    const V4_DIGEST: &str = "3ad183c6f10d83a93105e869ea7ed8ad1373d4fbe13b9c4c0efc4a42ee9ac2f9952c1b9e39ccdc76b465fe1d9b960d4bdeb68102103a91931bb3e74c68772838";

    fn ask(answers: &Answers, service: &str, uuid: &str, disable: bool) -> (Option<DiscoveryCommand>, FetchOutcome) {
        let request = ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() };
        let reply = reply(answers, &request, ReplyOptions { disable_message_digest: disable });
        let commands = Commands::decode(reply.encode()).unwrap();
        assert!(commands.commands.len() <= 1, "one command at most");
        (commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap()), reply.outcome())
    }

    fn v4() -> Answers {
        Answers::new(&crate::read(V4).unwrap())
    }

    #[test]
    fn updated_answers_are_the_answers_of_the_new_table() {
        let before =
            crate::read("configurations:\n  a: {k: v}\n  b: {k: w}\n  c: {'1': x, 1: y}\n  d: {k: v}\n").unwrap();
        let previous = Answers::new(&before);
        // `b` changes, `c` keeps its digest but not its entries' order, `d` goes, `e` comes.
        let table =
            crate::read("configurations:\n  e: {k: v}\n  a: {k: v}\n  b: {k: z}\n  c: {1: y, '1': x}\n").unwrap();
        for updated in
            [Answers::updated(&table, &before, &previous), Answers::updated(&table, &before, &Answers::waiting())]
        {
            let fresh = Answers::new(&table);
            assert!(updated.is_ready());
            for service in ["a", "b", "c", "d", "e", "unknown"] {
                let (u, f) = (updated.answer(service), fresh.answer(service));
                assert_eq!(u.digest, f.digest, "{service}");
                let serial = uuid::Uuid::nil();
                assert_eq!(u.encoded.with_serial(serial), f.encoded.with_serial(serial), "{service}");
            }
        }
        let updated = Answers::updated(&table, &before, &previous);
        assert_eq!(updated.by_service.len(), 4);
    }

    // The OAP handler's acceptance cases (behaviour reference §5.1, item 3).
    #[test]
    fn unknown_service_gets_the_empty_command_until_it_echoes_it() {
        let (cmd, outcome) = ask(&v4(), "other", "", false);
        let cmd = cmd.unwrap();
        assert_eq!((cmd.uuid.as_deref(), outcome), (Some(EMPTY_DIGEST), FetchOutcome::Empty));
        assert!(cmd.config.is_empty());
        assert!(cmd.serial_number.is_some());
        assert_eq!(ask(&v4(), "other", EMPTY_DIGEST, false), (None, FetchOutcome::Unchanged));
    }

    #[test]
    fn known_service_full_then_empty_then_full_on_stale_uuid() {
        let answers = v4();
        let (cmd, outcome) = ask(&answers, "svc", "", false);
        let cmd = cmd.unwrap();
        assert_eq!((cmd.uuid.as_deref(), outcome), (Some(V4_DIGEST), FetchOutcome::Changed));
        assert_eq!(cmd.config.len(), 5);
        assert_eq!(ask(&answers, "svc", V4_DIGEST, false), (None, FetchOutcome::Unchanged));
        assert!(ask(&answers, "svc", "stale", false).0.is_some());
        assert!(ask(&answers, "SVC", V4_DIGEST, false).0.unwrap().config.is_empty(), "lookup is case-sensitive");
    }

    #[test]
    fn disabled_digest_always_answers_with_a_fresh_serial() {
        let answers = v4();
        let a = ask(&answers, "svc", V4_DIGEST, true).0.unwrap();
        let b = ask(&answers, "svc", V4_DIGEST, true).0.unwrap();
        assert_ne!(a.serial_number, b.serial_number);
    }

    #[test]
    fn waiting_answers_no_change_and_names_no_current_answer() {
        let answers = Answers::waiting();
        assert_eq!(ask(&answers, "svc", "", false), (None, FetchOutcome::NotReady));
        let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
        assert!(reply(&answers, &request, ReplyOptions::default()).current().is_none());
    }

    #[test]
    fn the_current_answer_is_named_whether_or_not_it_is_sent() {
        let answers = v4();
        for uuid in ["", V4_DIGEST] {
            let request = ConfigurationSyncRequest { service: "svc".into(), uuid: uuid.into() };
            let reply = reply(&answers, &request, ReplyOptions::default());
            assert_eq!(reply.current().unwrap().digest, *V4_DIGEST);
        }
    }
}
