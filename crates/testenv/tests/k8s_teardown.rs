//! The test environment leaves nothing behind: a test that panics while holding a [`TestEnv`]
//! still stops every component (no process refers to its directory any more, the API port is
//! closed) and removes the directory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_testenv::{Options, TestEnv};

/// Processes whose command line mentions `dir` (etcd's data dir, the API servers' cert dirs,
/// the kubeconfigs of the others).
fn processes_using(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect()
}

#[test]
fn a_panicking_test_stops_every_component() {
    let seen: Mutex<Option<(String, PathBuf, usize)>> = Mutex::new(None);
    let outcome = std::panic::catch_unwind(|| {
        let env = TestEnv::start(&Options::default()).expect("the environment starts");
        let running = processes_using(env.dir()).len();
        *seen.lock().unwrap() = Some((
            env.cluster(0).server.clone(),
            env.dir().to_path_buf(),
            running,
        ));
        panic!("a test fails while the environment runs");
    });
    assert!(outcome.is_err(), "the closure panicked");
    let (server, dir, running) = seen.lock().unwrap().take().expect("the env started");
    // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (+ start.sh itself).
    assert!(running >= 5, "{running} processes used {}", dir.display());

    let addr = server.trim_start_matches("https://").to_string();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = processes_using(&dir);
        let port_open = std::net::TcpStream::connect(&addr).is_ok();
        if left.is_empty() && !port_open && !dir.exists() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the panic: processes {left:?}, API port open {port_open}, dir exists {}",
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
