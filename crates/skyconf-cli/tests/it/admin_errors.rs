//! The admin port's errors a newcomer meets first, over real sockets on `skyconf serve`: the
//! framework's own refusals (an unknown route, a wrong method, a query that does not parse) answer
//! JSON like the API's errors (usability finding 15), and a write to a document mounted read-only
//! (a ConfigMap, a file in an image) answers 409 saying so and how to write, not 500.

use std::process::Command;

use skyconf_testkit::server::{AdminClient, Reply};

use crate::util::{Server, example_document, serve_command};

/// A request on a runtime of its own (these tests are not async).
fn send(admin: &AdminClient, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(admin.send(method, path, headers, body))
}

/// An answer's `error`, which must be a JSON string beside `details`.
fn error_of(reply: &Reply) -> String {
    assert_eq!(reply.content_type.as_deref(), Some("application/json"), "{reply:?}");
    let body = reply.json();
    assert!(body.get("details").is_some(), "{reply:?}");
    body["error"].as_str().unwrap_or_else(|| panic!("no error text: {reply:?}")).to_owned()
}

#[test]
fn framework_refusals_answer_json_like_the_api() {
    let server = Server::start(&example_document());
    let admin = AdminClient::new(&server.admin_addr);

    let unknown = send(&admin, "GET", "/api/v2/services", &[], "");
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(error_of(&unknown).contains("/api/v1/openapi.json"), "{unknown:?}");

    let json = [("content-type", "application/json")];
    let wrong_method = send(&admin, "POST", "/api/v1/status", &json, "{}");
    assert_eq!(wrong_method.status, 405, "{wrong_method:?}");
    assert!(error_of(&wrong_method).starts_with("/api/v1/status does not take POST"), "{wrong_method:?}");

    let bad_query = send(&admin, "GET", "/api/v1/instances?limit=abc", &[], "");
    assert_eq!(bad_query.status, 400, "{bad_query:?}");
    assert!(error_of(&bad_query).contains("limit"), "{bad_query:?}");

    // The page and the API's own answers are untouched.
    assert_eq!(send(&admin, "GET", "/", &[], "").content_type.as_deref(), Some("text/html; charset=utf-8"));
    let missing = send(&admin, "GET", "/api/v1/services/no-such-service", &[], "");
    assert_eq!(missing.status, 404);
    assert!(error_of(&missing).contains("no-such-service"), "{missing:?}");
}

/// How this machine can make a directory read-only for a `skyconf serve` process: a read-only
/// bind mount in a mount namespace of its own (a real read-only file system, as a ConfigMap or
/// an image gives), else, when not root, its permissions.
enum ReadOnly {
    Mount,
    Permissions,
}

fn read_only_means() -> Option<ReadOnly> {
    let unshare = Command::new("unshare").args(["-m", "true"]).output().is_ok_and(|o| o.status.success());
    if unshare {
        return Some(ReadOnly::Mount);
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    (!root).then_some(ReadOnly::Permissions)
}

#[test]
fn a_write_to_a_read_only_document_says_so_and_how_to_write() {
    let Some(means) = read_only_means() else {
        eprintln!("skipped: root without `unshare -m`: no way to make a directory read-only to this process");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mounted = dir.path().join("config");
    std::fs::create_dir(&mounted).unwrap();
    let document = mounted.join("agents.yaml");
    std::fs::copy(example_document(), &document).unwrap();
    let served = serve_command();
    let mut command = match means {
        ReadOnly::Mount => {
            let mut command = Command::new("unshare");
            let script = r#"dir=$1; shift; mount --bind -o ro "$dir" "$dir" && exec "$@""#;
            command.args(["-m", "sh", "-c", script, "sh"]).arg(&mounted).arg(served.get_program());
            command.args(served.get_args());
            command
        }
        ReadOnly::Permissions => {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&mounted, std::fs::Permissions::from_mode(0o555)).unwrap();
            std::fs::set_permissions(&document, std::fs::Permissions::from_mode(0o444)).unwrap();
            served
        }
    };
    command.arg("--file").arg(&document);
    let server = Server::spawn(command);
    let admin = AdminClient::new(&server.admin_addr);
    let before = std::fs::read_to_string(&document).unwrap();

    let json = [("content-type", "application/json")];
    let write = send(&admin, "PUT", "/api/v1/services/read-only-svc", &json, r#"{"config": {"k": "v"}}"#);
    assert_eq!(write.status, 409, "{write:?}");
    let error = error_of(&write);
    assert!(error.starts_with("the document is read-only here: cannot write "), "{error}");
    assert!(error.contains("serve a writable copy") && error.contains("etcd"), "how to write: {error}");
    assert_eq!(std::fs::read_to_string(&document).unwrap(), before, "nothing written");
    // The served table and reads are as before.
    let service = send(&admin, "GET", "/api/v1/services/read-only-svc", &[], "");
    assert_eq!(service.status, 404, "{service:?}");
    drop(server);
    if matches!(means, ReadOnly::Permissions) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&mounted, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
