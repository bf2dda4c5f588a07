//! The fleet's agents as processes: `skyconf agent` (skyconf-agent, tonic) and
//! `tests/fleet/java_agent.py` (grpcio, the Java agent's timing and `ManagementService` calls).
//! Each one polls one service on one replica, directly or through a [`TcpProxy`] of its own that
//! can fall silent. A thread reads each process' output and notes when its first answer came.

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use skyconf_testkit::tcp_proxy::TcpProxy;

use super::model::INTERVAL;
use crate::util::{python, read_lines, repo_root, skyconf};

/// Which client a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `skyconf agent`.
    Rust,
    /// `tests/fleet/java_agent.py` on grpcio.
    Java,
}

/// What to start.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    pub(super) kind: Kind,
    pub(super) service: String,
    /// The instance name it reports (`None`: it sends no `ManagementService` call).
    pub(super) instance: Option<String>,
    pub(super) replica: usize,
    /// Through a proxy of its own, which a partition silences.
    pub(super) proxied: bool,
    /// Applies the first configuration and refuses later ones (the Java simulator only).
    pub(super) refuses: bool,
}

/// A running agent process, killed when dropped.
#[derive(Debug)]
pub(super) struct Pod {
    pub(super) spec: Spec,
    pub(super) label: String,
    child: Child,
    /// When its first answer was read from its output.
    pub(super) answered: Arc<OnceLock<Instant>>,
    /// When it applied its first configuration (the same moment, for an agent that refuses).
    pub(super) applied: Arc<OnceLock<Instant>>,
    pub(super) proxy: Option<TcpProxy>,
    /// Its current connection in the model.
    pub(super) conn: usize,
    /// It was killed or stopped.
    pub(super) ended: bool,
    /// Its last lines on stderr, for messages.
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Pod {
    /// Starts `spec` against `target` (the replica's gRPC address); `stubs` are the compiled
    /// protocol for the Java simulator.
    pub(super) async fn start(spec: Spec, id: usize, target: SocketAddr, stubs: &Path) -> Self {
        let proxy = if spec.proxied { Some(TcpProxy::start(target).await) } else { None };
        let addr = proxy.as_ref().map_or(target, TcpProxy::addr).to_string();
        let interval = INTERVAL.as_secs().to_string();
        let mut command = match spec.kind {
            Kind::Rust => {
                let mut command = skyconf();
                command.args(["agent", "--addr", &addr, "--service", &spec.service, "--interval"]);
                command.arg(format!("{interval}s"));
                if let Some(instance) = &spec.instance {
                    command.args(["--instance", instance, "--property", "language=rust"]);
                }
                command
            }
            Kind::Java => {
                let instance = spec.instance.as_deref().expect("the Java simulator names its instance");
                let mut command = python();
                command.arg(repo_root().join("tests/fleet/java_agent.py")).arg("--stubs").arg(stubs);
                command.args(["--addr", &addr, "--service", &spec.service, "--instance", instance]);
                // keepAlive every 5 s (the Java agent's: 30 s), so that a reconnected agent, which its
                // next keepAlive names, is named soon.
                command.args(["--interval", &interval, "--timeout", "30", "--keep-alive", "5"]);
                if spec.refuses {
                    command.arg("--refuse");
                }
                command
            }
        };
        // The agents' own logs stay out of the test's.
        command.env_remove("SKYCONF_ADDR").env("SKYCONF_LOG", "warn");
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let answered = Arc::new(OnceLock::new());
        let applied = Arc::new(OnceLock::new());
        let (first, config) = (Arc::clone(&answered), Arc::clone(&applied));
        // The reading thread keeps draining the pipe after the receiver is dropped.
        drop(read_lines(child.stdout.take().unwrap(), move |line| {
            // skyconf agent prints one line per changed key, the simulator one per applied command.
            if line.contains("\"MODIFY\"") || line.contains("\"config\"") {
                let now = Instant::now();
                let _ = first.set(now);
                let _ = config.set(now);
            }
        }));
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr);
        let mut err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            let mut tail = tail.lock().unwrap();
            for line in text.lines().rev().take(10) {
                tail.push_front(line.to_owned());
            }
        });
        let kind = match spec.kind {
            Kind::Rust => "skyconf agent",
            Kind::Java => "java_agent.py",
        };
        let mut label = format!("pod {id} ({kind}, {}", spec.instance.as_deref().unwrap_or("no instance name"));
        if spec.proxied {
            label.push_str(", through a proxy");
        }
        if spec.refuses {
            label.push_str(", refuses changes");
        }
        label.push(')');
        Self { spec, label, child, answered, applied, proxy, conn: usize::MAX, ended: false, stderr }
    }

    /// SIGKILL; returns when the process is gone (its sockets closed by the kernel).
    pub(super) async fn kill(&mut self) -> Instant {
        self.ended = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
        Instant::now()
    }

    /// SIGTERM, then waits for the process to exit (SIGKILL after 10 s); returns when it is gone.
    pub(super) async fn terminate(&mut self) -> Instant {
        self.ended = true;
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let give_up = Instant::now() + Duration::from_secs(10);
        while Instant::now() < give_up {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.kill().await
    }

    /// Its last lines on stderr (read once it exited).
    pub(super) fn stderr_tail(&self) -> Vec<String> {
        self.stderr.lock().unwrap().iter().cloned().collect()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
