//! The agent's router against nginx (Debian's package) on this machine, under the same load.
//!
//! Four upstream replicas (`flotilla demo-app` processes, zero latency: two run version 1.0 as
//! the stable subset, two run 2.0 as the canary) sit behind two proxies with the same weighted
//! split, canary 20 / stable 80 decided per request, and the same worker count (2: the agent's
//! `router.threads`, nginx's `worker_processes`):
//!
//! - the agent: `flotilla agent --config FILE`, the router with fixed endpoints;
//! - nginx: two `upstream` groups with keep-alive connections and `split_clients` on
//!   `$request_id` (a fresh random value per request).
//!
//! The load generator (`flotilla_agent::loadgen`, in this process, two worker threads) drives
//! each of direct calls to the replicas, nginx and the agent, in turn, [`ROUNDS`] times:
//!
//! - throughput: closed loop, [`CONNECTIONS`] keep-alive connections sending back to back for
//!   [`CLOSED_SECONDS`] s (direct: the connections spread evenly over the four replicas);
//! - throughput and latency under saturation with many clients ([`CASES`], nginx and the agent
//!   only): 2,000 and 8,000 HTTP/1.1 keep-alive connections, and HTTP/2 clients (h2c, 64
//!   connections with 4 streams in flight on each); the p99 is that of the closed loop's own
//!   requests. 8,000 is the most this machine allows: a process may hold 20,000 files (hard
//!   limit; raising it needs CAP_SYS_RESOURCE), and a proxy holds a connection to an upstream
//!   for every request in flight beside the client's, so 20,000 clients do not fit;
//! - latency: open loop at a fixed [`RATE`] requests/s for [`OPEN_SECONDS`] s (direct: the
//!   replicas get the rate split 40/40/10/10, as the proxies split it), p50 and p99 from the
//!   moment a request is issued to the end of its response, and the latency each proxy adds
//!   over direct calls.
//!
//! - CPU per request: the proxy's own CPU time (user and system, from `/proc`: the agent's
//!   process; nginx's master and workers) over its closed-loop runs, divided by the requests
//!   they answered. Throughput is shared with the load generator and the replicas on the same
//!   cores, so a proxy's throughput moves with the CPU it leaves them; this figure is the
//!   proxy's own cost, and its split shows how much of it is the kernel's TCP work, which is
//!   the same for any proxy making the same system calls; and the machine's busy CPU time per
//!   request (`/proc/stat`), from which the bench reports what the agent may spend per request
//!   for 1.1× nginx's throughput, beside the system time it spends.
//!
//! Figures are the medians over the rounds. Every process shares the machine's cores (two, on
//! this project's machine) with the others, as they would on one host. Run with
//! `cargo bench --bench router_vs_nginx` (needs `nginx` on PATH: `apt-get install -y nginx`);
//! `ROUTER_BENCH_ROUNDS`, `ROUTER_BENCH_CASES` (`http1-64` and the [`CASES`]' names) and
//! `ROUTER_BENCH_FLOTILLA` (another flotilla binary, e.g. an earlier commit's) vary the run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flotilla_agent::loadgen::{self, ClosedLoop, Report, Target};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The replicas: (subset, version).
const REPLICAS: [(&str, &str); 4] = [
    ("stable", "1.0"),
    ("stable", "1.0"),
    ("canary", "2.0"),
    ("canary", "2.0"),
];
/// The canary's share of requests, percent.
const CANARY_WEIGHT: u32 = 20;
/// The agent's router threads (`router.threads`), and nginx's `worker_processes`.
const WORKERS: usize = 2;
/// Keep-alive connections of the closed-loop runs.
const CONNECTIONS: usize = 64;
/// Length of one closed-loop run.
const CLOSED_SECONDS: u64 = 5;
/// Requests per second of the open-loop runs.
const RATE: f64 = 2_000.0;
/// Length of one open-loop run.
const OPEN_SECONDS: u64 = 5;
/// How many times each measurement is taken (the median is reported); `ROUTER_BENCH_ROUNDS`
/// sets another count.
const ROUNDS: usize = 5;

/// A closed-loop case of many clients beside the main one: its name (`ROUTER_BENCH_CASES`
/// names the cases to run, comma-separated; all by default), its shape and its length.
struct Case {
    name: &'static str,
    shape: ClosedLoop,
    seconds: u64,
}

/// The cases of many clients, each run on nginx and the agent.
const CASES: [Case; 3] = [
    Case {
        name: "http1-2000",
        shape: ClosedLoop {
            connections: 2_000,
            streams: 1,
            http2: false,
        },
        seconds: 5,
    },
    Case {
        name: "http1-8000",
        shape: ClosedLoop {
            connections: 8_000,
            streams: 1,
            http2: false,
        },
        seconds: 8,
    },
    Case {
        name: "h2-64x4",
        shape: ClosedLoop {
            connections: 64,
            streams: 4,
            http2: true,
        },
        seconds: 5,
    },
];

/// Child processes, stopped (SIGTERM, then SIGKILL after 5 s) and reaped on drop.
#[derive(Default)]
struct Children(Vec<(String, Child)>);

impl Children {
    fn spawn(&mut self, name: &str, command: &mut Command, log: &Path) -> Result<()> {
        let out = std::fs::File::create(log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        self.0.push((name.to_owned(), child));
        Ok(())
    }

    /// The process id of the child named `name`.
    fn pid(&self, name: &str) -> Option<u32> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, c)| c.id())
    }

    fn check_running(&mut self) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited early ({status})");
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &self.0 {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, child) in &mut self.0 {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port that nothing listens on right now.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Waits until `url` answers 200.
async fn wait_for(url: &str, children: &mut Children) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        children.check_running()?;
        let probe = loadgen::run_closed(&[Target::new(url)], 1, Duration::from_secs(2), 1).await?;
        if probe.status_counts.get(&200) == Some(&1) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} did not answer 200 within 30 s: {probe:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// nginx's configuration: HTTP/1.1 on `port`, HTTP/2 with prior knowledge (h2c) on `h2_port`,
/// through its `http2` listen parameter (the agent's router takes both on one port).
fn nginx_config(dir: &Path, port: u16, h2_port: u16, upstreams: &[(&str, u16)]) -> String {
    let group = |subset: &str| {
        upstreams
            .iter()
            .filter(|(s, _)| *s == subset)
            .map(|(_, p)| format!("        server 127.0.0.1:{p};\n"))
            .collect::<String>()
    };
    // One server per listener, the same proxying in each.
    let server = |listen: String| {
        format!(
            "\x20   server {{\n\
             \x20       listen {listen} reuseport backlog=4096;\n\
             \x20       location / {{\n\
             \x20           proxy_pass http://$subset;\n\
             \x20           proxy_http_version 1.1;\n\
             \x20           proxy_set_header Connection \"\";\n\
             \x20       }}\n\
             \x20   }}\n"
        )
    };
    let d = dir.display();
    format!(
        "worker_processes {WORKERS};\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         worker_rlimit_nofile 19000;\n\
         events {{ worker_connections 18000; }}\n\
         http {{\n\
         \x20   access_log off;\n\
         \x20   client_body_temp_path {d}/client_body;\n\
         \x20   proxy_temp_path {d}/proxy;\n\
         \x20   fastcgi_temp_path {d}/fastcgi;\n\
         \x20   uwsgi_temp_path {d}/uwsgi;\n\
         \x20   scgi_temp_path {d}/scgi;\n\
         \x20   keepalive_requests 1000000;\n\
         \x20   upstream stable {{\n{stable}        keepalive 8192;\n    }}\n\
         \x20   upstream canary {{\n{canary}        keepalive 8192;\n    }}\n\
         \x20   split_clients \"${{request_id}}\" $subset {{\n\
         \x20       {CANARY_WEIGHT}% canary;\n\
         \x20       * stable;\n\
         \x20   }}\n\
         {http1}{h2}\
         }}\n",
        stable = group("stable"),
        canary = group("canary"),
        http1 = server(format!("127.0.0.1:{port}")),
        h2 = server(format!("127.0.0.1:{h2_port} http2")),
    )
}

fn agent_config(router: u16, control: u16, upstreams: &[(&str, u16)]) -> String {
    let group = |subset: &str| {
        upstreams
            .iter()
            .filter(|(s, _)| *s == subset)
            .map(|(_, p)| format!("\"127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "cluster: bench\n\
         router: {{listen: \"127.0.0.1:{router}\", threads: {WORKERS}}}\n\
         control: {{listen: \"127.0.0.1:{control}\"}}\n\
         weights: {{canary: {CANARY_WEIGHT}}}\n\
         subsets:\n\
         \x20 stable: {{endpoints: [{}]}}\n\
         \x20 canary: {{endpoints: [{}]}}\n",
        group("stable"),
        group("canary")
    )
}

/// Where the load goes for one of the three ways of calling the replicas.
struct Way {
    name: &'static str,
    /// The proxy's process (nginx's master, whose workers are its children), if any.
    process: Option<u32>,
    /// The closed-loop targets (connections spread evenly over them).
    closed: Vec<Target>,
    /// The open-loop targets, each with its share of [`RATE`].
    open: Vec<Target>,
}

#[derive(Default)]
struct Samples {
    throughput: Vec<f64>,
    /// The proxy's CPU time over its closed-loop runs (user, system), the whole machine's busy
    /// time over them, and their requests.
    cpu: Cpu,
    machine: f64,
    requests: u64,
    p50: Vec<f64>,
    p99: Vec<f64>,
    failed: u64,
    not_ok: u64,
}

/// Clock ticks per second, the unit of `/proc`'s CPU times.
fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// The whole machine's busy CPU time, seconds (every state of `/proc/stat`'s `cpu` line but
/// idle and iowait).
fn machine_busy() -> f64 {
    let ticks = clock_ticks();
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    line.split_whitespace()
        .skip(1)
        .enumerate()
        // user nice system idle iowait irq softirq steal (guest time is counted in user).
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum::<f64>()
        / ticks
}

/// CPU time, seconds: user and system.
#[derive(Default, Clone, Copy)]
struct Cpu {
    user: f64,
    system: f64,
}

impl Cpu {
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: self.user - before.user,
            system: self.system - before.system,
        }
    }

    fn add(&mut self, other: Cpu) {
        self.user += other.user;
        self.system += other.system;
    }
}

/// The CPU time of the process `pid` (all its threads) and of its direct children (nginx's
/// workers), from `/proc` (clock ticks of 10 ms: a 5 s run at one core is ~500 of them).
fn cpu_of(pid: u32) -> Cpu {
    let ticks = clock_ticks();
    let mut total = Cpu::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in entries.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command name, which ends with the last ')': state ppid … utime
        // (14th field) stime (15th).
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let own: Option<u32> = head.split_whitespace().next().and_then(|p| p.parse().ok());
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid: Option<u32> = fields.get(1).and_then(|p| p.parse().ok());
        if own != Some(pid) && ppid != Some(pid) {
            continue;
        }
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        total.add(Cpu {
            user: field(11) / ticks,
            system: field(12) / ticks,
        });
    }
    total
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn not_ok(report: &Report) -> u64 {
    report
        .status_counts
        .iter()
        .filter(|(code, _)| **code != 200)
        .map(|(_, n)| n)
        .sum()
}

async fn bench() -> Result<()> {
    let nginx = find_on_path("nginx").context(
        "nginx is not installed; this benchmark runs Debian's package: \
         apt-get install -y --no-install-recommends nginx",
    )?;
    // `ROUTER_BENCH_FLOTILLA=PATH`: another build of flotilla (an earlier commit's, for a
    // before-and-after on the same machine without rebuilding the bench).
    let flotilla = std::env::var("ROUTER_BENCH_FLOTILLA")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_flotilla").to_owned());
    let flotilla = flotilla.as_str();
    let dir = tempfile::tempdir()?;
    let mut children = Children::default();

    let mut upstreams = Vec::new();
    for (i, (subset, version)) in REPLICAS.iter().enumerate() {
        let port = free_port()?;
        children.spawn(
            &format!("demo-app {version} #{i}"),
            Command::new(flotilla)
                .args(["demo-app", "--version", version, "--port"])
                .arg(port.to_string()),
            &dir.path().join(format!("upstream-{i}.log")),
        )?;
        upstreams.push((*subset, port));
    }
    for (_, port) in &upstreams {
        wait_for(&format!("http://127.0.0.1:{port}/healthz"), &mut children).await?;
    }

    let (router_port, control_port) = (free_port()?, free_port()?);
    let agent_file = dir.path().join("agent.yaml");
    std::fs::write(
        &agent_file,
        agent_config(router_port, control_port, &upstreams),
    )?;
    children.spawn(
        "flotilla agent",
        Command::new(flotilla)
            .arg("agent")
            .arg("--config")
            .arg(&agent_file),
        &dir.path().join("agent.log"),
    )?;

    let (nginx_port, nginx_h2_port) = (free_port()?, free_port()?);
    let nginx_dir = dir.path().join("nginx");
    std::fs::create_dir_all(&nginx_dir)?;
    let nginx_file = nginx_dir.join("nginx.conf");
    std::fs::write(
        &nginx_file,
        nginx_config(&nginx_dir, nginx_port, nginx_h2_port, &upstreams),
    )?;
    children.spawn(
        "nginx",
        Command::new(&nginx)
            .arg("-p")
            .arg(&nginx_dir)
            .arg("-e")
            .arg(nginx_dir.join("error.log"))
            .arg("-c")
            .arg(&nginx_file)
            .args(["-g", "daemon off;"]),
        &dir.path().join("nginx.log"),
    )?;
    let agent_url = format!("http://127.0.0.1:{router_port}/bench");
    let nginx_url = format!("http://127.0.0.1:{nginx_port}/bench");
    let nginx_h2_url = format!("http://127.0.0.1:{nginx_h2_port}/bench");
    wait_for(&agent_url, &mut children).await?;
    wait_for(&nginx_url, &mut children).await?;

    let direct: Vec<String> = upstreams
        .iter()
        .map(|(_, p)| format!("http://127.0.0.1:{p}/bench"))
        .collect();
    let replica_share = |subset: &str| {
        let weight = if subset == "canary" {
            f64::from(CANARY_WEIGHT)
        } else {
            f64::from(100 - CANARY_WEIGHT)
        };
        let replicas = upstreams.iter().filter(|(s, _)| *s == subset).count() as f64;
        weight / 100.0 / replicas
    };
    let ways = [
        Way {
            name: "direct",
            process: None,
            closed: direct.iter().map(Target::new).collect(),
            open: upstreams
                .iter()
                .zip(&direct)
                .map(|((subset, _), url)| Target {
                    rate: Some(RATE * replica_share(subset)),
                    ..Target::new(url)
                })
                .collect(),
        },
        Way {
            name: "nginx",
            process: children.pid("nginx"),
            closed: vec![Target::new(&nginx_url)],
            open: vec![Target::new(&nginx_url)],
        },
        Way {
            name: "agent",
            process: children.pid("flotilla agent"),
            closed: vec![Target::new(&agent_url)],
            open: vec![Target::new(&agent_url)],
        },
    ];

    // Warm-up: connections, pools and caches.
    for way in &ways {
        loadgen::run_closed(&way.closed, CONNECTIONS, Duration::from_secs(1), u64::MAX).await?;
    }
    let rounds = match std::env::var("ROUTER_BENCH_ROUNDS") {
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("ROUTER_BENCH_ROUNDS={v:?} is not a positive count"))?,
        Err(_) => ROUNDS,
    };
    let chosen: Option<Vec<String>> = std::env::var("ROUTER_BENCH_CASES")
        .ok()
        .map(|v| v.split(',').map(|c| c.trim().to_owned()).collect());
    if let Some(names) = &chosen {
        for name in names {
            if name != "http1-64" && !CASES.iter().any(|c| c.name == name) {
                bail!(
                    "ROUTER_BENCH_CASES names {name:?}; the cases are http1-64, {}",
                    CASES.map(|c| c.name).join(", ")
                );
            }
        }
    }
    let runs = |name: &str| chosen.as_ref().is_none_or(|c| c.iter().any(|n| n == name));
    let mut samples: Vec<Samples> = ways.iter().map(|_| Samples::default()).collect();
    for round in 0..if runs("http1-64") { rounds } else { 0 } {
        // A different order each round, so that no way always runs first.
        for k in 0..ways.len() {
            let i = (k + round) % ways.len();
            let way = &ways[i];
            children.check_running()?;
            let before = way.process.map(cpu_of);
            let machine_before = machine_busy();
            let closed = loadgen::run_closed(
                &way.closed,
                CONNECTIONS,
                Duration::from_secs(CLOSED_SECONDS),
                u64::MAX,
            )
            .await?;
            if let (Some(pid), Some(before)) = (way.process, before) {
                samples[i].cpu.add(cpu_of(pid).since(before));
                samples[i].machine += machine_busy() - machine_before;
                samples[i].requests += closed.completed;
            }
            let open =
                loadgen::run(&way.open, RATE, Duration::from_secs(OPEN_SECONDS), u64::MAX).await?;
            let s = &mut samples[i];
            s.throughput.push(closed.achieved_rate);
            s.p50.push(open.latency_ms.p50);
            s.p99.push(open.latency_ms.p99);
            s.failed += closed.failed + open.failed + open.not_sent;
            s.not_ok += not_ok(&closed) + not_ok(&open);
            eprintln!(
                "round {round} {:>6}: {:>8.0} req/s closed loop; open loop p50 {:.3} ms p99 {:.3} ms",
                way.name, closed.achieved_rate, open.latency_ms.p50, open.latency_ms.p99
            );
        }
    }

    // The cases of many clients: nginx and the agent, in turn, each round.
    let mut many: Vec<(&Case, [Samples; 2])> = Vec::new();
    for case in CASES.iter().filter(|c| runs(c.name)) {
        let targets = |proxy: usize| {
            let url = match (proxy, case.shape.http2) {
                (0, false) => &nginx_url,
                (0, true) => &nginx_h2_url,
                _ => &agent_url,
            };
            vec![Target::new(url)]
        };
        let mut got = [Samples::default(), Samples::default()];
        for round in 0..rounds {
            for k in 0..2 {
                let proxy = (k + round) % 2;
                children.check_running()?;
                let closed = loadgen::run_closed_with(
                    &targets(proxy),
                    case.shape,
                    Duration::from_secs(case.seconds),
                    u64::MAX,
                )
                .await?;
                let s = &mut got[proxy];
                s.throughput.push(closed.achieved_rate);
                s.p50.push(closed.latency_ms.p50);
                s.p99.push(closed.latency_ms.p99);
                s.failed += closed.failed;
                s.not_ok += not_ok(&closed);
                eprintln!(
                    "round {round} {:>10} {:>6}: {:>8.0} req/s; p50 {:.3} ms p99 {:.3} ms; {} failed{}",
                    case.name,
                    ["nginx", "agent"][proxy],
                    closed.achieved_rate,
                    closed.latency_ms.p50,
                    closed.latency_ms.p99,
                    closed.failed,
                    closed
                        .targets
                        .first()
                        .and_then(|t| t.errors.first())
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
                // The closed connections' sockets leave TIME_WAIT before the next run.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        many.push((case, got));
    }
    if !many.is_empty() {
        println!(
            "many clients, closed loop, nginx and the agent, medians of {rounds} rounds (p50/p99 of the closed loop's requests):"
        );
        println!(
            "{:<12} {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
            "case",
            "nginx req/s",
            "agent req/s",
            "ratio",
            "nginx p50",
            "agent p50",
            "nginx p99",
            "agent p99",
            "failed",
            "non-200"
        );
        for (case, [n, a]) in &many {
            println!(
                "{:<12} {:>12.0} {:>12.0} {:>6.2}x {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>8} {:>8}",
                case.name,
                median(&n.throughput),
                median(&a.throughput),
                median(&a.throughput) / median(&n.throughput),
                median(&n.p50),
                median(&a.p50),
                median(&n.p99),
                median(&a.p99),
                n.failed + a.failed,
                n.not_ok + a.not_ok
            );
        }
    }
    if !runs("http1-64") {
        drop(children);
        return Ok(());
    }

    let figures: Vec<(f64, f64, f64)> = samples
        .iter()
        .map(|s| (median(&s.throughput), median(&s.p50), median(&s.p99)))
        .collect();
    let (direct_fig, nginx_fig, agent_fig) = (figures[0], figures[1], figures[2]);
    println!(
        "router vs nginx: {} upstream replicas (demo-app, zero latency), split canary {CANARY_WEIGHT} / stable {} per request, {WORKERS} workers each",
        REPLICAS.len(),
        100 - CANARY_WEIGHT
    );
    println!(
        "throughput: closed loop, {CONNECTIONS} keep-alive connections, {CLOSED_SECONDS} s; latency: open loop at {RATE} req/s, {OPEN_SECONDS} s; medians of {rounds} rounds"
    );
    println!(
        "{:<8} {:>12} {:>10} {:>10} {:>12} {:>12} {:>8} {:>8}",
        "", "req/s", "p50 ms", "p99 ms", "added p50", "added p99", "failed", "non-200"
    );
    for ((way, s), (rate, p50, p99)) in ways.iter().zip(&samples).zip(&figures) {
        println!(
            "{:<8} {:>12.0} {:>10.3} {:>10.3} {:>12.3} {:>12.3} {:>8} {:>8}",
            way.name,
            rate,
            p50,
            p99,
            p50 - direct_fig.1,
            p99 - direct_fig.2,
            s.failed,
            s.not_ok
        );
    }
    let per_request = |s: &Samples| {
        let n = s.requests.max(1) as f64;
        (s.cpu.user * 1e6 / n, s.cpu.system * 1e6 / n)
    };
    let ((nginx_user, nginx_system), (agent_user, agent_system)) =
        (per_request(&samples[1]), per_request(&samples[2]));
    println!(
        "proxy CPU per request over the closed-loop runs (the proxy's processes, /proc): nginx {:.1} µs (user {nginx_user:.1}, system {nginx_system:.1}), agent {:.1} µs (user {agent_user:.1}, system {agent_system:.1}): agent/nginx {:.2}x (user {:.2}x, system {:.2}x)",
        nginx_user + nginx_system,
        agent_user + agent_system,
        (agent_user + agent_system) / (nginx_user + nginx_system),
        agent_user / nginx_user,
        agent_system / nginx_system,
    );
    // What 1.1x would take: the load generator and the replicas cost the same per request
    // behind either proxy, so the machine's CPU per request behind nginx, divided by 1.1, less
    // theirs, is what the agent may spend.
    let machine_per_request = |s: &Samples| s.machine * 1e6 / s.requests.max(1) as f64;
    let others = machine_per_request(&samples[1]) - nginx_user - nginx_system;
    let budget = machine_per_request(&samples[1]) / 1.1 - others;
    println!(
        "machine CPU per request (all processes, /proc/stat): behind nginx {:.1} µs, behind the agent {:.1} µs; the load generator and replicas {others:.1} µs; so 1.1x nginx's throughput leaves the agent {budget:.1} µs per request, against its system time alone of {agent_system:.1} µs",
        machine_per_request(&samples[1]),
        machine_per_request(&samples[2]),
    );
    let ratio = agent_fig.0 / nginx_fig.0;
    let added_p99 = agent_fig.2 - direct_fig.2;
    println!(
        "agent/nginx throughput {ratio:.2}x (target >= 1.1x: {}); agent added p99 {added_p99:.3} ms (target <= nginx's: {}); nginx added p99 {:.3} ms",
        if ratio >= 1.1 { "met" } else { "MISSED" },
        if added_p99 <= nginx_fig.2 - direct_fig.2 {
            "met"
        } else {
            "MISSED"
        },
        nginx_fig.2 - direct_fig.2
    );
    drop(children);
    Ok(())
}

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        // `cargo test --benches` and `cargo bench -- --list` probe bench binaries: nothing to list.
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench())
}
