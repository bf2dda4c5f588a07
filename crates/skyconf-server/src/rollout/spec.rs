//! What a rollout is asked to do, and the bounds of every part a client chooses: the waves
//! ([`WaveSpec`], [`check_waves`]), the gates between them ([`Gates`], [`Gates::check`]), how a
//! passed wave moves on ([`Advance`]), and who asks and why ([`check_attribution`]). Each bound is
//! a constant here (findings N7 and N12), so the record built from a request
//! ([`super::plan::Rollout`]) never holds a size or a gate value outside them.

use serde::{Deserialize, Serialize};
use skyconf_core::targeting::{Share, ShareError};

use super::prometheus::PrometheusGate;

/// The most waves a rollout has.
pub const MAX_WAVES: usize = 20;
/// The most instances a count wave adds, per changed service.
pub const MAX_WAVE_INSTANCES: usize = 100_000;
/// The longest `author`, in bytes (as for configuration writes).
pub const MAX_AUTHOR_BYTES: usize = 256;
/// The longest `message`, in bytes (as for configuration writes).
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest gate value, in seconds: a day.
pub const MAX_GATE_S: u64 = 86_400;
/// The longest Prometheus URL, in bytes.
pub const MAX_PROMETHEUS_URL_BYTES: usize = 2048;
/// The longest Prometheus query, in bytes.
pub const MAX_PROMETHEUS_QUERY_BYTES: usize = 8192;

/// `seconds` in milliseconds, saturating (gate values are bounded anyway).
pub fn ms(seconds: u64) -> u64 {
    seconds.saturating_mul(1000)
}

/// Reads a wave's share: a number of percent with at most two decimals (`10%`, `0.5%`, `100`),
/// more than 0 % and at most 100 %, as a targeting group's share is read ([`Share::read`]:
/// nothing rounded into or out of range, `-0%` no number of percent), and never 0 %.
pub fn parse_share(text: &str) -> Result<Share, String> {
    let share = Share::read(text).map_err(|error| match error {
        ShareError::NotAShare => {
            format!("`{text}` is not a share such as `10%` (a number of percent, at most two decimals)")
        }
        ShareError::OverWhole => format!("`{text}` is more than 100%"),
    })?;
    if share.basis_points() == 0 {
        return Err(format!("`{text}` reaches nobody: a share is more than 0%"));
    }
    Ok(share)
}

/// One wave: a share of every changed service's instances, or a count of instances of each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaveSpec {
    /// A share of each changed service's instances, more than 0 % and at most 100 %, with at most
    /// two decimals: `"10%"`, `"0.5%"` (`"100%"`: every instance). Shares only grow from wave to
    /// wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "10%")]
    pub share: Option<String>,
    /// This many more instances of each changed service (1 to 100,000), picked when the wave
    /// starts among the identified instances live then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100_000)]
    pub instances: Option<usize>,
}

impl WaveSpec {
    /// The wave's share, if it is one.
    pub fn share(&self) -> Option<Share> {
        self.share.as_deref().and_then(|text| parse_share(text).ok())
    }

    /// What the wave serves, in words: `10% of the instances`, `1 more instance(s) of each service`.
    pub(super) fn describe(&self) -> String {
        match (self.share(), self.instances) {
            (Some(share), _) => format!("{share} of the instances"),
            (None, Some(count)) => format!("{count} more instance(s) of each service"),
            (None, None) => "nobody".to_owned(),
        }
    }
}

/// Why `waves` cannot be run, if so: at least one and at most [`MAX_WAVES`]; each a share within
/// (0 %, 100 %] or a count within 1 … [`MAX_WAVE_INSTANCES`]; shares strictly growing; nothing
/// after a wave of 100 %.
pub fn check_waves(waves: &[WaveSpec]) -> Result<(), String> {
    if waves.is_empty() {
        return Err("a rollout needs at least one wave".into());
    }
    if waves.len() > MAX_WAVES {
        return Err(format!("a rollout has at most {MAX_WAVES} waves (this one has {})", waves.len()));
    }
    let mut widest: Option<(usize, Share)> = None;
    for (i, wave) in waves.iter().enumerate() {
        let at = |why: String| format!("wave {}: {why}", i + 1);
        if let Some((before, Share::ALL)) = widest {
            return Err(at(format!("wave {before} already reaches 100% of the instances: nobody is left to reach")));
        }
        match (&wave.share, wave.instances) {
            (Some(text), None) => {
                let share = parse_share(text).map_err(at)?;
                if let Some((before, earlier)) = widest
                    && share <= earlier
                {
                    return Err(at(format!(
                        "`{text}` does not grow on wave {before}'s {earlier}: each share is larger than the ones before"
                    )));
                }
                widest = Some((i + 1, share));
            }
            (None, Some(0)) => return Err(at("a wave of 0 instances reaches nobody".into())),
            (None, Some(count)) if count > MAX_WAVE_INSTANCES => {
                return Err(at(format!("{count} instances: a wave adds at most {MAX_WAVE_INSTANCES}")));
            }
            (None, Some(_)) => {}
            _ => return Err(at("a wave has either a `share` (\"10%\") or a number of `instances`".into())),
        }
    }
    Ok(())
}

/// Why `author` or `message` cannot be recorded, if so: the bounds of configuration writes.
pub fn check_attribution(author: Option<&str>, message: Option<&str>) -> Result<(), String> {
    if let Some(author) = author
        && (author.len() > MAX_AUTHOR_BYTES || author.chars().any(char::is_control))
    {
        return Err(format!("the author must be at most {MAX_AUTHOR_BYTES} bytes without control characters"));
    }
    if let Some(message) = message
        && (message.len() > MAX_MESSAGE_BYTES || message.chars().any(|c| c.is_control() && c != '\n' && c != '\t'))
    {
        return Err(format!(
            "the message must be at most {MAX_MESSAGE_BYTES} bytes without control characters other than newlines and tabs"
        ));
    }
    Ok(())
}

/// When a wave passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Gates {
    /// Every reached agent holds its new digest within this many seconds of being seen without
    /// it (1 to 86,400).
    #[schema(minimum = 1, maximum = 86_400)]
    pub apply_within_s: u64,
    /// Then the wave bakes this long before it passes (0 to 86,400; 0: it passes once applied).
    #[schema(minimum = 0, maximum = 86_400)]
    pub bake_s: u64,
    /// A reached agent with no live row for this long has disappeared (1 to 86,400; agents poll
    /// every 20 s, and a held poll counts as live).
    #[schema(minimum = 1, maximum = 86_400)]
    pub lost_after_s: u64,
    /// A Prometheus query whose every sample must stay at or under a threshold during the bake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGate>,
}

impl Default for Gates {
    fn default() -> Self {
        Self { apply_within_s: 60, bake_s: 60, lost_after_s: 45, prometheus: None }
    }
}

impl Gates {
    /// Why the gates cannot be run, if so: `apply_within_s` and `lost_after_s` within 1 …
    /// [`MAX_GATE_S`], `bake_s` within 0 … [`MAX_GATE_S`]; a Prometheus gate with a URL and a
    /// query within their bounds and a finite threshold.
    pub fn check(&self) -> Result<(), String> {
        for (name, value, least) in [
            ("apply_within_s", self.apply_within_s, 1),
            ("bake_s", self.bake_s, 0),
            ("lost_after_s", self.lost_after_s, 1),
        ] {
            if !(least..=MAX_GATE_S).contains(&value) {
                return Err(format!(
                    "gates.{name} is {value}: it must be from {least} to {MAX_GATE_S} seconds (a day)"
                ));
            }
        }
        if let Some(gate) = &self.prometheus {
            if gate.url.is_empty() || gate.query.is_empty() || !gate.max.is_finite() {
                return Err("the Prometheus gate needs a url, a query and a finite max".into());
            }
            if gate.url.len() > MAX_PROMETHEUS_URL_BYTES || gate.query.len() > MAX_PROMETHEUS_QUERY_BYTES {
                return Err(format!(
                    "the Prometheus gate's url is at most {MAX_PROMETHEUS_URL_BYTES} bytes and its query at most {MAX_PROMETHEUS_QUERY_BYTES}"
                ));
            }
        }
        Ok(())
    }
}

/// Whether passed waves move on by themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Advance {
    /// The next wave starts when one passes.
    #[default]
    Auto,
    /// A passed wave waits for a promote.
    Manual,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(text: &str) -> WaveSpec {
        WaveSpec { share: Some(text.into()), instances: None }
    }

    fn count(n: usize) -> WaveSpec {
        WaveSpec { share: None, instances: Some(n) }
    }

    /// Finding N3: shares within (0 %, 100 %], nothing rounded into range, waves that only grow.
    #[test]
    fn waves_are_checked() {
        let check = |waves: &[WaveSpec]| check_waves(waves).map_err(|e| e.to_string());
        assert!(check(&[share("10%")]).is_ok());
        assert!(check(&[count(1), share("0.01%"), count(2), share("12.5 %"), share("100")]).is_ok());
        for (text, said) in [
            ("0%", "reaches nobody"),
            ("0.00%", "reaches nobody"),
            ("-0%", "not a share"),
            ("0.001%", "not a share"),
            ("100.004%", "not a share"),
            ("100.01%", "more than 100%"),
            ("110%", "more than 100%"),
            ("1e2%", "not a share"),
            ("NaN%", "not a share"),
            (".5%", "not a share"),
            ("", "not a share"),
        ] {
            let error = check(&[share(text)]).unwrap_err();
            assert!(error.starts_with("wave 1: ") && error.contains(said), "{text}: {error}");
        }
        assert!(
            check(&[share("50%"), share("10%")]).unwrap_err().contains("wave 2: `10%` does not grow on wave 1's 50%")
        );
        assert!(check(&[share("50%"), share("50.00%")]).unwrap_err().contains("does not grow"));
        assert!(check(&[share("100%"), count(1)]).unwrap_err().contains("nobody is left to reach"));
        assert!(check(&[count(0)]).unwrap_err().contains("reaches nobody"));
        assert!(check(&[count(MAX_WAVE_INSTANCES + 1)]).is_err());
        assert!(check(&[]).unwrap_err().contains("at least one wave"));
        let many: Vec<WaveSpec> = (1..=21).map(count).collect();
        assert!(check(&many).unwrap_err().contains("at most 20 waves"));
        assert!(check(&[WaveSpec { share: Some("1%".into()), instances: Some(1) }]).is_err());
        assert!(check(&[WaveSpec { share: None, instances: None }]).is_err());
        assert_eq!(parse_share("12.5%"), Ok(Share::from_basis_points(1250)));
    }

    /// Finding N12: every gate value within its bound, so no arithmetic on it can wrap.
    #[test]
    fn gate_values_are_bounded() {
        let gates =
            |apply, bake, lost| Gates { apply_within_s: apply, bake_s: bake, lost_after_s: lost, prometheus: None };
        assert!(gates(1, 0, 1).check().is_ok());
        assert!(gates(MAX_GATE_S, MAX_GATE_S, MAX_GATE_S).check().is_ok());
        for (bad, name) in [
            (gates(60, 18_446_744_073_709_552, 45), "bake_s"),
            (gates(60, MAX_GATE_S + 1, 45), "bake_s"),
            (gates(60, 60, 0), "lost_after_s"),
            (gates(60, 60, u64::MAX), "lost_after_s"),
            (gates(0, 60, 45), "apply_within_s"),
        ] {
            assert!(bad.check().unwrap_err().contains(&format!("gates.{name}")), "{bad:?}");
        }
        let mut prometheus = gates(60, 60, 45);
        prometheus.prometheus = Some(PrometheusGate::new("http://p", "q".repeat(MAX_PROMETHEUS_QUERY_BYTES + 1), 1.0));
        assert!(prometheus.check().is_err());
        assert_eq!(ms(u64::MAX), u64::MAX, "saturates");
    }
}
