//! Real Redis for the fleet tests: `redis-server` on a free loopback port
//! with persistence off, stopped on drop; and a 3-node Redis Cluster.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server gets to answer PING after it is started.
const START_PATIENCE: Duration = Duration::from_secs(5);

/// A free loopback port; with `bus`, port + 10 000 is free too (the cluster bus).
pub fn free_port(bus: bool) -> u16 {
    for _ in 0..200 {
        let Ok(l) = TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(port) = l.local_addr().map(|a| a.port()) else {
            continue;
        };
        if !bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// One `redis-server`, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    extra: Vec<String>,
}

impl RedisServer {
    /// A standalone Redis on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_on(free_port(false), false)
    }

    /// A Redis on `port` (again after [`RedisServer::kill`]: a restart, empty).
    pub fn start_on(port: u16, cluster: bool) -> RedisServer {
        RedisServer::start_with(port, cluster, Vec::new())
    }

    /// A Redis on `port` with `extra` flags (e.g. a TLS port).
    pub fn start_with(port: u16, cluster: bool, extra: Vec<String>) -> RedisServer {
        RedisServer::launch(port, cluster, extra, false)
    }

    fn launch(port: u16, cluster: bool, extra: Vec<String>, keep_data: bool) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("retryd-redis-{}-{port}", std::process::id()));
        if !keep_data {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::create_dir_all(&dir).expect("temp dir for redis-server");
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(&extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &format!("nodes-{port}.conf"),
                "--cluster-node-timeout",
                "2000",
            ]);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server (apt-get install -y redis-server): {e}"));
        let server = RedisServer {
            child: Some(child),
            port,
            dir,
            cluster,
            extra,
        };
        server.ready()
    }

    fn ready(self) -> RedisServer {
        let deadline = Instant::now() + START_PATIENCE;
        while !self.pings() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING in {START_PATIENCE:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self
    }

    /// A Sentinel (redis-server in sentinel mode) watching the master at
    /// `master_port` as `mymaster`, quorum 1, down after 500 ms.
    pub fn start_sentinel(master_port: u16) -> RedisServer {
        let port = free_port(false);
        let dir = std::env::temp_dir().join(format!("retryd-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir for the sentinel");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor mymaster 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds mymaster 500\nsentinel failover-timeout mymaster 3000\n",
                dir.display()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server --sentinel: {e}"));
        RedisServer {
            child: Some(child),
            port,
            dir,
            cluster: false,
            extra: Vec::new(),
        }
        .ready()
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pings(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Stops it now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes it (SIGSTOP): connections stay open and nothing answers, as
    /// a hung Redis would.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused Redis go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid; no memory is shared.
        let r = unsafe { libc::kill(pid, sig) };
        assert_eq!(r, 0, "signal {sig} to redis-server");
    }

    /// Starts it again on the same port, empty (persistence is off).
    pub fn restart(&mut self) {
        self.relaunch(false);
    }

    /// Starts it again on the same port with what the last `SAVE` wrote.
    pub fn restart_keeping_data(&mut self) {
        self.relaunch(true);
    }

    fn relaunch(&mut self, keep_data: bool) {
        self.kill();
        let again = RedisServer::launch(self.port, self.cluster, self.extra.clone(), keep_data);
        let mut again = std::mem::ManuallyDrop::new(again);
        self.child = again.child.take();
    }

    /// `redis-cli -p <port> args…`, its output trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters on loopback joined into one Redis Cluster.
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and creates the cluster; panics
    /// with what went wrong when it cannot be created.
    pub fn start() -> RedisCluster {
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 3 {
            let p = free_port(true);
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let nodes: Vec<RedisServer> = ports.iter().map(|&p| RedisServer::start_on(p, true)).collect();
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = cluster.nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"])
                    .lines()
                    .any(|l| l.trim() == "cluster_state:ok")
            });
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the 3-node cluster did not reach cluster_state:ok in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// One node's URL (the client finds the others).
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// Every node's URL, comma-separated (cluster seeds).
    pub fn seeds(&self) -> String {
        self.nodes.iter().map(RedisServer::url).collect::<Vec<_>>().join(",")
    }
}
