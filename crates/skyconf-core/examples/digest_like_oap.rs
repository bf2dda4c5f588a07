//! Prints, for every document path read from stdin (one per line), one JSON line in the format of
//! the OAP-equivalent `DigestTool` (`../shared/bench/javaref`): `{"svc": {"uuid": ..., "config":
//! [[k, v], ...]}}`, or `{"error": "..."}` when skyconf refuses the document. Used by
//! `scripts/golden/compare.sh` to diff skyconf against the OAP's loader over a corpus.

use std::io::BufRead;

fn main() -> std::io::Result<()> {
    for path in std::io::stdin().lock().lines() {
        let path = path?;
        let text = std::fs::read_to_string(&path)?;
        let line = match skyconf_core::read(&text) {
            Err(e) => serde_json::json!({ "error": e.to_string() }),
            Ok(table) => {
                let mut out = serde_json::Map::new();
                for service in table.services() {
                    let config: Vec<_> = service.entries().iter().map(|(k, v)| serde_json::json!([k, v])).collect();
                    out.insert(
                        service.name().to_owned(),
                        serde_json::json!({ "uuid": service.digest().as_str(), "config": config }),
                    );
                }
                serde_json::Value::Object(out)
            }
        };
        println!("{line}");
    }
    Ok(())
}
