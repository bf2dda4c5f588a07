//! `skyconf-bench`'s command line: the address spellings `skyconf`'s client commands take, and
//! `--help` documenting the exit statuses.

use crate::util::{served_document, skyconf_bench};

#[test]
fn addresses_take_the_spellings_skyconf_takes() {
    let (_dir, _, served) = served_document("1", "2");
    let uri = format!("http://{}", served.addr);
    let bench = skyconf_bench()
        .args(["--addr", &uri, "-n", "20", "-c", "1", "-m", "2", "--warmup", "0s", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(bench.status.success(), "{bench:?}");
    let report: serde_json::Value = serde_json::from_slice(&bench.stdout).unwrap();
    assert_eq!(report["addr"], uri.as_str());

    // An unsupported spelling is a usage error, said before connecting.
    let bad = skyconf_bench().args(["--addr", "grpc://127.0.0.1:1"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("use HOST:PORT, http://HOST:PORT or https://HOST:PORT"), "{stderr}");
}

#[test]
fn help_documents_the_exit_statuses() {
    let help = skyconf_bench().arg("--help").output().unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("Exit status:\n  0  "), "{help}");
    for tool in ["agents", "held", "propagation", "revert", "reload", "document", "soak", "sink"] {
        assert!(help.contains(&format!("  {tool} ")), "`--help` lists `{tool}`:\n{help}");
    }
}
