//! Per-instance targeting: settings for some of a service's instances, on top of the service's own.
//!
//! A document may carry, beside `configurations:`, a top-level `targeting:` section that the OAP
//! ignores (it reads only `configurations`):
//!
//! ```yaml
//! targeting:
//!   checkout:                      # a service
//!     - group: canary              # a name, unique within the service
//!       instances: [checkout-7*]   # instance names (`*` matches any text)
//!       properties:                # reported instance properties: each key must match
//!         zone: eu-west-1a         #   one of its values (`ipv4` may be reported several times:
//!         ipv4: ["10.0.1.*"]       #   any of them may match)
//!       share: 10%                 # a stable share of the instances, by a hash of their name
//!       settings:                  # what these instances get on top of the service's settings
//!         agent.sample_n_per_3_secs: 100
//!         agent.ignore_suffix: ~   # null removes a setting
//! ```
//!
//! Every condition a group states must hold (an empty group is refused); an instance gets the
//! first group of its service that it matches, in document order, else the service's own
//! settings. A group's instances are served the service's settings with the group's applied as a
//! merge patch ([`crate::writer::merge_entries`]), under the digest of exactly that, so a Java
//! agent echoes a uuid consistent with what it holds.
//!
//! An instance is known by what its agent's `ManagementService` calls said on the connection it
//! polls on (instance name, properties, `agent-version`); a poll from a connection that never
//! said is served the service's own settings.
//!
//! [`share_bucket`] is also what staged rollouts use to pick their waves, so a wave of 50 %
//! holds every instance a wave of 10 % held.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use sha2::{Digest as _, Sha512};

/// Basis points in a whole: shares are kept in hundredths of a percent.
pub const WHOLE: u32 = 10_000;

/// What is known of one instance: its name and what it reported.
#[derive(Debug, Clone, Copy)]
pub struct InstanceRef<'a> {
    /// The instance name its agent reports.
    pub name: &'a str,
    /// Its reported properties, in the order sent (a key may repeat).
    pub properties: &'a [(Box<str>, Box<str>)],
    /// The `agent-version` its calls carry.
    pub agent_version: Option<&'a str>,
}

/// A name or value to match: exact text, where `*` stands for any text (none included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// The pattern written as `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        glob(&self.0, text)
    }
}

/// `*`-only glob matching in time linear in the pattern and the text: the pattern is literal
/// runs between stars; the first must start the text and the last end it, and each one between
/// is found at its leftmost place after the previous one (the leftmost place leaves the most
/// text for the rest, so it is never wrong to take it). `str::find` searches in linear time
/// (two-way), so no pattern, however its stars are placed, costs more than a pass over both.
fn glob(pattern: &str, text: &str) -> bool {
    let mut runs = pattern.split('*');
    // `split` yields at least one item; without a star, the pattern is the whole text.
    let first = runs.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let Some(last) = runs.next_back() else { return rest.is_empty() };
    for run in runs {
        match rest.find(run) {
            Some(at) => rest = &rest[at + run.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Why a text is no [`Share`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareError {
    /// Not digits with at most two decimals, and an optional `%`.
    NotAShare,
    /// More than 100 %.
    OverWhole,
}

/// A stable share of a service's instances, in basis points (hundredths of a percent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Share(u32);

impl Share {
    /// Every instance.
    pub const ALL: Self = Self(WHOLE);

    /// `basis_points` of [`WHOLE`] (capped at the whole).
    pub fn from_basis_points(basis_points: u32) -> Self {
        Self(basis_points.min(WHOLE))
    }

    /// A percentage such as `10`, `0.5` or `100` (at most two decimals), `None` if out of range.
    pub fn from_percent(percent: f64) -> Option<Self> {
        let basis_points = (percent * 100.0).round();
        ((0.0..=f64::from(WHOLE)).contains(&basis_points) && percent.is_finite()).then_some(Self(basis_points as u32))
    }

    /// Reads `10%`, `10 %`, `10`, `0.5%`: digits with at most two decimals, from 0 to 100 %.
    /// Nothing is rounded into range (`100.004%`, `0.001%`), and a sign or an exponent (`-0%`,
    /// `1e2%`) is no share.
    pub fn parse(text: &str) -> Option<Self> {
        Self::read(text).ok()
    }

    /// [`Self::parse`], saying why a text is no share.
    pub fn read(text: &str) -> Result<Self, ShareError> {
        let number = text.trim().strip_suffix('%').unwrap_or(text.trim()).trim();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || (number.contains('.') && !digits(fraction)) || fraction.len() > 2 {
            return Err(ShareError::NotAShare);
        }
        let whole = whole.trim_start_matches('0');
        if whole.len() > 3 {
            return Err(ShareError::OverWhole);
        }
        let whole: u32 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| ShareError::NotAShare)? };
        let hundredths: u32 = format!("{fraction:0<2}").parse().map_err(|_| ShareError::NotAShare)?;
        let basis_points = whole * 100 + hundredths;
        if basis_points > WHOLE {
            return Err(ShareError::OverWhole);
        }
        Ok(Self(basis_points))
    }

    /// Basis points.
    pub fn basis_points(self) -> u32 {
        self.0
    }

    /// Whether the instance named `instance` of `service` is within the share.
    pub fn holds(self, service: &str, instance: &str) -> bool {
        share_bucket(service, instance) < self.0
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(100) {
            write!(f, "{}%", self.0 / 100)
        } else {
            write!(f, "{}.{:02}%", self.0 / 100, self.0 % 100)
        }
    }
}

/// The instance's place among a service's instances, in `0..WHOLE`: the first eight bytes of
/// SHA-512 over `service`, a NUL and the instance name, modulo [`WHOLE`]. Every replica and every
/// release computes the same place, so a share of 10 % is always the same instances and a share of
/// 50 % holds them all.
pub fn share_bucket(service: &str, instance: &str) -> u32 {
    let mut hasher = Sha512::new();
    hasher.update(service.as_bytes());
    hasher.update([0]);
    hasher.update(instance.as_bytes());
    let hash = hasher.finalize();
    let head = u64::from_be_bytes(hash[..8].try_into().expect("eight bytes"));
    (head % u64::from(WHOLE)) as u32
}

/// Which instances a group is for: every condition stated must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Instance names, any of which may match.
    pub instances: Vec<Pattern>,
    /// Reported properties: for each key, one of the instance's values of it matches one of these.
    pub properties: Vec<(String, Vec<Pattern>)>,
    /// Agent versions (the `agent-version` of its calls), any of which may match.
    pub agent_versions: Vec<Pattern>,
    /// A stable share of the service's instances.
    pub share: Option<Share>,
}

impl Selector {
    /// No condition at all (refused in a document: it would be every instance).
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
            && self.properties.is_empty()
            && self.agent_versions.is_empty()
            && self.share.is_none()
    }

    /// Whether `instance` of `service` is selected.
    pub fn matches(&self, service: &str, instance: &InstanceRef<'_>) -> bool {
        self.mismatch(service, instance).is_none()
    }

    /// Why `instance` is not selected (`None`: it is), in words for operators.
    pub fn mismatch(&self, service: &str, instance: &InstanceRef<'_>) -> Option<String> {
        if !self.instances.is_empty() && !self.instances.iter().any(|p| p.matches(instance.name)) {
            return Some(format!("instance name `{}` is not one of {}", instance.name, listed(&self.instances)));
        }
        for (key, patterns) in &self.properties {
            let mut values = instance.properties.iter().filter(|(k, _)| &**k == key).map(|(_, v)| &**v).peekable();
            if values.peek().is_none() {
                return Some(format!("it did not report `{key}`"));
            }
            if !values.any(|v| patterns.iter().any(|p| p.matches(v))) {
                return Some(format!("its `{key}` is not one of {}", listed(patterns)));
            }
        }
        if !self.agent_versions.is_empty() {
            let version = instance.agent_version.unwrap_or("");
            if !self.agent_versions.iter().any(|p| p.matches(version)) {
                return Some(format!("agent version `{version}` is not one of {}", listed(&self.agent_versions)));
            }
        }
        if let Some(share) = self.share
            && !share.holds(service, instance.name)
        {
            return Some(format!("it is outside the {share} share"));
        }
        None
    }

    /// Why a matching instance is selected, in words for operators.
    pub fn reason(&self) -> String {
        let mut parts = Vec::new();
        if !self.instances.is_empty() {
            parts.push(format!("instance name in {}", listed(&self.instances)));
        }
        for (key, patterns) in &self.properties {
            parts.push(format!("`{key}` in {}", listed(patterns)));
        }
        if !self.agent_versions.is_empty() {
            parts.push(format!("agent version in {}", listed(&self.agent_versions)));
        }
        if let Some(share) = self.share {
            parts.push(format!("within the {share} share"));
        }
        parts.join(", ")
    }
}

fn listed(patterns: &[Pattern]) -> String {
    let items: Vec<String> = patterns.iter().map(|p| format!("`{}`", p.as_str())).collect();
    format!("[{}]", items.join(", "))
}

/// One group of a service's instances and what they get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name, unique within the service.
    pub name: String,
    /// Which instances.
    pub selector: Selector,
    /// The settings applied over the service's as a merge patch: a value sets, `None` removes.
    pub settings: Vec<(String, Option<String>)>,
}

impl Group {
    /// What the group's instances are served, given the service's own entries.
    pub fn entries(&self, base: &[(String, String)]) -> Vec<(String, String)> {
        crate::writer::merge_entries(base, &self.settings)
    }
}

/// The `targeting:` section of a document: each service's groups, in document order. Cheap to
/// clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targeting {
    services: Arc<IndexMap<String, Vec<Group>>>,
}

impl Targeting {
    /// A section of these services' groups.
    pub fn new(services: IndexMap<String, Vec<Group>>) -> Self {
        Self { services: Arc::new(services) }
    }

    /// No group at all.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The groups of `service`, in order (empty when it has none).
    pub fn groups(&self, service: &str) -> &[Group] {
        self.services.get(service).map_or(&[], Vec::as_slice)
    }

    /// Services with groups and their groups, in document order.
    pub fn services(&self) -> impl Iterator<Item = (&str, &[Group])> {
        self.services.iter().map(|(name, groups)| (name.as_str(), groups.as_slice()))
    }

    /// The first group of `service` that `instance` matches.
    pub fn group_of(&self, service: &str, instance: &InstanceRef<'_>) -> Option<(usize, &Group)> {
        self.groups(service).iter().enumerate().find(|(_, g)| g.selector.matches(service, instance))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        pairs.iter().map(|(k, v)| (Box::from(*k), Box::from(*v))).collect()
    }

    /// N8: a pattern of stars between long runs against a long text is matched in linear time
    /// (the backtracking matcher took |pattern| x |text| steps: minutes for these sizes).
    #[test]
    fn a_pathological_pattern_is_matched_in_linear_time() {
        let text = "a".repeat(40_000);
        let pattern = Pattern::new(format!("*{}b", "a".repeat(20_000)));
        let started = std::time::Instant::now();
        assert!(!pattern.matches(&text));
        let pattern = Pattern::new(format!("*{}*{}", "a".repeat(10_000), "a".repeat(10_000)));
        assert!(pattern.matches(&text));
        assert!(started.elapsed() < std::time::Duration::from_millis(500), "{:?}", started.elapsed());
    }

    #[test]
    fn glob_matches_stars_anywhere() {
        assert!(Pattern::new("10.0.1.*").matches("10.0.1.17"));
        assert!(!Pattern::new("10.0.1.*").matches("10.0.2.17"));
        assert!(Pattern::new("*-canary-*").matches("checkout-canary-3"));
        assert!(Pattern::new("a*b*c").matches("abc"));
        assert!(!Pattern::new("a*b*c").matches("acb"));
        assert!(Pattern::new("exact").matches("exact"));
        assert!(!Pattern::new("exact").matches("exactly"));
        assert!(Pattern::new("*").matches(""));
    }

    #[test]
    fn shares_parse_and_nest() {
        assert_eq!(Share::parse("10%"), Some(Share::from_basis_points(1000)));
        assert_eq!(Share::parse("0.5 %"), Some(Share::from_basis_points(50)));
        assert_eq!(Share::parse("100"), Some(Share::ALL));
        assert_eq!(Share::parse("101%"), None);
        assert_eq!(Share::parse("-1"), None);
        assert_eq!(Share::parse("ten"), None);
        // Nothing rounded into range, no sign, no exponent, at most two decimals.
        for bad in ["-0%", "100.004%", "0.001%", "1e2%", "+5%", "5.%", ".5%", "5,5%", "NaN", "inf", "0100.00001"] {
            assert_eq!(Share::parse(bad), None, "{bad}");
        }
        assert_eq!(Share::parse("0%"), Some(Share::from_basis_points(0)));
        assert_eq!(Share::parse("007.50 %"), Some(Share::from_basis_points(750)));
        assert_eq!(Share::parse("100.00"), Some(Share::ALL));
        assert_eq!(Share::from_basis_points(50).to_string(), "0.50%");
        assert_eq!(Share::from_basis_points(1000).to_string(), "10%");
        // A wider share holds every instance of a narrower one, and about its share of 10,000.
        let names: Vec<String> = (0..10_000).map(|i| format!("pod-{i}")).collect();
        let ten = names.iter().filter(|n| Share::parse("10%").unwrap().holds("svc", n)).count();
        assert!((900..1100).contains(&ten), "{ten}");
        for n in &names {
            if Share::parse("10%").unwrap().holds("svc", n) {
                assert!(Share::parse("50%").unwrap().holds("svc", n));
            }
        }
        assert!(names.iter().all(|n| Share::ALL.holds("svc", n)));
        assert!(!names.iter().any(|n| Share::from_basis_points(0).holds("svc", n)));
    }

    #[test]
    fn every_condition_must_hold_and_the_mismatch_says_which() {
        let selector = Selector {
            instances: vec![Pattern::new("checkout-*")],
            properties: vec![("ipv4".into(), vec![Pattern::new("10.0.1.*")])],
            agent_versions: vec![Pattern::new("9.*")],
            share: None,
        };
        let properties = props(&[("hostname", "h1"), ("ipv4", "192.168.0.1"), ("ipv4", "10.0.1.5")]);
        let mut instance = InstanceRef { name: "checkout-1", properties: &properties, agent_version: Some("9.4.0") };
        assert!(selector.matches("checkout", &instance), "any reported ipv4 may match");
        instance.agent_version = Some("8.16.0");
        assert!(selector.mismatch("checkout", &instance).unwrap().contains("agent version `8.16.0`"));
        instance.agent_version = Some("9.4.0");
        instance.name = "cart-1";
        assert!(selector.mismatch("checkout", &instance).unwrap().contains("instance name `cart-1`"));
        let unreported = props(&[("hostname", "h1")]);
        let bare = InstanceRef { name: "checkout-1", properties: &unreported, agent_version: Some("9.4.0") };
        assert_eq!(selector.mismatch("checkout", &bare).unwrap(), "it did not report `ipv4`");
        assert!(selector.reason().contains("`ipv4` in [`10.0.1.*`]"));
    }

    #[test]
    fn the_first_matching_group_wins_and_its_settings_patch_the_services() {
        let group = |name: &str, instance: &str, settings: Vec<(&str, Option<&str>)>| Group {
            name: name.into(),
            selector: Selector { instances: vec![Pattern::new(instance)], ..Selector::default() },
            settings: settings.into_iter().map(|(k, v)| (k.to_owned(), v.map(str::to_owned))).collect(),
        };
        let targeting = Targeting::new(IndexMap::from([(
            "svc".to_owned(),
            vec![group("one", "a", vec![("k", Some("1"))]), group("all", "*", vec![("k", None), ("n", Some("x"))])],
        )]));
        let none = props(&[]);
        let a = InstanceRef { name: "a", properties: &none, agent_version: None };
        let b = InstanceRef { name: "b", properties: &none, agent_version: None };
        assert_eq!(targeting.group_of("svc", &a).unwrap().1.name, "one");
        let (index, all) = targeting.group_of("svc", &b).unwrap();
        assert_eq!((index, all.name.as_str()), (1, "all"));
        let base = vec![("k".to_owned(), "0".to_owned()), ("m".to_owned(), "y".to_owned())];
        assert_eq!(all.entries(&base), vec![("m".to_owned(), "y".to_owned()), ("n".to_owned(), "x".to_owned())]);
        assert!(targeting.group_of("other", &a).is_none());
    }
}
