//! The spawner: one long-lived thread that starts every replica's process (through
//! `setpriv --pdeathsig KILL` where there is one), so that children die with the agent.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// What the spawner thread is asked.
struct SpawnRequest {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    reply: oneshot::Sender<std::io::Result<Child>>,
}

/// Starts children from one long-lived thread, so that their parent-death signal (which
/// follows the forking thread) fires when the agent dies, not when a worker thread retires.
pub(super) struct Spawner {
    requests: Mutex<std::sync::mpsc::Sender<SpawnRequest>>,
}

impl Spawner {
    /// Starts the spawner thread; children it starts are driven by the current runtime.
    pub(super) fn start() -> Spawner {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        let runtime = tokio::runtime::Handle::current();
        let setpriv = find_setpriv();
        std::thread::Builder::new()
            .name("flotilla-spawner".into())
            .spawn(move || {
                let _context = runtime.enter();
                for request in rx {
                    let _ = request.reply.send(spawn_now(
                        setpriv.as_ref(),
                        &request.argv,
                        &request.env,
                    ));
                }
            })
            .expect("start the spawner thread");
        Spawner {
            requests: Mutex::new(tx),
        }
    }

    /// Starts `argv` with `env` added, in a process group of its own.
    pub(super) async fn spawn(
        &self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> std::io::Result<Child> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .requests
            .lock()
            .expect("spawner lock")
            .send(SpawnRequest { argv, env, reply });
        if sent.is_err() {
            return Err(std::io::Error::other("the spawner thread is gone"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread is gone")))
    }
}

fn find_setpriv() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("setpriv"))
        .find(|p| p.is_file())
}

fn spawn_now(
    setpriv: Option<&PathBuf>,
    argv: &[String],
    env: &[(String, String)],
) -> std::io::Result<Child> {
    let mut command = match setpriv {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    // The agent's stdout carries its own events; children write to its stderr.
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true);
    command.spawn()
}
